"""The daemon log check (tests/support/logcheck.py): what it finds, what it lets pass."""

from __future__ import annotations

import json

from tests.support.logcheck import LogCheck

TEXT = """\
2026-12-01 12:00:00,001 INFO memfs: mounted 2 store(s) at /r
2026-12-01 12:00:01,002 WARNING memfs.sync: sync tick failed: 503 (next attempt in 5s)
2026-12-01 12:00:02,003 ERROR memfs.sync: sync tick crashed; the next one runs in 5s
Traceback (most recent call last):
  File "engine.py", line 1, in timer
    await self.sync_now(force=False)
KeyError: 'mem_1'
Traceback (most recent call last):
  File "x.py", line 2, in <module>
ValueError: bare
2026-12-01 12:00:03,004 INFO memfs: stopping
"""


def test_error_records_and_tracebacks_are_found_and_warnings_pass(tmp_path):
    log = tmp_path / "memfs.log"
    check = LogCheck()
    check.watch(log, "daemon")
    log.write_text(TEXT)
    found = check.collect()
    assert [f.where for f in found] == ["daemon:3", "daemon:8"]
    assert "sync tick crashed" in found[0].text and "KeyError: 'mem_1'" in found[0].text
    assert found[1].text == "Traceback (most recent call last): ... ValueError: bare"
    assert check.collect() == []  # each line is checked once
    with open(log, "a") as f:
        f.write(json.dumps({"level": "error", "logger": "memfs", "message": "boom"}) + "\n")
        f.write(json.dumps({"level": "info", "logger": "memfs", "message": "fine"}) + "\n")
        f.write("2026-12-01 12:00:04,005 CRITICAL memfs: half a li")  # not yet a line
    [f] = check.collect()
    assert f.where == "daemon:12" and '"boom"' in f.text


def test_allowed_patterns_and_a_registration_starts_at_the_files_end(tmp_path):
    log = tmp_path / "serve.stderr"
    log.write_text("2026-12-01 12:00:00,001 ERROR memfs.service: from an earlier run\n")
    check = LogCheck()
    check.watch(log)
    with open(log, "a") as f:
        f.write("2026-12-01 12:00:01,001 ERROR memfs: cannot download the memory stores\n")
        f.write("2026-12-01 12:00:02,001 ERROR memfs: something else\n")
    check.allow(r"cannot download")
    [f] = check.collect()
    assert f.where == "serve.stderr:3" and f.text.endswith("something else")
