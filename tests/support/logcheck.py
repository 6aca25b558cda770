"""The daemon log check: a test fails when a process it started logged an unexpected error.

The mount daemon's and the service's catch-alls (a crashed tick, a FUSE handler that raised, an
unhandled request) keep the process up and turn the bug into a log line; without this check the
test that provoked it passes. So every process the test helpers start registers its log file here
(`watch`): `memfs mount`'s state-dir `memfs.log` (tests/support/sandbox.py), the devmount's log
(tests/support/mounts.py) and `memfs serve`'s stderr (tests/support/service.py). At each test's
teardown (the autouse fixture in tests/conftest.py, for the suites in its LOG_CHECKED) the lines written since the last check are
scanned, and the test fails naming every finding:

- a Python traceback ("Traceback (most recent call last):", "Exception ignored in ..."), named by
  its first line and the exception line that ends it;
- a log record at ERROR or CRITICAL (the text format "<time> ERROR <logger>: ..." and the JSON
  format's "level": "error" both count).

A WARNING is an expected outcome (a failed tick, a refused upload) and passes. A test that expects
an error allow-lists it by regex, searched in the finding's text:
`@pytest.mark.expected_log(r"cannot download the memory stores")`, or at run time through the
`daemon_logs` fixture: `daemon_logs.allow(r"...")`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_TEXT_LEVEL = re.compile(r"^\S+ \S+ (ERROR|CRITICAL) \S+: ")  # "2026-01-01 10:00:00,123 ERROR memfs: ..."
_TRACEBACK = ("Traceback (most recent call last):", "Exception ignored in")


@dataclass
class Finding:
    where: str  # "<file>:<line>"
    text: str  # the log line, or a traceback's first and last lines

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


@dataclass
class _Watched:
    path: Path
    label: str
    offset: int = 0
    line_no: int = 0


@dataclass
class LogCheck:
    """The files being watched and what the current test allows."""

    watched: dict[str, _Watched] = field(default_factory=dict)
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def watch(self, path: os.PathLike[str] | str, label: str = "") -> None:
        """Check `path` from its current end on (a file appended to by several runs is checked
        from where this registration found it)."""
        p = Path(path)
        key = str(p.resolve()) if p.parent.exists() else str(p)
        if key in self.watched:
            return
        w = _Watched(p, label or p.name)
        try:
            with open(p, "rb") as f:
                data = f.read()
            w.offset, w.line_no = len(data), data.count(b"\n")
        except OSError:
            pass
        self.watched[key] = w

    def allow(self, *patterns: str) -> None:
        """Findings matching any of these regexes are expected in the current test."""
        self.allowed += [re.compile(p) for p in patterns]

    def collect(self) -> list[Finding]:
        """Findings in everything written since the last collect, minus the allowed ones."""
        found: list[Finding] = []
        for w in list(self.watched.values()):
            found += _scan(w)
        return [f for f in found if not any(p.search(f.text) for p in self.allowed)]

    def reset_allowed(self) -> None:
        self.allowed.clear()


def _scan(w: _Watched) -> list[Finding]:
    try:
        with open(w.path, "rb") as f:
            f.seek(w.offset)
            data = f.read()
    except OSError:
        return []
    end = data.rfind(b"\n") + 1  # a half-written last line waits for the next check
    if end == 0:
        return []
    w.offset += end
    lines = data[:end].decode("utf-8", "replace").splitlines()
    first_no = w.line_no + 1
    w.line_no += len(lines)
    out: list[Finding] = []
    tb_start: int | None = None
    tb_first = ""

    record_at = -2  # index of the last ERROR record: a traceback right after it is its exc_info

    def end_traceback(last: str) -> None:
        nonlocal tb_start
        assert tb_start is not None
        if tb_start == record_at + 1 and out:
            out[-1].text += f" [{last.strip()}]"
        else:
            out.append(Finding(f"{w.label}:{first_no + tb_start}", f"{tb_first} ... {last.strip()}"))
        tb_start = None

    for i, line in enumerate(lines):
        if tb_start is not None:
            if (
                line.startswith((" ", "\t", "+", "|"))
                or not line.strip()
                or line.startswith(("During handling", "The above exception", "Traceback (most recent"))
            ):
                continue
            end_traceback(line)  # the exception line: the traceback's last
            continue
        if line.startswith(_TRACEBACK):
            tb_start, tb_first = i, line.strip()
            continue
        if _is_error_record(line):
            out.append(Finding(f"{w.label}:{first_no + i}", line.strip()))
            record_at = i
    if tb_start is not None:
        end_traceback(lines[-1])
    return out


def _is_error_record(line: str) -> bool:
    if _TEXT_LEVEL.match(line):
        return True
    if line.startswith("{") and '"level"' in line:
        try:
            record = json.loads(line)
        except ValueError:
            return False
        return isinstance(record, dict) and (
            str(record.get("level", "")).lower() in ("error", "critical") or "exception" in record
        )
    return False


CHECK = LogCheck()  # one per pytest process: the helpers register into it, the fixture checks it


def watch(path: os.PathLike[str] | str, label: str = "") -> None:
    CHECK.watch(path, label)
