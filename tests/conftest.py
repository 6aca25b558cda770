"""Fixtures shared by every test suite. Keep this file small: helpers live in tests/support/."""

from __future__ import annotations

import pytest

from tests.support.service import ServiceProcess


@pytest.fixture
def service(tmp_path):
    """A fresh `memfs serve` subprocess with its own db; always stopped at teardown."""
    svc = ServiceProcess(tmp_path / "service")
    try:
        yield svc
    finally:
        svc.stop()
