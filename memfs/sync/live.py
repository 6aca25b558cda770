"""Live mode (SEMANTICS.md#d-when): one held watch for all of a mount's stores, which of them a
live tick handles now, and the signal that the mount is in use.

`LiveWatch` is a collaborator of the engine (engine.py), which owns one and asks it: the watch
tells which counters moved (`seen`, `moved`) and wakes the engine's timer (`wake`); a failed watch
puts the mount in polling until a tick succeeds. Between ticks it keeps the live push waves'
bookkeeping: which state generation each store's wave has settled (`handled`), which stores a
failure left to the polls (`unsettled`), when something staged last changed (the push debounce).
While the mount is used (a filesystem request or a `memfs sync`), it also reads its stores'
counters at most once an interval (`signal_use`): a relay (SEMANTICS.md#d-relay) learns from it
that the stores are in use and keeps polling them upstream every interval, where a mount that only
holds its watch lets them back off; the answer is a check of what the watch said, too.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Protocol

import trio

from memfs.client.errors import ApiError, Unreachable
from memfs.records import StoreInfo
from memfs.sync.ports import Journal, StoreApi, View
from memfs.sync.schedule import PollSchedule

log = logging.getLogger("memfs.sync")

WATCH_WAIT = 55.0  # seconds a watch is held by the service: renewed about once a minute (≤ 60)
QUIET_SECONDS = 1.0  # the mount is quiet once no filesystem request came for this long
PUSH_DEBOUNCE = 0.3  # a change is pushed once nothing changed for this long (SEMANTICS.md#d-when)


class Pulls(Protocol):
    """What the live ticks ask of the stores' pulls (store_pull.py `StorePull`)."""

    def clean_at(self, sid: str) -> int | None: ...
    def is_clean(self, sid: str) -> bool: ...
    def waits_for_close(self, sid: str, seen: int | None, *, settle: bool = False) -> bool: ...


class LiveWatch:
    def __init__(
        self,
        client: StoreApi,
        state: Journal,
        fs: View,
        stores: list[StoreInfo],
        schedule: PollSchedule,
        wanted: bool,
    ):
        self.client, self.state, self.fs, self.stores = client, state, fs, stores
        self.schedule = schedule  # the timed ticks' (a failed watch counts as an attempt)
        self.wanted = wanted  # False: `--live off`, the mount only polls
        self.watching = False  # a watch answered and none has failed since
        self.mode_reason = "starting: the first tick decides" if wanted else "live mode is off (--live off)"
        self.requests = 0  # requests the watch and the use signal sent (not a tick's: TickReport.requests)
        self.seen: dict[str, int] = {}  # store id -> the counter the watch last reported
        self.moved: set[str] = set()  # stores whose counter moved past the one applied to the view
        self.wake = trio.Event()  # the watch saw a move: the timer looks at once
        self._watch_again = trio.Event()  # a failed watch retries after the next good tick
        self.handled: dict[str, int] = {}  # store id -> generation a live push wave has settled
        self.unsettled: set[str] = set()  # live stores whose last pull or push failed: polled
        self.retry_at = -math.inf  # trio time before which no live tick runs (after a failure)
        self.signalled_at = -math.inf  # time.monotonic() of the last `signal_use` (or polled tick)
        self._gen_seen: dict[str, int] = {}  # store id -> generation the timer last saw
        self._changed_at = -math.inf  # time.monotonic() the timer last saw something staged change

    @property
    def interval(self) -> float:
        return self.schedule.interval

    # -- the watch ------------------------------------------------------------------------------
    async def watch_loop(self) -> None:
        """One held watch for all the stores, renewed as it answers. `known` is the newest
        counter seen (not the one applied): a move the mount has not pulled yet (busy) must not
        make the next watch answer at once. A failed watch counts as an attempt (SEMANTICS.md#d-unreachable):
        the mount polls until a tick succeeds, then watches again."""
        while True:
            known = {}
            for s in self.stores:
                applied = self.state.store_counter(s.store_id)
                known[s.store_id] = max(applied if applied is not None else 0, self.seen.get(s.store_id, 0))
            self.requests += 1
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
                self.retry_at = -math.inf
                self.mode_reason = (
                    f"watching {len(self.stores)} store(s): one held request, renewed every {WATCH_WAIT:g}s"
                )
                log.info("live: %s", self.mode_reason)
            self.seen.update(counters)
            self._saw(counters)

    def _saw(self, counters: dict[str, int]) -> None:
        """Counters the watch (or the use signal) read: a store whose counter is not the applied
        one has moved, and the timer looks at once."""
        for sid, counter in counters.items():
            if counter != self.state.store_counter(sid):
                self.moved.add(sid)
        if self.moved:
            self.wake.set()

    def _watch_failed(self, error: str) -> None:
        self.watching = False
        self.schedule.attempted()  # SEMANTICS.md#d-unreachable: the next poll comes an interval later
        self.mode_reason = (
            f"the watch failed ({error}); polling every {self.interval:g}s, watching again "
            "after the next good tick"
        )
        log.warning("watch failed: %s; polling every %gs until a tick succeeds", error, self.interval)
        # What the watch had seen moving is pulled by the polls now.
        self.moved.clear()

    # -- the use signal -------------------------------------------------------------------------
    def use_signal_due(self) -> bool:
        """Live, used since the last signal, an interval after it (a polled tick, which reads
        every store's counter, is one: `signalled`), and not while the mount waits after a failed
        tick or a refusal: behind a hung service, whose held watch has not failed yet, the next
        request waits out the interval (SEMANTICS.md#d-unreachable), the signal's included. A
        live tick is not one: it reads only the stores that moved."""
        if not self.watching or time.monotonic() - self.signalled_at < self.interval:
            return False
        if self.schedule.waiting(self.retry_at):
            return False
        return max(self.fs.last_activity, self.schedule.used_at) > self.signalled_at

    def signalled(self) -> None:
        """Every store's counter is being read now (a polled tick, the download, the signal)."""
        self.signalled_at = time.monotonic()

    async def signal_use(self) -> None:
        """In live mode, while the mount is used: its stores' counters read at most once an
        interval (see the module's docstring). What moved is taken as the watch's answer is."""
        self.signalled()
        self.requests += 1  # not a tick's request (TickReport.requests)
        try:
            counters = await self.client.counters([s.store_id for s in self.stores])
        except (ApiError, Unreachable) as exc:
            log.debug("live: the use signal failed: %s", exc)
            return
        for sid, counter in (counters or {}).items():
            if counter > self.seen.get(sid, -1):
                self.seen[sid] = counter
        self._saw(counters or {})

    # -- which stores a live tick handles -------------------------------------------------------
    def note_changes(self) -> None:
        """Notice a change to what is staged (a close, rename, unlink, mkdir: each bumps the
        store's generation) for the push debounce; the engine's own bookkeeping counts too, which
        costs one look without requests after each push."""
        for s in self.stores:
            g = self.state.generation(s.store_id)
            if self._gen_seen.get(s.store_id) != g:
                self._gen_seen[s.store_id] = g
                self._changed_at = time.monotonic()

    def started(self, staged: Callable[[StoreInfo], bool]) -> None:
        """After the download: what a crashed mount left staged (`staged`) waits for the first
        tick, live or not."""
        for s in self.stores:
            sid = s.store_id
            self.handled[sid] = self._gen_seen[sid] = self.state.generation(sid)
            if s.access == "read_write" and staged(s):
                self.unsettled.add(sid)

    def pulls_now(self, sid: str, pulls: Pulls, *, quiet: bool, keep_open: bool) -> bool:
        """Whether a live tick pulls the moved store `sid` now. Between commands (`memfs sync`,
        `keep_open` False) always. The timer's (close-to-open, SEMANTICS.md#d-when): at once,
        busy mount or not, unless its last pull held changes back for files that are all still
        open or staged (a pull now would hold the same); a store with staged changes once the
        mount is quiet, where its conflicts are settled (the pull that holds them is a busy
        mount's), unless one of the files held back is still open (its whole apply would wait,
        and its pushes with it)."""
        if sid not in self.moved:
            return False
        if not keep_open:
            return True
        settle = quiet and not pulls.is_clean(sid)
        return not pulls.waits_for_close(sid, self.seen.get(sid), settle=settle)

    def settling(self) -> bool:
        """Something staged changed less than the push debounce ago: its push waits."""
        return time.monotonic() - self._changed_at < PUSH_DEBOUNCE

    def stores_due(self, pulls: Pulls, *, quiet: bool, debounce: bool, keep_open: bool) -> list[StoreInfo]:
        """The stores a live tick would handle now: the moved ones it pulls now (`pulls_now`), and
        those with changes not yet pushed once the debounce has passed. A moved store whose pull
        waits (its held files are still open or staged) is pushed without its pull (see
        `counters`): waiting for the pull would hold every push of a mount that is never quiet
        for a second until it stops; only what someone else changed meets a 409, and waits for
        the pull. (A pull during the debounce leaves its pushes to the wave after it: engine.py.)"""
        if not self.watching or self.schedule.waiting(self.retry_at):
            return []
        settling = debounce and self.settling()
        out = []
        for s in self.stores:
            sid = s.store_id
            if self.pulls_now(sid, pulls, quiet=quiet, keep_open=keep_open):
                out.append(s)
                continue
            if sid in self.moved and self.state.store_counter(sid) is None:
                continue  # nothing applied yet: no baseline a push could stand on
            g = self.state.generation(sid)
            if (
                not settling
                and s.access == "read_write"
                and g != pulls.clean_at(sid)
                and g != self.handled.get(sid)
            ):
                out.append(s)
        return out

    def counters(self, pulling: Callable[[str], bool] | None = None) -> dict[str, int]:
        """Each store's newest known counter: the watch's, or the applied one when a pull went
        further (the changes feed answers up to the counter of its own read). A store not
        `pulling` now gets the applied counter, so the tick plans its pushes against the
        baseline and its view stays as it is; the move stays pending for the pull."""
        out = {}
        for s in self.stores:
            applied = self.state.store_counter(s.store_id)
            if pulling is not None and not pulling(s.store_id) and applied is not None:
                out[s.store_id] = applied
                continue
            seen = self.seen.get(s.store_id)
            known = [c for c in (applied, seen) if c is not None]
            if known:
                out[s.store_id] = max(known)
        return out

    # -- after a tick ---------------------------------------------------------------------------
    def after_pull(
        self,
        stores: list[StoreInfo],
        ok: bool,
        pushing: set[str],
        counters: dict[str, int] | None,
        applied_before: dict[str, int | None],
        held: Callable[[str], bool] = lambda sid: False,
    ) -> None:
        """Bookkeeping after a tick's pull (`ok`: it went through; `pushing`: the stores it left
        pushes for): which moves are applied, which stores are settled, and whether the watch may
        start again after a failure. A store the watch saw move again while it was pulled stays
        moved and is pulled again at once (the mount is quiet, or `memfs sync` is between
        commands): only a pull that applied nothing (deferred: a file open with unflushed writes)
        waits a second before the next look. A pull that `held` changes back for open files
        waits for one of them to be closed instead (`pulls_now`)."""
        behind = False
        for s in stores:
            sid = s.store_id
            applied = self.state.store_counter(sid)
            before = applied_before.get(sid)
            pulled = counters is None or counters.get(sid) != before  # a push-only wave asks no pull
            if sid in self.moved and applied is not None and applied >= self.seen.get(sid, applied):
                self.moved.discard(sid)
            elif sid in self.moved and pulled and applied == before and not held(sid):
                behind = True  # deferred (a file open with unflushed writes) or failed
            if sid not in pushing:
                self.handled[sid] = self.state.generation(sid)
            if ok:
                self.unsettled.discard(sid)
            elif self.watching:
                self.unsettled.add(sid)
        if not ok:
            self.retry_at = trio.current_time() + self.interval  # SEMANTICS.md#d-unreachable
            log.debug("live retry in %.1fs: the tick failed", self.interval)
        elif behind:
            self.retry_at = trio.current_time() + QUIET_SECONDS  # not a look every 0.1 s
            log.debug("live retry in %.1fs: still behind %s", QUIET_SECONDS, self.seen)
        if ok and counters is None:  # a polled tick went through: the watch may start again
            self._watch_again.set()

    def settled(self, sid: str) -> None:
        """No further live push wave for the store's state as it is now."""
        self.handled[sid] = self.state.generation(sid)

    def push_failed(self, sid: str) -> None:
        """A store's push wave failed: no further live wave for this state; a poll retries it."""
        log.debug("push %s failed: retry in %.1fs", sid, self.interval)
        self.settled(sid)
        if self.watching:  # retried by a poll an interval later (SEMANTICS.md#d-unreachable)
            self.unsettled.add(sid)
            self.retry_at = trio.current_time() + self.interval
