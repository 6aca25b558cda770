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
from collections.abc import Iterator, Sequence

import pytest

from tests.support.api import Api
from tests.support.sandbox import SandboxWorld
from tests.support.service import ServiceProcess
from tests.support.world import StoreSpec

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


NOTES = StoreSpec("Stress Notes")


def rig_world(
    tmp, specs: Sequence[StoreSpec] = (NOTES,), *, service: ServiceProcess | None = None
) -> SandboxWorld:
    """The stress suites' world (default: one read_write store, empty), on a service of its own
    unless given one (SandboxWorld.serving)."""
    return SandboxWorld.serving(tmp, specs, service=service)


RW = "stress-notes"


@pytest.fixture
def rig(tmp_path) -> Iterator[SandboxWorld]:
    r = rig_world(tmp_path)
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
