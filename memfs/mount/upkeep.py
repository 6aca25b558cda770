"""The state dir's upkeep while a mount lives: its WAL copied into state.db, and content that
nothing refers to swept from its blobs (DESIGN.md "Mount state dir").

Both are the state dir's jobs, not the sync's: the session starts `StateUpkeep.run` beside the
sync engine's timer and tells it, through `busy`, when the sync may hold content no row refers to
yet (a tick's fetched or streamed blobs before their apply, a push's in flight).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import trio

log = logging.getLogger("memfs.mount")

CHECKPOINT_INTERVAL = 5.0  # seconds between copies of state.db's WAL into the database file
GC_INTERVAL = 600.0  # seconds between sweeps of content no file or baseline refers to
BUSY_STEP = 0.1  # seconds between looks while a due sweep waits for the sync to be idle


class StateDir(Protocol):
    """What the upkeep asks of the state dir (mount/state.py's `State`)."""

    def checkpoint(self) -> None: ...
    def gc_blobs(self, keep: set[str] | frozenset[str] = frozenset()) -> int: ...


class StateUpkeep:
    """`run()` checkpoints the WAL first at once (a first download's content is all in it), then
    every CHECKPOINT_INTERVAL, from a worker thread (`checkpoint` has a connection of its own and
    never blocks the mount's). Every GC_INTERVAL it sweeps the blobs that no `files` or `baseline`
    row refers to, nor `live_shas()` (what open handles and the view still use), but only while
    `busy()` is False, and on the trio thread with no await between that test, `live_shas()` and
    the sweep, so no tick or push can start in between. A sweep that falls due while the sync is
    busy runs at the first look, every BUSY_STEP, that finds it idle."""

    def __init__(
        self,
        state: StateDir,
        live_shas: Callable[[], set[str]],
        busy: Callable[[], bool],
        *,
        checkpoint_interval: float = CHECKPOINT_INTERVAL,
        gc_interval: float = GC_INTERVAL,
    ):
        self.state = state
        self.live_shas = live_shas
        self.busy = busy
        self.checkpoint_interval = checkpoint_interval
        self.gc_interval = gc_interval
        self.swept = 0  # blobs removed by this upkeep (for the logs and tests)

    async def run(self) -> None:
        next_gc = trio.current_time() + self.gc_interval
        next_checkpoint = trio.current_time()  # first: the initial download's WAL
        while True:
            if trio.current_time() >= next_checkpoint:
                await trio.to_thread.run_sync(self.state.checkpoint)
                next_checkpoint = trio.current_time() + self.checkpoint_interval
            if trio.current_time() >= next_gc:
                if self.sweep():
                    next_gc = trio.current_time() + self.gc_interval
                else:
                    next_gc = trio.current_time() + BUSY_STEP
            await trio.sleep_until(min(next_checkpoint, next_gc))

    def sweep(self) -> bool:
        """One sweep of the unreferenced blobs, unless the sync is busy (then False)."""
        if self.busy():
            return False
        removed = self.state.gc_blobs(keep=self.live_shas())
        self.swept += removed
        if removed:
            log.info("removed %d unreferenced blob(s) from the state dir", removed)
        return True
