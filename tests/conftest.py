"""Fixtures shared by every test suite. Keep this file small: helpers live in tests/support/."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.support import logcheck
from tests.support.rungs import RUNGS, rung_of, rung_problem
from tests.support.service import ServiceProcess


@pytest.fixture
def service(tmp_path):
    """A fresh `memfs serve` subprocess with its own db; always stopped at teardown."""
    svc = ServiceProcess(tmp_path / "service")
    try:
        yield svc
    finally:
        svc.stop()


# ---- the ladder's rungs (tests/support/rungs.py) ----------------------------------------------------
_RUNG_PROBLEM = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the markers
def pytest_collection_modifyitems(config, items):
    """Mark each test with its folder's rung, and note a test on no rung or on two."""
    for item in items:
        rung = rung_of(item.path)
        if rung is not None:
            item.add_marker(rung)
        problem = rung_problem(item.nodeid, sorted({m.name for m in item.iter_markers() if m.name in RUNGS}))
        if problem is not None:
            item.stash[_RUNG_PROBLEM] = problem


def pytest_runtest_setup(item):
    # failed here, not at collection: an error raised while collecting is lost in pytest-xdist's
    # INTERNALERROR, a failed test is reported by name in every mode
    problem = item.stash.get(_RUNG_PROBLEM, None)
    if problem is not None:
        pytest.fail(f"every test is on exactly one rung: {problem}", pytrace=False)


# ---- the daemon log check (tests/support/logcheck.py) ---------------------------------------------
# the rungs whose processes' logs must be clean: every rung but stress (unchecked as before the rungs)
LOG_CHECKED = ("rules", "engine", "client", "service", "mount", "session", "e2e")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "expected_log(*patterns): regexes of ERROR lines/tracebacks this test's daemons may log"
    )


class _ErrorRecords(logging.Handler):
    """ERROR records of this process (the in-process harness runs the engine here)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.found: list[logcheck.Finding] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = f"{record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            text += f" [{type(record.exc_info[1]).__name__}: {record.exc_info[1]}]"
        self.found.append(logcheck.Finding(f"{record.pathname}:{record.lineno}", text))


@pytest.fixture
def daemon_logs():
    """The log check itself, for a test that allows an error at run time: daemon_logs.allow(regex)."""
    return logcheck.CHECK


@pytest.fixture(autouse=True)
def _daemon_log_check(request):
    """Fail the test at teardown when a process it started logged an unexpected error."""
    if request.path.relative_to(Path(__file__).parent).parts[0] not in LOG_CHECKED:
        yield
        logcheck.CHECK.collect()  # read past this test's lines: never blamed on a checked test
        return
    check = logcheck.CHECK
    check.reset_allowed()
    for marker in request.node.iter_markers("expected_log"):
        check.allow(*marker.args)
    handler = _ErrorRecords()
    logging.getLogger().addHandler(handler)
    try:
        yield
    finally:
        logging.getLogger().removeHandler(handler)
    found = [f for f in check.collect() + handler.found if not any(p.search(f.text) for p in check.allowed)]
    check.reset_allowed()
    if found:
        pytest.fail(
            "unexpected errors in the logs (allow-list expected ones with "
            "@pytest.mark.expected_log(regex)):\n" + "\n".join(f"  {f}" for f in found),
            pytrace=False,
        )
