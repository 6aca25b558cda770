"""The engine rung's fixtures: an in-process service and an `EngineWorld` of engine mounts over it
(tests/support/inprocess.py), each closed after its test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.inprocess import EngineWorld, InProcessService


@pytest.fixture
async def svc(tmp_path) -> AsyncIterator[InProcessService]:
    s = InProcessService(tmp_path / "service")
    try:
        yield s
    finally:
        await s.aclose()


@pytest.fixture
async def world(svc, tmp_path) -> AsyncIterator[EngineWorld]:
    w = EngineWorld(svc, tmp_path)
    try:
        yield w
    finally:
        await w.close()
