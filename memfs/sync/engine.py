"""A sync tick (SEMANTICS.md#d-tick): counters → changes/listing → fetch → apply the plan → push.

The decisions are in plan.py (pure). Around them: remote.py reads the store (feed, snapshot,
listing, fetch), apply.py applies a plan to the view, push.py sends and books a store's pushes,
not_on_store.py says what the mount holds that the store does not. This module orchestrates them
and keeps the rules of *when* (SEMANTICS.md#d-when, live mode included), failure
(SEMANTICS.md#d-unreachable) and the end of the session (SEMANTICS.md#d-end).

Two modes. **Polling**: a tick at most once per interval, at `memfs sync` or once the mount is
quiet. **Live** (the service has the watch, SEMANTICS.md#d-counter): one held watch for all the stores tells which
counters moved; a moved store is pulled at the next `memfs sync` or as soon as the mount is quiet,
and what the agent changed is pushed after a short debounce. The interval then only paces the
retries of what failed. A watch that fails counts as an attempt and the mount polls until a tick
succeeds again, then watches again.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import trio

from memfs import limits
from memfs.client.errors import ApiError, Unreachable
from memfs.protocol import Deletions, OnConflict
from memfs.records import BaseEntry, StoreInfo
from memfs.sync import plan as P
from memfs.sync.apply import apply_plan, maybe_staged, plan_narrowed, plan_pull
from memfs.sync.bounded import gather
from memfs.sync.live import LiveMode
from memfs.sync.merging import merge_wanted, missing_content
from memfs.sync.narrow import leaves_view_as_base
from memfs.sync.not_on_store import NotOnStore, not_on_store
from memfs.sync.ports import Journal, Store, View
from memfs.sync.push import Pusher
from memfs.sync.remote import Baseline, Prefetched, Pulled, StoreReader, in_path_order, worth_a_snapshot
from memfs.sync.report import StoreSync, TickFailed, TickReport

log = logging.getLogger("memfs.sync")

__all__ = ["SyncEngine", "TickFailed"]

QUIET_SECONDS = 1.0
TIMER_STEP = 0.1  # seconds between the timer's looks (a watch's answer wakes it at once)
PUSH_DEBOUNCE = 0.3  # live mode: a change is pushed once nothing changed for this long (SEMANTICS.md#d-when)
# The final sync tries a failed tick again this many times, after 0.5 s, then 1 s (within its bound).
FINAL_RETRIES = 2
FINAL_RETRY_PAUSE = 0.5
RETRY_AFTER_CAP = 600.0  # seconds: the longest retry-after a failed tick honours (a broken header must not stop sync for a day)
# Without a counter (the hosted API, SEMANTICS.md#d-no-counter): a mount nobody used since its last
# poll polls at most every IDLE_POLL_INTERVAL (any use brings back the interval), and lists one
# store's version feed over a wide window, round robin, at most every SAFETY_NET_INTERVAL while in use,
# and lists one store whole at most every FULL_LISTING_INTERVAL (the safety net behind the feed).
IDLE_POLL_INTERVAL = limits.IDLE_POLL_INTERVAL
SAFETY_NET_INTERVAL = limits.SAFETY_NET_INTERVAL
FULL_LISTING_INTERVAL = limits.FULL_LISTING_INTERVAL
FINAL_TICKS = 6  # the final sync's ticks that went through, at most (each merges what met a 409)

Pushes = list[tuple[StoreInfo, list[tuple[P.PushAction, ...]]]]  # what a tick's pulls left to push, by store


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class SyncEngine(LiveMode):
    def __init__(
        self,
        client: Store,
        state: Journal,
        fs: View,
        stores: Iterable[StoreInfo],
        *,
        interval: float,
        deletions: Deletions = "enabled",
        max_files: int,
        max_bytes: int,
        live: bool = True,
        idle_poll: float = IDLE_POLL_INTERVAL,
        safety_net: float = SAFETY_NET_INTERVAL,
        full_listing: float = FULL_LISTING_INTERVAL,
    ):
        self.client = client
        self.state = state
        self.fs = fs
        self.stores = list(stores)
        self.interval = interval
        self.deletions = deletions
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.on_conflict: OnConflict = "merge"  # SEMANTICS.md#d-merge (`memfs mount --on-conflict`)
        self.conflict_who = "agent"  # whose version a conflict copy holds (the daemon: the session)
        self.has_counter: bool | None = None  # learned on the first tick (SEMANTICS.md#d-no-counter)
        self.reader = StoreReader(client, state)
        self.pusher = Pusher(client, state, fs)
        self.last_attempt: float | None = None
        self.tick_lock = trio.Lock()
        self.push_done = trio.Event()
        self.push_done.set()
        self.sync = {s.store_id: StoreSync(s) for s in self.stores}
        self._nursery: trio.Nursery | None = None
        self._clean: dict[str, int] = {}  # store id -> state generation at which nothing was staged
        # -- live mode (SEMANTICS.md#d-when) --
        self.live_wanted = live  # False: `--live off`, the mount only polls
        self.watching = False  # a watch answered and none has failed since
        self.mode_reason = "starting: the first tick decides" if live else "live mode is off (--live off)"
        self.watch_requests = 0  # requests the watch sent (not a tick's: see TickReport.requests)
        self._seen: dict[str, int] = {}  # store id -> the counter the watch last reported
        self._moved: set[str] = set()  # stores whose counter moved past the one applied to the view
        self._wake = trio.Event()  # the watch saw a move: the timer looks at once
        self._watch_again = trio.Event()  # a failed watch retries after the next good tick
        self._gen_seen: dict[str, int] = {}  # store id -> generation the timer last saw
        self._changed_at = -math.inf  # time.monotonic() the timer last saw something staged change
        self._handled: dict[str, int] = {}  # store id -> generation a live push wave has settled
        self._unsettled: set[str] = set()  # live stores whose last pull or push failed: polled
        self._live_retry_at = -math.inf  # trio time before which no live tick runs (after a failure)
        self._not_before = -math.inf  # trio time the service's retry-after asked us to wait for
        # -- without a counter (SEMANTICS.md#d-no-counter) --
        self.idle_poll = idle_poll
        self.safety_net = safety_net
        self.full_listing = full_listing
        self._used_at = -math.inf  # time.monotonic() of the last `memfs sync`
        self._polled_at = -math.inf  # time.monotonic() the last tick began
        self._next_net = math.inf  # trio time of the next safety-net listing (set by `initial`)
        self._net_turn = -1  # index in self.stores of the last store the safety net listed
        self._net_sid: str | None = None  # the store whose feed this tick reads over the wide window
        self._next_full = math.inf  # trio time of the next full listing of one store (the rare one)
        self._full_turn = -1  # index in self.stores of the last store listed whole
        self._full_sid: str | None = None  # the store this tick lists whole

    # -- when (SEMANTICS.md#d-when) ------------------------------------------------------------------
    def due_in(self) -> float:
        now = trio.current_time()
        if self.last_attempt is None:
            return max(0.0, self._not_before - now)
        interval = self.interval
        if self.has_counter is False and not self.in_use():
            interval = max(interval, self.idle_poll)  # nobody used the mount: back off
        return max(0.0, self.last_attempt + interval - now, self._not_before - now)

    def in_use(self) -> bool:
        """A filesystem request or a `memfs sync` since the last tick began (SEMANTICS.md#d-no-counter:
        without one, a mount against the hosted API backs off its polls)."""
        return max(self.fs.last_activity, self._used_at) >= self._polled_at

    def _net_store(self, stores: list[StoreInfo]) -> tuple[str | None, str | None]:
        """The safety net of this tick (SEMANTICS.md#d-no-counter), only while the mount is in use:
        (the store whose feed is read over the wide window, at most once per `safety_net` seconds;
        the store listed whole, at most once per `full_listing` seconds), each round robin."""
        if self.has_counter is not False or len(stores) != len(self.stores) or not self.in_use():
            return None, None
        now = trio.current_time()
        wide = full = None
        if now >= self._next_full:
            self._next_full = now + self.full_listing
            self._full_turn = (self._full_turn + 1) % len(self.stores)
            full = self.stores[self._full_turn].store_id
        if now >= self._next_net:
            self._next_net = now + self.safety_net
            self._net_turn = (self._net_turn + 1) % len(self.stores)
            wide = self.stores[self._net_turn].store_id
        return wide, full

    def _asked_to_wait(self, exc: Exception) -> None:
        """A refusal that said how long to wait (429 or 5xx with retry-after, longer than a tick
        retries itself): no tick of ours, timed or live, comes before it (SEMANTICS.md#d-unreachable).
        A forced `memfs sync` runs its tick, but the client holds every request until then
        (memfs/client/budget.py, SEMANTICS.md#d-budget): it fails at once, sending nothing."""
        wait = exc.retry_after if isinstance(exc, ApiError) and exc.retryable else None
        if wait:
            until = trio.current_time() + min(wait, RETRY_AFTER_CAP)
            if until > self._not_before:
                self._not_before = until
                log.info(
                    "the service asked to wait %.0fs before the next request", min(wait, RETRY_AFTER_CAP)
                )

    @property
    def busy(self) -> bool:
        """A tick or a push is under way: content it fetched, streamed or is sending may be in
        the state dir's blobs before any row refers to it (the state dir's upkeep, mount/upkeep.py,
        sweeps none then)."""
        return self.tick_lock.locked() or not self.push_done.is_set()

    @property
    def mode(self) -> str:
        return "live" if self.watching else "polling"

    async def timer(self) -> None:
        """The daemon's own sync: in live mode, pull what moved once the mount is quiet and push
        what changed after the debounce; otherwise (and for retries) a due tick once the mount
        has been quiet for about a second."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.has_counter and self.live_wanted:
                nursery.start_soon(self._watch_loop)
            elif self.has_counter is False:
                self.mode_reason = (
                    f"the service has no counter (the hosted API, SEMANTICS.md#d-no-counter): polling the "
                    f"version feed every {self.interval:g}s while the mount is used, every "
                    f"{max(self.interval, self.idle_poll):g}s while nobody uses it"
                )
            while True:
                with trio.move_on_after(TIMER_STEP):
                    await self._wake.wait()
                self._wake = trio.Event()
                self._note_changes()
                if self.busy:
                    continue
                quiet = time.monotonic() - self.fs.last_activity >= QUIET_SECONDS
                try:
                    live = self._live_stores(quiet=quiet, debounce=True)
                    if live:
                        async with self.tick_lock:
                            await self._tick(live, counters=self._live_counters(quiet=quiet), wait=False)
                    elif self.due_in() == 0 and quiet and (not self.watching or self._unsettled):
                        await self.sync_now(force=False, used=False)
                    # After the tick, not before: a polled or failed one holds it (use_signal_due).
                    if self.use_signal_due():
                        self._signalled_at = time.monotonic()
                        nursery.start_soon(self.signal_use)
                except Exception:  # a bug in a tick must never take the mount down
                    log.exception("sync tick crashed; the next one runs in %.0fs", self.interval)

    def _note_changes(self) -> None:
        """Notice a change to what is staged (a close, rename, unlink, mkdir: each bumps the
        store's generation) for the push debounce; the engine's own bookkeeping counts too, which
        costs one look without requests after each push."""
        for s in self.stores:
            g = self.state.generation(s.store_id)
            if self._gen_seen.get(s.store_id) != g:
                self._gen_seen[s.store_id] = g
                self._changed_at = time.monotonic()

    def _live_stores(self, *, quiet: bool, debounce: bool) -> list[StoreInfo]:
        """The stores a live tick would handle now: the moved ones when the mount is quiet (or
        between commands: `memfs sync`), and those with changes not yet pushed once the debounce
        has passed. A moved store of a busy mount is pushed without its pull (see
        `_live_counters`): waiting for the pull would hold every push of a mount that is never
        quiet for a second (its own first push moves the counter too) until it stops; only what
        someone else changed meets a 409, and waits for the pull."""
        if not self.watching or trio.current_time() < max(self._live_retry_at, self._not_before):
            return []
        settling = debounce and time.monotonic() - self._changed_at < PUSH_DEBOUNCE
        out = []
        for s in self.stores:
            sid = s.store_id
            if sid in self._moved and quiet:
                out.append(s)
                continue
            if sid in self._moved and self.state.store_counter(sid) is None:
                continue  # nothing applied yet: no baseline a push could stand on
            g = self.state.generation(sid)
            if (
                not settling
                and s.access == "read_write"
                and g != self._clean.get(sid)
                and g != self._handled.get(sid)
            ):
                out.append(s)
        return out

    def _live_counters(self, *, quiet: bool = True) -> dict[str, int]:
        """Each store's newest known counter: the watch's, or the applied one when a pull went
        further (the changes feed answers up to the counter of its own read). A busy mount
        (`quiet` False) pulls nothing: its stores get the applied counter, so the tick plans
        their pushes against the baseline and the view stays as it is (never a pull in the
        middle of a command); the move stays pending for the pull."""
        out = {}
        for s in self.stores:
            applied = self.state.store_counter(s.store_id)
            if not quiet and applied is not None:
                out[s.store_id] = applied
                continue
            seen = self._seen.get(s.store_id)
            known = [c for c in (applied, seen) if c is not None]
            if known:
                out[s.store_id] = max(known)
        return out

    async def sync_now(self, *, force: bool, wait: bool = False, used: bool = True) -> dict[str, Any]:
        """`memfs sync`: run a tick if due (or forced); return once remote changes are in the view.
        Uploads go on in the background unless `wait`. In live mode a tick is due for the stores
        the watch saw move and those with changes not yet pushed (no debounce: the caller is
        between commands); the interval only paces retries of what failed. `used`: a caller's
        (not the timer's), which counts as a use of the mount (`in_use`)."""
        if used:
            self._used_at = time.monotonic()
        async with self.tick_lock:
            if not force:
                live = self._live_stores(quiet=True, debounce=False)
                if live:
                    return await self._tick(live, counters=self._live_counters(), wait=wait)
                if self.due_in() > 0 or (self.watching and not self._unsettled):
                    if wait:  # uploads of the last tick, if any, are still "this sync's" to wait for
                        await self.push_done.wait()
                    return {"ok": True, "ran": False, "next_in": self.due_in(), "mode": self.mode}
            return await self._tick(self.stores, counters=None, wait=wait)

    async def _tick(
        self, stores: list[StoreInfo], *, counters: dict[str, int] | None, wait: bool
    ) -> dict[str, Any]:
        """One tick over `stores` (the caller holds tick_lock). `counters`: what the watch
        reported (live mode), so no counters request; None: ask them (a polling tick)."""
        await self.push_done.wait()  # one tick at a time, pushes included
        log.debug(
            "tick: %s, counters %s, quiet %.2fs",
            [s.store_id for s in stores],
            "polled" if counters is None else "from the watch",
            time.monotonic() - self.fs.last_activity,
        )
        self.last_attempt = (
            trio.current_time()
        )  # a failed tick counts as an attempt (SEMANTICS.md#d-unreachable)
        if counters is None:
            self._signalled_at = time.monotonic()  # it reads every counter: live.py's use signal
        self._net_sid, self._full_sid = self._net_store(stores)
        self._polled_at = time.monotonic()
        applied_before = {s.store_id: self.state.store_counter(s.store_id) for s in stores}
        report, pushes = await self._pull_all(stores=stores, counters=counters)
        if not report.ok:  # the interval runs from the failure: a hung service must not make
            self.last_attempt = (
                trio.current_time()
            )  # every call wait out a timeout (SEMANTICS.md#d-unreachable)
        log.debug(
            "pulled: ok %s, %d applied, counters %s, %d push stage(s)",
            report.ok,
            report.pulled,
            {s.store_id: self.state.store_counter(s.store_id) for s in stores},
            sum(len(a) for _s, a in pushes),
        )
        self._after_pull(stores, report, pushes, counters=counters, applied_before=applied_before)
        await self.fs.wait_invalidated()  # "visible" means the kernel dropped what it cached
        if pushes and report.ok:
            self.push_done = trio.Event()
            if wait or self._nursery is None:
                await self._push_all(pushes, report)
            else:
                self._nursery.start_soon(self._push_all, pushes, report)
        if wait:
            await self.push_done.wait()
        return {
            "ok": report.ok,
            "ran": True,
            "result": "ok" if report.ok else "failed",
            "error": report.error,
            "pulled": report.pulled,
            "pushed": report.pushed,
            "superseded": report.superseded,
            "requests": report.requests,
            "mode": self.mode,
        }

    def _after_pull(
        self,
        stores: list[StoreInfo],
        report: TickReport,
        pushes: Pushes,
        *,
        counters: dict[str, int] | None,
        applied_before: dict[str, int | None],
    ) -> None:
        """Live-mode bookkeeping after a tick's pull: which moves are applied, which stores are
        settled, and whether the watch may start again after a failure. A store the watch saw
        move again while it was pulled stays moved and is pulled again at once (the mount is
        quiet, or `memfs sync` is between commands): only a pull that applied nothing (deferred:
        a file open with unflushed writes) waits a second before the next look."""
        polled = counters is None
        pushing = {store.store_id for store, _ in pushes}
        behind = False
        for s in stores:
            sid = s.store_id
            applied = self.state.store_counter(sid)
            before = applied_before.get(sid)
            pulled = counters is None or counters.get(sid) != before  # a push-only wave asks no pull
            if sid in self._moved and applied is not None and applied >= self._seen.get(sid, applied):
                self._moved.discard(sid)
            elif sid in self._moved and pulled and applied == before:
                behind = True  # deferred (a file open with unflushed writes) or failed
            if sid not in pushing:
                self._handled[sid] = self.state.generation(sid)
            if report.ok:
                self._unsettled.discard(sid)
            elif self.watching:
                self._unsettled.add(sid)
        if not report.ok:
            self._live_retry_at = trio.current_time() + self.interval  # SEMANTICS.md#d-unreachable
            log.debug("live retry in %.1fs: the tick failed", self.interval)
        elif behind:
            self._live_retry_at = trio.current_time() + QUIET_SECONDS  # not a look every 0.1 s
            log.debug("live retry in %.1fs: still behind %s", QUIET_SECONDS, self._seen)
        if report.ok and polled:
            self._watch_again.set()

    # -- the tick ---------------------------------------------------------------------------
    async def initial(
        self, counters: dict[str, int] | None = None, prefetched: Mapping[str, Prefetched] | None = None
    ) -> None:
        """Materialise every store before the mount is shown (no pushes: those wait for a tick).

        `counters`, `prefetched`: what the mount's start already read (memfs/session/early_fetch.py):
        the stores' counters (then they are not asked again), and snapshots streamed into the
        state dir, which a first download takes instead of asking for one (one that failed is
        asked anew)."""
        self.reader.prefetched = dict(prefetched or {})
        self._signalled_at = time.monotonic()  # the download's own requests say the stores are used (live.py)
        try:
            report, _pushes = await self._pull_all(initial=True, counters=counters)
        finally:
            self.reader.prefetched = {}  # a store that was not downloaded by snapshot: not for later
        if not report.ok:
            raise TickFailed(report.error)
        # The download was this interval's pull: the first tick (and the first push of changes a
        # crashed mount left staged) comes one interval later, or at the first `memfs sync --force`.
        self.last_attempt = trio.current_time()
        self._next_net = self.last_attempt + self.safety_net
        self._next_full = self.last_attempt + self.full_listing
        for s in self.stores:  # what a crashed mount left staged waits for that tick, live or not
            sid = s.store_id
            self._handled[sid] = self._gen_seen[sid] = self.state.generation(sid)
            if s.access == "read_write" and maybe_staged(self.fs, sid, self.state.baseline(sid)):
                self._unsettled.add(sid)

    async def _pull_all(
        self,
        *,
        initial: bool = False,
        stores: list[StoreInfo] | None = None,
        counters: dict[str, int] | None = None,
    ) -> tuple[TickReport, Pushes]:
        report = TickReport()
        before = self.client.requests_sent - self.watch_requests  # the watch's own are not this tick's
        pushes: Pushes = []
        stores = self.stores if stores is None else stores
        try:
            if counters is None and self.has_counter is not False:
                counters = await self.client.counters([s.store_id for s in self.stores])
            if self.has_counter is None:
                self.has_counter = counters is not None

            async def pull(store: StoreInfo) -> None:
                try:
                    actions = await self._pull_store(store, counters, report)
                except ApiError as exc:
                    if not exc.retryable and not initial:
                        # This store is broken (deleted, access revoked); the others go on.
                        self._record(store, "failed", str(exc))
                        return
                    raise
                if actions:
                    pushes.append((store, actions))
                self._record(store, "ok", None)

            # Stores pull concurrently (their network parts overlap); each one's apply step is
            # synchronous, so every store's view still changes atomically.
            await gather(stores, pull, len(stores))
        except (ApiError, Unreachable) as exc:
            report.ok = False
            report.error = str(exc)
            self._asked_to_wait(exc)
            log.warning(
                "sync tick failed: %s (next attempt in %.0fs)",
                exc,
                max(self.interval, self._not_before - trio.current_time()),
            )
            for store in stores:
                self._record(store, "failed", str(exc))
        report.requests = self.client.requests_sent - self.watch_requests - before
        return report, pushes

    def _record(self, store, result: str, error: str | None) -> None:
        s = self.sync[store.store_id]
        s.last_sync_at = _now_iso()
        if (s.last_result, s.last_error) != (result, error):  # persisted for `memfs status` offline
            self.state.update_store(
                store.store_id, last_sync_at=s.last_sync_at, last_result=result, last_error=error
            )
        s.last_result = result
        s.last_error = error

    async def _pull_store(
        self, store: StoreInfo, counters: dict[str, int] | None, report: TickReport
    ) -> list[tuple[P.PushAction, ...]]:
        """One store's pull: read what moved, fetch what the plan needs, apply; returns the push
        stages the plan left (none for a read-only store, or when the apply was deferred)."""
        sid = store.store_id
        applied = self.state.store_counter(sid)
        remote_counter = counters.get(sid) if counters is not None else None
        moved = counters is None or applied is None or remote_counter != applied
        generation = self.state.generation(sid)
        if not moved and self._clean.get(sid) == generation:
            return []  # idle: nothing on either side changed since this store was last found clean
        baseline = self.reader.baseline(sid)
        base = baseline.entries
        if not moved and not maybe_staged(self.fs, sid, base):
            self._clean[sid] = generation
            return []
        pulled = Pulled()  # what this pull reads beside the list (a failed pull's is dropped with it)
        new_counter = applied
        if moved:
            remote, order, new_counter = await self.reader.read(
                store,
                applied,
                base,
                pulled,
                has_counter=self.has_counter,
                sizes=baseline.sizes,
                expect=baseline.remote,
                net=sid == self._full_sid,
                wide=self.reader.feed.wide if sid == self._net_sid else None,
            )
            if new_counter is None:
                new_counter = remote_counter
            if counters is None and (remote is baseline.remote or remote == baseline.remote):
                self._feed_read(sid, pulled)  # nothing of the store to apply: the feed is read up to here
                # No counter (SEMANTICS.md#d-no-counter): an idle store reads as its baseline (nothing new in
                # its version feed, or a listing equal to it). Then nothing moved remotely, and the
                # idle test below applies as with a counter:
                # planning 8 x 2,000 unchanged files each tick took seconds on this thread.
                moved = False
                if self._clean.get(sid) == generation:
                    return []
                if not maybe_staged(self.fs, sid, base):
                    self._clean[sid] = generation
                    return []
            if remote is baseline.remote:  # the reader's cached dict (an unchanged listing): ours to change
                remote = dict(remote)
        else:
            # Nothing moved remotely: the store is as the baseline saw it (the reader's cached
            # dict, read at this generation; copied, as the fetch below may change it).
            remote = dict(baseline.remote)
            order = in_path_order(remote)
        # A clean store's pull plans the memories the store changed only (sync/narrow.py).
        narrow = baseline if moved and self._is_clean(sid, generation, base) else None
        # No await between the plan made last and its apply (see `_plan_with_content`).
        plan, new_counter, narrowed = await self._plan_with_content(
            store, base, remote, order, moved, pulled, new_counter, narrow
        )
        with self.state.transaction():  # one commit per store and tick: all of the plan or none of it
            deferred = apply_plan(self.fs, self.state, store, plan, pulled)
        if deferred:
            return []
        self.sync[sid].count_conflicts(plan)
        if narrowed and not plan.push_stages and leaves_view_as_base(plan):
            # The view was the baseline and the plan made both the store's: clean still, and the
            # cached baseline moved as the journal's did (no read of the whole store next time).
            self.reader.advance(sid, plan.bookkeeping)
            self._clean[sid] = self.state.generation(sid)
        self._feed_read(sid, pulled)
        report.pulled += sum(
            1 for a in plan.view if isinstance(a, (P.Materialise, P.MoveLocal, P.RemoveLocal))
        )
        if new_counter is not None:
            self.state.set_store_counter(sid, new_counter)
        if not moved and plan.empty:  # e.g. only held deletes or refused files differ: nothing to do
            self._clean[sid] = generation
        return list(plan.push_stages) if store.access == "read_write" else []

    def _is_clean(self, sid: str, generation: int, base: Mapping[str, BaseEntry]) -> bool:
        """Nothing staged: the view is the baseline (found so at this generation, or now)."""
        if self._clean.get(sid) == generation:
            return True
        if maybe_staged(self.fs, sid, base):
            return False
        self._clean[sid] = generation
        return True

    async def _plan_with_content(
        self,
        store: StoreInfo,
        base: Mapping[str, BaseEntry],
        remote: dict[str, P.RemoteEntry],
        order: list[str],
        moved: bool,
        pulled: Pulled,
        new_counter: int | None,
        narrow: Baseline | None = None,
    ) -> tuple[P.Plan, int | None, bool]:
        """`_pull_store`'s plan, with the content it needs at hand: (the plan, the counter to
        record, which a snapshot replaces, whether the plan is a narrowed one). `narrow`: the
        baseline of a clean store, whose plan may be made on the memories the store changed
        only (sync/narrow.py)."""
        sid = store.store_id
        # Fetch what the plan needs, then plan again on the view as it is *now*, and apply with no
        # await in between: an edit made while we fetched is never overwritten unseen. The plan is
        # a pure function of its inputs (plan_pull): when the fetch changed no remote entry and
        # the state's generation did not move (no write to the files, baseline, refused, skipped
        # or held deletes), planning again would give this plan again, so it is kept (a hosted
        # one-edit tick planned its 2,000-file store twice). Unflushed writes do not move the
        # generation: the plan does not depend on them, and apply_plan defers over a dirty path.
        plan: P.Plan | None = None
        snapped = narrowed = False
        merges: dict[P.MergeKey, P.MergeResult] = {}  # SEMANTICS.md#d-merge
        when = datetime.now(UTC)
        for _round in range(4):
            plan = None
            # (still clean: a close while content was fetched moves the generation)
            if narrow is not None and not snapped and self._clean.get(sid) == self.state.generation(sid):
                plan = plan_narrowed(
                    self.fs,
                    self.state,
                    store,
                    base,
                    narrow.remote,
                    narrow.sizes,
                    remote,
                    deletions=self.deletions,
                    max_files=self.max_files,
                    max_bytes=self.max_bytes,
                )
            narrowed = plan is not None
            if plan is None:
                plan = plan_pull(
                    self.fs,
                    self.state,
                    store,
                    base,
                    remote,
                    order,
                    remote_changed=moved,
                    deletions=self.deletions,
                    max_files=self.max_files,
                    max_bytes=self.max_bytes,
                    on_conflict=self.on_conflict,
                    merges=merges,
                    copy_who=self.conflict_who,
                    copy_when=when,
                )
            planned_at = self.state.generation(sid)
            missing = {
                a.sha: a.memory_id
                for a in plan.view
                if isinstance(a, P.Materialise)
                and not pulled.has_content(a.sha)
                and not self.state.has_blob(a.sha)
            }
            merged = merge_wanted(self.state, pulled, plan.merge_wanted)
            if merged.keys() - merges.keys():
                merges.update(merged)  # a merge made now: plan again with it
                continue
            missing |= missing_content(self.state, pulled, plan.merge_wanted)
            if not missing:
                break
            if moved and not snapped and worth_a_snapshot(missing, remote):
                snapped = True
                snap = await self.reader.snapshot(store, pulled)
                if snap is not None:  # the store as it is now, content included: plan again on it
                    remote, order, new_counter = snap
                    continue
            changed = await self.reader.fetch(store, missing, pulled)
            if not changed and self.state.generation(sid) == planned_at and not plan.merge_wanted:
                break  # the same inputs: the plan made now would be this one, its content is here
            for m in changed:  # the memory moved on since it was listed: use what we fetched
                remote[m["id"]] = P.RemoteEntry(
                    m["id"], m["path"], m["content_sha256"], m["content_size_bytes"]
                )
            order = in_path_order(remote)
        assert plan is not None  # the loop ran at least once
        return plan, new_counter, narrowed

    def _feed_read(self, sid: str, pulled: Pulled) -> None:
        """Record where the store's version feed stands, once what it said is in the view."""
        if pulled.feed is not None and pulled.feed != self.state.feed_position(sid):
            self.state.set_feed_position(sid, pulled.feed)
        pulled.feed = None

    # -- push -------------------------------------------------------------------------------
    async def _push_all(self, pushes: Pushes, report: TickReport) -> None:
        """Every store's pushes at once (each in its own stage order): over a WAN a store must
        not wait for the round trips of the one before it. A store that fails keeps its changes
        staged and the others go on."""

        async def push(store: StoreInfo, actions: list) -> None:
            sid = store.store_id
            before = self.sync[sid].pushed
            log.debug("push %s: %d action(s)", sid, sum(len(stage) for stage in actions))
            try:
                await self.pusher.push_store(
                    store, actions, report, self.sync[sid], batches=bool(self.has_counter)
                )
            except (ApiError, Unreachable) as exc:
                report.ok = False
                report.error = str(exc)
                self._record(store, "push failed", str(exc))
                log.warning("push to %s failed: %s; changes stay staged", store.slug, exc)
                self.last_attempt = trio.current_time()  # as for a failed pull (SEMANTICS.md#d-unreachable)
                self._asked_to_wait(exc)
                self._store_push_failed(sid)
            except Exception as exc:  # a bug must not take the mount down; the changes stay staged
                report.ok = False
                report.error = f"{type(exc).__name__}: {exc}"
                log.exception("push to %s crashed; changes stay staged", store.slug)
                self._store_push_failed(sid)
            log.debug("push %s done: %d landed", sid, self.sync[sid].pushed - before)
            if self.sync[sid].pushed == before:
                # Nothing landed (409s wait for the pull the watch will ask for; refusals are not
                # retried): no further live wave for this state. After progress one more wave
                # looks, which finds the store clean or sends what had to wait (a create on the
                # path a rename just freed).
                self._handled[sid] = self.state.generation(sid)

        try:
            async with trio.open_nursery() as nursery:
                for store, actions in pushes:
                    nursery.start_soon(push, store, actions)
        finally:
            self.push_done.set()

    def _store_push_failed(self, sid: str) -> None:
        """A store's push wave failed: no further live wave for this state; a poll retries it."""
        log.debug("push %s failed: retry in %.1fs", sid, self.interval)
        self._handled[sid] = self.state.generation(sid)
        if self.watching:  # retried by a poll an interval later (SEMANTICS.md#d-unreachable)
            self._unsettled.add(sid)
            self._live_retry_at = trio.current_time() + self.interval

    # -- end of session ---------------------------------------------------------------------
    def not_on_store(self) -> dict[str, NotOnStore]:
        """store id -> what this mount holds that its store does not (see `not_on_store`)."""
        return {
            s.store_id: not_on_store(
                self.state,
                s,
                self.fs.local_view(s.store_id),
                deletions=self.deletions,
                max_files=self.max_files,
                max_bytes=self.max_bytes,
            )
            for s in self.stores
        }

    async def final_sync(self, timeout: float) -> dict[str, Any]:
        """Pull and push, bounded; report what is not on the store (never deleted). A second tick
        runs when the first one made progress and left pushes it could not yet make (a create on
        the path a rename just freed goes out one tick after that rename). A failed tick (a
        dropped connection, a 5xx) is tried again FINAL_RETRIES times: the last chance before the
        mount goes; a push whose answer was lost is settled by the next pull (SEMANTICS.md#d-end)."""
        result: dict[str, Any] = {"ok": False, "error": "timed out", "pushed": 0}
        pushed = progress = failures = 0
        with trio.move_on_after(timeout):
            while True:
                result = await self.sync_now(force=True, wait=True)
                pushed += result.get("pushed", 0)
                if not self._staged_left():
                    break
                if not result.get("ok"):
                    failures += 1
                    if failures > FINAL_RETRIES:
                        break
                    log.info("final sync: the tick failed (%s); trying again", result.get("error"))
                    await trio.sleep(FINAL_RETRY_PAUSE * failures)
                    continue
                progress += 1  # a tick that went through: more only while it pushes something, or
                # while another writer's change met ours (a 409: the next pull merges the two)
                if not (result.get("pushed") or result.get("superseded")) or progress >= FINAL_TICKS:
                    break
        missing = self.not_on_store()
        pending = sum(n.count for n in missing.values())
        return {
            "pending": pending,
            "pushed": pushed,
            "error": result.get("error"),
            "ok": bool(result.get("ok")) and pending == 0,
            "not_on_store": {sid: n.summary() for sid, n in missing.items()},
            "slugs": {s.store_id: s.slug for s in self.stores},
        }

    def _staged_left(self) -> bool:
        return any(n.staged for n in self.not_on_store().values())

    def status(self, root: str | None = None) -> dict[str, Any]:
        out = []
        missing = self.not_on_store()
        for store in self.stores:
            s = self.sync[store.store_id]
            out.append(
                {
                    "store_id": store.store_id,
                    "name": store.name,
                    "slug": store.slug,
                    "mount_path": os.path.join(root, store.slug) if root else store.slug,
                    "access": store.access,
                    # The counter last applied to the view: a watcher of the mount can tell a change
                    # has landed without touching the mount. `counter_seen`: the newest the watch saw.
                    "counter": self.state.store_counter(store.store_id),
                    "counter_seen": self._seen.get(store.store_id),
                    "pull_pending": store.store_id in self._moved,
                    "last_sync_at": s.last_sync_at,
                    "last_result": s.last_result,
                    "last_error": s.last_error,
                    **missing[store.store_id].summary(),
                    **s.conflict_summary(),
                }
            )
        return {
            "stores": out,
            "next_tick_in": self.due_in(),
            "has_counter": self.has_counter,
            "mode": self.mode,
            "mode_reason": self.mode_reason,
            "interval": self.interval,
            "watch_requests": self.watch_requests,
            # what the client sent, by kind, in the last minute and hour (SEMANTICS.md#d-budget)
            "requests": self.client.budget.snapshot(),
            "in_use": self.in_use(),
        }
