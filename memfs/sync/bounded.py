"""Bounded concurrency for the engine's fan-outs (fetches, settle lookups, push stages, batches)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import trio


async def gather(items: Iterable[Any], fn: Callable[[Any], Awaitable[None]], concurrency: int) -> None:
    """Run fn(item) for every item, at most `concurrency` at once. The first failure cancels the
    rest and is raised as itself (not wrapped in an ExceptionGroup) so callers can catch it."""
    failure: list[BaseException] = []
    limiter = trio.CapacityLimiter(concurrency)

    async def one(item, cancel_scope: trio.CancelScope) -> None:
        try:
            async with limiter:
                await fn(item)
        except Exception as exc:
            if not failure:
                failure.append(exc)
            cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        for item in items:
            nursery.start_soon(one, item, nursery.cancel_scope)
    if failure:
        raise failure[0]
