"""Live mode's watch (SEMANTICS.md#d-when): one held request for all of a mount's stores, and the
signal that the mount is in use.

A mixin of the engine (engine.py), which owns the state it reads and sets: the watch tells which
counters moved (`_seen`, `_moved`) and wakes the engine's timer; a failed watch puts the mount in
polling until a tick succeeds. While the mount is used (a filesystem request or a `memfs sync`),
it also reads its stores' counters at most once an interval (`signal_use`): a relay
(SEMANTICS.md#d-relay) learns from it that the stores are in use and keeps polling them upstream
every interval, where a mount that only holds its watch lets them back off; the answer is a check
of what the watch said, too.
"""

from __future__ import annotations

import logging
import math
import time

import trio

from memfs.client.errors import ApiError, Unreachable
from memfs.records import StoreInfo
from memfs.sync.ports import Journal, Store, View

log = logging.getLogger("memfs.sync")

WATCH_WAIT = 55.0  # seconds a watch is held by the service: renewed about once a minute (≤ 60)


class LiveMode:
    # the engine's (engine.py `SyncEngine.__init__`)
    client: Store
    state: Journal
    fs: View
    stores: list[StoreInfo]
    interval: float
    watching: bool
    mode_reason: str
    watch_requests: int
    last_attempt: float | None
    _seen: dict[str, int]
    _moved: set[str]
    _wake: trio.Event
    _watch_again: trio.Event
    _live_retry_at: float
    _not_before: float
    _used_at: float
    _signalled_at: float = -math.inf  # time.monotonic() of the last `signal_use` request

    async def _watch_loop(self) -> None:
        """One held watch for all the stores, renewed as it answers. `known` is the newest
        counter seen (not the one applied): a move the mount has not pulled yet (busy) must not
        make the next watch answer at once. A failed watch counts as an attempt (SEMANTICS.md#d-unreachable):
        the mount polls until a tick succeeds, then watches again."""
        while True:
            known = {}
            for s in self.stores:
                applied = self.state.store_counter(s.store_id)
                known[s.store_id] = max(applied if applied is not None else 0, self._seen.get(s.store_id, 0))
            self.watch_requests += 1
            # The first watch (and the first after a failure) answers at once: it tells whether
            # the service has a watch, so live mode is known (and shown) from the start.
            try:
                result = await self.client.watch(known, wait=WATCH_WAIT if self.watching else 0)
            except (ApiError, Unreachable) as exc:
                self._watch_failed(str(exc))
                self._watch_again = trio.Event()
                await self._watch_again.wait()
                continue
            if result is None:
                self.watching = False
                self.mode_reason = f"the service has no watch: polling every {self.interval:g}s"
                log.info("the service has no watch; polling every %gs", self.interval)
                return
            _changed, counters = result
            log.debug(
                "watch answered: %s (applied %s)",
                counters,
                {sid: self.state.store_counter(sid) for sid in counters},
            )
            if not self.watching:
                self.watching = True
                self._live_retry_at = -math.inf
                self.mode_reason = (
                    f"watching {len(self.stores)} store(s): one held request, renewed every {WATCH_WAIT:g}s"
                )
                log.info("live: %s", self.mode_reason)
            self._seen.update(counters)
            for sid, counter in counters.items():
                if counter != self.state.store_counter(sid):
                    self._moved.add(sid)
            if self._moved:
                self._wake.set()

    def _watch_failed(self, error: str) -> None:
        self.watching = False
        self.last_attempt = (
            trio.current_time()
        )  # SEMANTICS.md#d-unreachable: the next poll comes an interval later
        self.mode_reason = (
            f"the watch failed ({error}); polling every {self.interval:g}s, watching again "
            "after the next good tick"
        )
        log.warning("watch failed: %s; polling every %gs until a tick succeeds", error, self.interval)
        # What the watch had seen moving is pulled by the polls now.
        self._moved.clear()

    def use_signal_due(self) -> bool:
        """Live, used since the last signal, an interval after it (a polled tick, which reads
        every store's counter, is one: `_tick`), and not while the mount waits after a failed
        tick or a refusal: behind a hung service, whose held watch has not failed yet, the next
        request waits out the interval (SEMANTICS.md#d-unreachable), the signal's included. A
        live tick is not one: it reads only the stores that moved."""
        if not self.watching or time.monotonic() - self._signalled_at < self.interval:
            return False
        if trio.current_time() < max(self._live_retry_at, self._not_before):
            return False
        return max(self.fs.last_activity, self._used_at) > self._signalled_at

    async def signal_use(self) -> None:
        """In live mode, while the mount is used: its stores' counters read at most once an
        interval (see the module's docstring). What moved is taken as the watch's answer is."""
        self._signalled_at = time.monotonic()
        self.watch_requests += 1  # not a tick's request (TickReport.requests)
        try:
            counters = await self.client.counters([s.store_id for s in self.stores])
        except (ApiError, Unreachable) as exc:
            log.debug("live: the use signal failed: %s", exc)
            return
        for sid, counter in (counters or {}).items():
            if counter > self._seen.get(sid, -1):
                self._seen[sid] = counter
            if counter != self.state.store_counter(sid):
                self._moved.add(sid)
        if self._moved:
            self._wake.set()
