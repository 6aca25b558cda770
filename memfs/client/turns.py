"""Whose turn it is to send, when the client is paced (memfs/client/budget.py `Pacer`): the stores
of a mount in turn, so each gets its share of the organisation's rate (SEMANTICS.md#d-budget).

A paced request waits in its store's line; the lines are served round-robin, one request at a
time: the one whose turn it is takes it from the pacer (`Pacer.reserve`), sleeps until it is due,
and hands the next turn on. First come, first served would give a store as many turns as it has
requests waiting (one per top-level prefix in its download), and a store of many prefixes would
delay one of few by all of its pages. Reads and writes wait in lines of their own (the service
limits them apart). An unpaced request (a service whose limit is not known and that has not
refused anything) takes no turn at all.
"""

from __future__ import annotations

from collections import deque

import trio

from memfs.client.budget import Pacer


class _Lane:
    """One class's lines: store -> its waiting requests (dict order: the round-robin's)."""

    def __init__(self) -> None:
        self.lines: dict[str, deque[trio.Event]] = {}
        self.busy = False  # a request holds the turn (reserving, then sleeping until due)


class Turns:
    def __init__(self, pacer: Pacer):
        self.pacer = pacer
        self._lanes: dict[str, _Lane] = {}

    async def take(self, cls: str, store: str) -> bool:
        """Wait for this store's turn in `cls`, then until the pacer says the request may go.
        Whether it waited at all."""
        lane = self._lanes.setdefault(cls, _Lane())
        waited = lane.busy or bool(lane.lines)
        if waited:
            called = trio.Event()
            lane.lines.setdefault(store, deque()).append(called)
            try:
                await called.wait()
            except BaseException:
                if called.is_set():  # handed the turn as it was cancelled: hand it on
                    self._next(lane)
                else:
                    line = lane.lines.get(store)
                    if line is not None:
                        line.remove(called)
                        if not line:
                            del lane.lines[store]
                raise
        else:
            lane.busy = True
        wait = 0.0
        try:
            wait = self.pacer.reserve(trio.current_time(), cls)
            if wait > 0:
                await trio.sleep(wait)
        finally:
            self._next(lane)
        return waited or wait > 0

    @staticmethod
    def _next(lane: _Lane) -> None:
        """The turn to the first request of the next store in line (that store then goes last)."""
        if not lane.lines:
            lane.busy = False
            return
        store = next(iter(lane.lines))
        line = lane.lines.pop(store)
        called = line.popleft()
        if line:
            lane.lines[store] = line
        called.set()
