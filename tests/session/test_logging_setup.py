"""The one log setup (memfs/logging_setup.py), in a child process: it replaces the root logger's
handlers, and this test process's logging (pytest's capture) must not be touched."""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import logging, sys
from memfs.logging_setup import setup_logging
setup_logging(sys.argv[1])
setup_logging(sys.argv[1])  # twice: still one line per record
logging.getLogger("memfs.test").info("hello %s", "there")
logging.getLogger("httpx").info("HTTP Request: GET http://127.0.0.1/ 200")  # held to warnings
try:
    1 / 0
except ZeroDivisionError:
    logging.getLogger("memfs.test").exception("it failed")
"""


def _run(fmt: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", CHILD, fmt], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    return proc.stderr.splitlines()


def test_text_lines_once_each_without_httpx_info():
    lines = _run("text")
    assert sum("hello there" in line for line in lines) == 1
    assert not any("HTTP Request" in line for line in lines)
    first = next(line for line in lines if "hello there" in line)
    assert " INFO memfs.test: hello there" in first
    assert any("ZeroDivisionError" in line for line in lines)


def test_json_one_object_per_record():
    records = [json.loads(line) for line in _run("json")]
    assert [(r["level"], r["logger"], r["message"]) for r in records] == [
        ("info", "memfs.test", "hello there"),
        ("error", "memfs.test", "it failed"),
    ]
    assert "ZeroDivisionError" in records[1]["exception"]
    assert records[0]["time"].endswith("Z")
