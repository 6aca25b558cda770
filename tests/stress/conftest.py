"""Stress suites (docs/DESIGN.md#stress): the profile switch, stats for scripts/stress, shared fixtures.

`MEMFS_STRESS=long` selects the long profile (thousands of model steps, 50+ crash rounds);
anything else is the short CI profile. Tests that exist only for the long profile call
`long_only()` which skips with a message naming the switch (so the gap is visible in `-ra`).
When `MEMFS_STRESS_REPORT` names a file, every test appends its counters to it (JSON lines):
scripts/stress sums them.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.support.api import Api
from tests.support.sandbox import Sandbox
from tests.support.service import ServiceProcess

LONG = os.environ.get("MEMFS_STRESS", "").lower() == "long"


def profile(short, long):
    """The value for the running profile."""
    return long if LONG else short


def long_only() -> None:
    if not LONG:
        pytest.skip("long profile only: run with MEMFS_STRESS=long (scripts/stress)")


class Stats(Counter):
    """steps, faults, crashes, divergences, lost: summed by scripts/stress."""


@pytest.fixture
def stats(request) -> Iterator[Stats]:
    s = Stats()
    yield s
    report = os.environ.get("MEMFS_STRESS_REPORT")
    if report:
        with open(report, "a") as f:
            f.write(json.dumps({"test": request.node.nodeid, **s}) + "\n")


def walk(top: os.PathLike | str, *, skip_reserved: bool = True) -> dict[str, bytes]:
    """Every file under top: '/rel/path' -> content bytes (the reserved files left out)."""
    out: dict[str, bytes] = {}
    top = os.fspath(top)
    for dirpath, _dirs, names in os.walk(top):
        for n in names:
            full = os.path.join(dirpath, n)
            rel = "/" + os.path.relpath(full, top)
            if skip_reserved and rel in ("/.anthropic-memory-store", "/.sync-notices.log"):
                continue
            with open(full, "rb") as f:
                out[rel] = f.read()
    return out


def store_bytes(api: Api, store: str) -> dict[str, bytes]:
    return {p: c.encode() for p, c in api.contents(store).items()}


class Rig:
    """A service, an admin Api, one read_write store (+ optional read_only) and a session;
    sandboxes made here are always closed (unmounted, daemon dead) at teardown."""

    def __init__(self, tmp, *, service: ServiceProcess | None = None, readonly: bool = False, seed=None):
        self.tmp = tmp
        self.service = service or ServiceProcess(tmp / "service")
        self.own_service = service is None
        self.api = Api(self.service.base_url, self.service.admin_key)
        self.rw = self.api.create_store("Stress Notes")
        stores = [(self.rw, "read_write")]
        if readonly:
            self.ro = self.api.create_store("Stress Handbook")
            stores.append((self.ro, "read_only"))
        for path, content in (seed or {}).items():
            self.api.create(self.rw, path, content)
        self.session = self.api.create_session(stores)
        self.sandboxes: list[Sandbox] = []

    def sandbox(self, name: str, *, base_url: str | None = None) -> Sandbox:
        box = Sandbox(
            self.tmp,
            name,
            base_url=base_url or self.service.base_url,
            session_id=self.session["id"],
            work_secret=self.session["work_secret"],
        )
        self.sandboxes.append(box)
        return box

    def close(self) -> None:
        for box in self.sandboxes:
            box.close()
        self.api.close()
        if self.own_service:
            self.service.stop()


RW = "stress-notes"


@pytest.fixture
def rig(tmp_path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    try:
        yield r
    finally:
        r.close()


def wait_for(pred, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()
