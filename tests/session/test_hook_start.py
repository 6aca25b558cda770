"""`memfs sync`, the per-call hook, as a process: what it imports and how it reads JSON.

The hook runs before every tool call, so its start is its cost (docs/SEMANTICS.md#d-commands):
these tests pin that the installed `memfs` command reaches the daemon without importing the
modules that made it slow (json through re, socket through enum), and that the `_json`-based
reader and writer it uses instead (memfs/session/_cpython.py) agree with the json module."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.session import _cpython, control

# What the hook must not import: each was a share of its start (json pulls re, re pulls enum and
# functools; socket pulls enum and selectors), or belongs to the full command line.
HEAVY = {
    "json",
    "re",
    "enum",
    "socket",
    "selectors",
    "argparse",
    "typing",
    "pathlib",
    "logging",
    "httpx",
    "trio",
    # the command line's module (and its `from __future__`): bin/memfs goes straight to the hook
    "memfs.cli",
    "__future__",
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.sampled_from([None, 2]), st.sampled_from(["", " ", "\n", " \t\r\n"]))
def test_loads_reads_what_json_writes(value, indent, pad):
    text = pad + json.dumps(value, indent=indent, ensure_ascii=False) + pad
    assert _cpython.loads(text) == json.loads(text)
    assert _cpython.loads(text.encode()) == json.loads(text)


def test_loads_reads_json_s_constants_and_refuses_what_json_refuses():
    got = _cpython.loads('{"a": NaN, "b": -Infinity, "c": 1e400, "d": "\\u00e9\\ud83d\\ude00"}')
    assert math.isnan(got["a"]) and got["b"] == -math.inf and got["c"] == math.inf
    assert got["d"] == "é😀"
    for bad in ("", "   ", "{", "[1,]", "1 2", '{"a":1}x', "'a'", '{"a" 1}', '"\\x"', "tru"):
        with pytest.raises(ValueError):
            json.loads(bad)
        with pytest.raises(ValueError):
            _cpython.loads(bad)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(), st.none() | st.booleans() | st.integers() | st.text(), max_size=6))
def test_dumps_writes_what_json_reads(value):
    assert json.loads(_cpython.dumps(value)) == value


def test_dumps_hands_anything_else_to_json():
    for value in ({"a": 1.5}, {"a": [1, {"b": None}]}, [1, 2], {1: "x"}, "s"):
        assert json.loads(_cpython.dumps(value)) == json.loads(json.dumps(value))


class _FakeDaemon:
    """The daemon's end of the control socket, as memfs/session/daemon.py speaks it: one answer
    line per request line, a ping first."""

    def __init__(self, path: Path, answer: dict):
        self.requests: list[dict] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(4)
        self.answer = answer
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                buf = b""
                while True:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        req = json.loads(line)
                        self.requests.append(req)
                        ans = {"ok": True, "pong": True} if req.get("op") == "ping" else self.answer
                        conn.sendall(json.dumps(ans).encode() + b"\n")

    def close(self) -> None:
        self.sock.close()


def _memfs_command() -> str:
    cmd = Path(sys.executable).parent / "memfs"
    assert cmd.exists(), f"the installed memfs command is missing: {cmd}"
    return str(cmd)


def _imported(stderr: str) -> set[str]:
    """The modules a PYTHONPROFILEIMPORTTIME=1 run imported."""
    return {
        line.split("|")[-1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and not line.endswith("package")
    }


def _profiled(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30, **kw)


@pytest.fixture
def registered(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """(root, state dir) of a mount registered as a live daemon registers one."""
    state, root = tmp_path / "state", tmp_path / "root"
    state.mkdir()
    root.mkdir()
    monkeypatch.setenv("MEMFS_RUNTIME_DIR", str(tmp_path / "run"))
    control.register(str(root), state, os.getpid())
    return root, state


@pytest.mark.timeout(60)
def test_the_memfs_command_s_sync_imports_neither_json_nor_socket_nor_re(registered):
    root, state = registered
    daemon = _FakeDaemon(state / control.SOCKET_NAME, {"ok": True, "ran": False, "next_in": 3.0})
    try:
        out = _profiled([_memfs_command(), "sync", "--root", str(root)])
    finally:
        daemon.close()
    assert out.returncode == 0, out.stderr
    assert out.stdout == "memfs sync: not due (next in 3.0s)\n"
    assert daemon.requests == [{"op": "ping"}, {"op": "sync", "force": False, "wait": False}]
    imported = _imported(out.stderr)
    assert "memfs.session.hook" in imported  # the profile is of the real path
    assert not imported & HEAVY, sorted(imported & HEAVY)


@pytest.mark.timeout(60)
def test_the_hook_s_errors_and_json_output_still_come_from_the_full_modules(registered, tmp_path):
    root, state = registered
    answer = {"ok": False, "ran": True, "result": "failed", "error": "the store answered 503 ünïcode"}
    daemon = _FakeDaemon(state / control.SOCKET_NAME, answer)
    try:
        failed = subprocess.run(
            [_memfs_command(), "sync", "--root", str(root), "--force"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        as_json = subprocess.run(
            [_memfs_command(), "sync", "--root", str(root), "--json"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        daemon.close()
    assert failed.returncode == 1
    assert failed.stdout == "memfs sync: failed\n"
    assert "the store answered 503 ünïcode" in failed.stderr
    assert json.loads(as_json.stdout) == answer
    nothing = subprocess.run(
        [_memfs_command(), "sync", "--root", str(tmp_path / "elsewhere")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert nothing.returncode == 1 and "no memfs mount at" in nothing.stderr


@pytest.mark.timeout(90)
def test_every_other_command_and_sync_s_full_parser_start_as_usual(tmp_path):
    """Only a plain `memfs sync` skips the command line's parser; anything else (and
    `memfs sync --help`, which the fast path hands to the full parser) gets the full one."""
    version = subprocess.run([_memfs_command(), "--version"], capture_output=True, text=True, timeout=30)
    assert version.returncode == 0 and version.stdout.startswith("memfs "), version.stderr
    helped = _profiled([_memfs_command(), "sync", "--help"])
    assert helped.returncode == 0, helped.stderr
    assert "--root" in helped.stdout and "--force" in helped.stdout
    assert "argparse" in _imported(helped.stderr)
    wrong = subprocess.run(
        [_memfs_command(), "sync", "--no-such-flag"], capture_output=True, text=True, timeout=30
    )
    assert wrong.returncode == 2 and "unrecognized arguments: --no-such-flag" in wrong.stderr
    status = subprocess.run(
        [_memfs_command(), "status", "--root", str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert status.returncode != 0 and "Traceback" not in status.stderr, status.stderr
