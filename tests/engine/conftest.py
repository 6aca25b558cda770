"""The engine rung's fixtures: an in-process service (tests/support/inprocess.py) and a `World` of
engine mounts over it (tests/engine/test_engine_rules.py), each closed after its test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.engine.test_engine_rules import World
from tests.support.inprocess import InProcessService


@pytest.fixture
async def svc(tmp_path) -> AsyncIterator[InProcessService]:
    s = InProcessService(tmp_path / "service")
    try:
        yield s
    finally:
        await s.aclose()


@pytest.fixture
async def world(svc, tmp_path) -> AsyncIterator[World]:
    w = World(svc, tmp_path)
    try:
        yield w
    finally:
        await w.close()
