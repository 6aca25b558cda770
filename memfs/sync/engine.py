"""A sync tick (SEMANTICS.md#d-tick): counters → changes/listing → fetch → apply the plan → push.

The decisions are in plan.py (pure). Around them: remote.py reads the store (feed, snapshot,
listing, fetch), apply.py applies a plan to the view, push.py sends and books a store's pushes,
not_on_store.py says what the mount holds that the store does not. This module orchestrates them
and keeps the rules of *when* (SEMANTICS.md#d-when, live mode included), failure
(SEMANTICS.md#d-unreachable) and the end of the session (SEMANTICS.md#d-end).

Two modes. **Polling**: a tick at most once per interval, at `memfs sync`, or by the timer (on a
busy mount close-to-open, below). **Live** (the service has the watch, SEMANTICS.md#d-counter): one
held watch for all the stores tells which counters moved; a moved store is pulled at once,
close-to-open (a file open now keeps its content until it is closed, and on a busy mount a staged
file keeps its own: sync/holds.py), or at the next `memfs sync`, and what the agent changed is
pushed after a short debounce. The interval then only paces the retries of what failed. A watch
that fails counts as an attempt and the mount polls until a tick succeeds again, then watches again.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

import trio

from memfs.client.errors import ApiError, Unreachable
from memfs.records import StoreInfo
from memfs.sync import plan as P
from memfs.sync.apply import maybe_staged
from memfs.sync.bounded import gather
from memfs.sync.live import QUIET_SECONDS, LiveWatch
from memfs.sync.not_on_store import NotOnStore, not_on_store
from memfs.sync.options import EngineOptions
from memfs.sync.ports import Journal, StoreApi, View
from memfs.sync.push import Pusher
from memfs.sync.remote import Prefetched, StoreReader
from memfs.sync.report import StoreSync, TickFailed, TickReport
from memfs.sync.schedule import PollSchedule
from memfs.sync.store_pull import StorePull
from memfs.sync.write_through import write_through

log = logging.getLogger("memfs.sync")

__all__ = ["EngineOptions", "SyncEngine", "TickFailed"]

TIMER_STEP = 0.1  # seconds between the timer's looks (a watch's answer wakes it at once)
# The final sync tries a failed tick again this many times, after 0.5 s, then 1 s (within its bound).
FINAL_RETRIES = 2
FINAL_RETRY_PAUSE = 0.5
FINAL_TICKS = 6  # the final sync's ticks that went through, at most (each merges what met a 409)

Pushes = list[tuple[StoreInfo, list[tuple[P.PushAction, ...]]]]  # what a tick's pulls left to push, by store


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class SyncEngine:
    """The tick's orchestration over its collaborators: `pull` (one store's pull, store_pull.py),
    `pusher` (one store's push, push.py), `live` (the watch and the live waves' bookkeeping,
    live.py) and `schedule` (when a timed tick is due, schedule.py)."""

    def __init__(
        self, client: StoreApi, state: Journal, fs: View, stores: Iterable[StoreInfo], options: EngineOptions
    ):
        self.client = client
        self.state = state
        self.fs = fs
        self.stores = list(stores)
        self.options = options
        self.has_counter: bool | None = None  # learned on the first tick (SEMANTICS.md#d-no-counter)
        self.reader = StoreReader(client, state)
        self.store_pull = StorePull(self.reader, state, fs, options)
        self.pusher = Pusher(client, state, fs)
        self.schedule = PollSchedule(options, self.stores)
        self.live = LiveWatch(client, state, fs, self.stores, self.schedule, options.live)
        self.tick_lock = trio.Lock()
        self.push_done = trio.Event()
        self.push_done.set()
        self.sync = {s.store_id: StoreSync(s) for s in self.stores}
        self._nursery: trio.Nursery | None = None

    # -- when (SEMANTICS.md#d-when) ------------------------------------------------------------------
    def due_in(self) -> float:
        return self.schedule.due_in(has_counter=self.has_counter, in_use=self.in_use())

    def in_use(self) -> bool:
        """A filesystem request or a `memfs sync` since the last tick began (SEMANTICS.md#d-no-counter)."""
        return self.schedule.in_use(self.fs.last_activity)

    @property
    def interval(self) -> float:
        return self.options.interval

    @property
    def busy(self) -> bool:
        """A tick or a push is under way: content it fetched, streamed or is sending may be in
        the state dir's blobs before any row refers to it (the state dir's upkeep, mount/upkeep.py,
        sweeps none then)."""
        return self.tick_lock.locked() or not self.push_done.is_set()

    @property
    def mode(self) -> str:
        return "live" if self.live.watching else "polling"

    async def timer(self) -> None:
        """The daemon's own sync: in live mode, pull what moved once the mount is quiet and push
        what changed after the debounce; otherwise (and for retries) a due tick once the mount
        has been quiet for about a second."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.has_counter and self.live.wanted:
                nursery.start_soon(self.live.watch_loop)
            elif self.has_counter is False:
                self.live.mode_reason = (
                    f"the service has no counter (the hosted API, SEMANTICS.md#d-no-counter): polling the "
                    f"version feed every {self.interval:g}s while the mount is used, every "
                    f"{max(self.interval, self.options.idle_poll):g}s while nobody uses it"
                )
            while True:
                with trio.move_on_after(TIMER_STEP):
                    await self.live.wake.wait()
                self.live.wake = trio.Event()
                self.live.note_changes()
                if self.busy:
                    continue
                quiet = time.monotonic() - self.fs.last_activity >= QUIET_SECONDS
                try:
                    if not await self._live_tick(quiet=quiet) and (
                        self.due_in() == 0 and (not self.live.watching or self.live.unsettled)
                    ):
                        if quiet:
                            await self.sync_now(force=False, used=False)
                        elif not self.live.watching:
                            await self._busy_poll()
                    # After the tick, not before: a polled or failed one holds it (use_signal_due).
                    if self.live.use_signal_due():
                        self.live.signalled()
                        nursery.start_soon(self.live.signal_use)
                except Exception:  # a bug in a tick must never take the mount down
                    log.exception("sync tick crashed; the next one runs in %.0fs", self.interval)

    async def _live_tick(self, *, quiet: bool) -> bool:
        """The timer's live tick, if one is due: the moved stores it pulls now (close-to-open:
        busy or not, the files open now keep their content, and while busy the staged ones keep
        theirs, SEMANTICS.md#d-when) and the debounced pushes. Whether it ran."""
        pulls = self.store_pull
        live = self.live.stores_due(pulls, quiet=quiet, debounce=True, keep_open=True)
        if not live:
            return False
        async with self.tick_lock:
            counters = self.live.counters(
                lambda sid: self.live.pulls_now(sid, pulls, quiet=quiet, keep_open=True)
            )
            await self._tick(live, counters=counters, wait=False, keep_open=True, hold_staged=not quiet)
        return True

    async def _busy_poll(self) -> None:
        """A due polling tick on a busy mount (no watch), close-to-open as a live pull, one per
        interval as while the mount is used: it is the interval's attempt (SEMANTICS.md#d-when)."""
        async with self.tick_lock:
            if self.due_in() == 0:
                await self._tick(self.stores, counters=None, wait=False, keep_open=True, hold_staged=True)

    async def sync_now(self, *, force: bool, wait: bool = False, used: bool = True) -> dict[str, Any]:
        """`memfs sync`: run a tick if due (or forced); return once remote changes are in the view.
        Uploads go on in the background unless `wait`. In live mode a tick is due for the stores
        the watch saw move and those with changes not yet pushed (no debounce: the caller is
        between commands); the interval only paces retries of what failed. `used`: a caller's
        (not the timer's), which counts as a use of the mount (`in_use`)."""
        if used:
            self.schedule.used()
        async with self.tick_lock:
            if not force:
                live = self.live.stores_due(self.store_pull, quiet=True, debounce=False, keep_open=False)
                if live:
                    return await self._tick(live, counters=self.live.counters(), wait=wait)
                if self.due_in() > 0 or (self.live.watching and not self.live.unsettled):
                    if wait:  # uploads of the last tick, if any, are still "this sync's" to wait for
                        await self.push_done.wait()
                    return {"ok": True, "ran": False, "next_in": self.due_in(), "mode": self.mode}
            return await self._tick(self.stores, counters=None, wait=wait)

    async def _tick(
        self,
        stores: list[StoreInfo],
        *,
        counters: dict[str, int] | None,
        wait: bool,
        keep_open: bool = False,
        hold_staged: bool = False,
    ) -> dict[str, Any]:
        """One tick over `stores` (the caller holds tick_lock). `counters`: what the watch
        reported (live mode), so no counters request; None: ask them (a polling tick).
        `keep_open`: the files open now keep their content (the timer's ticks); `hold_staged`: so
        do the staged ones (a busy mount's: sync/holds.py)."""
        await self.push_done.wait()  # one tick at a time, pushes included
        log.debug(
            "tick: %s, counters %s, quiet %.2fs",
            [s.store_id for s in stores],
            "polled" if counters is None else "from the watch",
            time.monotonic() - self.fs.last_activity,
        )
        self.schedule.attempted()  # a failed tick counts as an attempt (SEMANTICS.md#d-unreachable)
        if counters is None:
            self.live.signalled()  # it reads every counter: live.py's use signal
        turns = self.schedule.turns(stores, has_counter=self.has_counter, in_use=self.in_use())
        self.schedule.polled_at = time.monotonic()
        applied_before = {s.store_id: self.state.store_counter(s.store_id) for s in stores}
        report, pushes = await self._pull_all(
            stores=stores, counters=counters, turns=turns, keep_open=keep_open, hold_staged=hold_staged
        )
        if not report.ok:  # the interval runs from the failure: a hung service must not make
            self.schedule.attempted()  # every call wait out a timeout (SEMANTICS.md#d-unreachable)
        log.debug(
            "pulled: ok %s, %d applied, counters %s, %d push stage(s)",
            report.ok,
            report.pulled,
            {s.store_id: self.state.store_counter(s.store_id) for s in stores},
            sum(len(a) for _s, a in pushes),
        )
        pushing = {store.store_id for store, _ in pushes}
        self.live.after_pull(
            stores, report.ok, pushing, counters, applied_before, self.store_pull.pending_open
        )
        if keep_open and self.live.settling():  # a save burst is pushed once (live.py `stores_due`)
            pushes = []  # (still `pushing`: the wave after the debounce sends them)
        await self.fs.wait_invalidated()  # "visible" means the kernel dropped what it cached
        if pushes and report.ok:
            self.push_done = trio.Event()
            if wait or self._nursery is None:
                sent = self.client.requests_sent - self.live.requests  # the answer counts its uploads
                await self.push_all(pushes, report)
                report.requests += self.client.requests_sent - self.live.requests - sent
            else:
                self._nursery.start_soon(self.push_all, pushes, report)
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
        self.live.signalled()  # the download's own requests say the stores are used (live.py)
        try:
            report, _pushes = await self._pull_all(initial=True, counters=counters)
        finally:
            self.reader.prefetched = {}  # a store that was not downloaded by snapshot: not for later
        if not report.ok:
            raise TickFailed(report.error)
        # The download was this interval's pull: the first tick (and the first push of changes a
        # crashed mount left staged) comes one interval later, or at the first `memfs sync --force`.
        self.schedule.started()
        # What a crashed mount left staged waits for that tick, live or not.
        self.live.started(lambda s: maybe_staged(self.fs, s.store_id, self.state.baseline(s.store_id)))

    def start_offline(self) -> None:
        """Serve without a first download (it failed: the service is unreachable) what the state
        dir held: the ticks then run as after a download, and catch up once the service answers
        (a store mounted on a laptop, SEMANTICS.md#d-store-mount)."""
        self.schedule.started()
        self.live.started(lambda s: maybe_staged(self.fs, s.store_id, self.state.baseline(s.store_id)))

    async def _pull_all(
        self,
        *,
        initial: bool = False,
        stores: list[StoreInfo] | None = None,
        counters: dict[str, int] | None = None,
        turns: tuple[str | None, str | None] = (None, None),
        keep_open: bool = False,
        hold_staged: bool = False,
    ) -> tuple[TickReport, Pushes]:
        report = TickReport()
        before = self.client.requests_sent - self.live.requests  # the watch's own are not this tick's
        pushes: Pushes = []
        stores = self.stores if stores is None else stores
        try:
            if counters is None and self.has_counter is not False:
                counters = await self.client.counters([s.store_id for s in self.stores])
            if self.has_counter is None:
                self.has_counter = counters is not None

            async def pull(store: StoreInfo) -> None:
                try:
                    actions = await self.store_pull.pull(
                        store,
                        counters,
                        report,
                        has_counter=self.has_counter,
                        turns=turns,
                        tally=self.sync[store.store_id],
                        keep_open=keep_open,
                        hold_staged=hold_staged,
                    )
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
            self.schedule.asked_to_wait(exc)
            log.warning(
                "sync tick failed: %s (next attempt in %.0fs)",
                exc,
                max(self.interval, self.schedule.not_before - trio.current_time()),
            )
            for store in stores:
                self._record(store, "failed", str(exc))
        report.requests = self.client.requests_sent - self.live.requests - before
        return report, pushes

    def _record(self, store, result: str, error: str | None) -> None:
        s = self.sync[store.store_id]
        s.last_sync_at = _now_iso()
        if result == "ok":
            s.last_ok_at = s.last_sync_at
        if (s.last_result, s.last_error) != (result, error):  # persisted for `memfs status` offline
            self.state.update_store(
                store.store_id, last_sync_at=s.last_sync_at, last_result=result, last_error=error
            )
        s.last_result = result
        s.last_error = error

    # -- the worker's write and edit (SEMANTICS.md#d-merge, "told in band") ------------------------
    async def write_through(self, store_id: str, path: str) -> dict[str, Any]:
        """Push `path`'s store now and say what became of `path` (sync/write_through.py)."""
        return await write_through(self, store_id, path)

    # -- push -------------------------------------------------------------------------------
    async def push_all(self, pushes: Pushes, report: TickReport) -> None:
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
                self.schedule.attempted()  # as for a failed pull (SEMANTICS.md#d-unreachable)
                self.schedule.asked_to_wait(exc)
                self.live.push_failed(sid)
            except Exception as exc:  # a bug must not take the mount down; the changes stay staged
                report.ok = False
                report.error = f"{type(exc).__name__}: {exc}"
                log.exception("push to %s crashed; changes stay staged", store.slug)
                self.live.push_failed(sid)
            log.debug("push %s done: %d landed", sid, self.sync[sid].pushed - before)
            if self.sync[sid].pushed == before:
                # Nothing landed (409s wait for the pull the watch will ask for; refusals are not
                # retried): no further live wave for this state. After progress one more wave
                # looks, which finds the store clean or sends what had to wait (a create on the
                # path a rename just freed).
                self.live.settled(sid)

        try:
            async with trio.open_nursery() as nursery:
                for store, actions in pushes:
                    nursery.start_soon(push, store, actions)
        finally:
            self.push_done.set()

    # -- end of session ---------------------------------------------------------------------
    def not_on_store(self) -> dict[str, NotOnStore]:
        """store id -> what this mount holds that its store does not (see `not_on_store`)."""
        out = {
            s.store_id: not_on_store(
                self.state,
                s,
                self.fs.local_view(s.store_id),
                deletions=self.options.deletions,
                max_files=self.options.max_files,
                max_bytes=self.options.max_bytes,
            )
            for s in self.stores
        }
        for (
            sid,
            at,
        ) in self.pusher.archived.items():  # what is staged there stays so (SEMANTICS.md#d-archived)
            out[sid].archived_at = at
        return out

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
        return any(n.staged and not n.archived_at for n in self.not_on_store().values())

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
                    "counter_seen": self.live.seen.get(store.store_id),
                    "pull_pending": store.store_id in self.live.moved,
                    "last_sync_at": s.last_sync_at,
                    "last_result": s.last_result,
                    "last_error": s.last_error,
                    "last_ok_at": s.last_ok_at,
                    **missing[store.store_id].summary(),
                    **s.conflict_summary(),
                }
            )
        return {
            "stores": out,
            "next_tick_in": self.due_in(),
            "has_counter": self.has_counter,
            "mode": self.mode,
            "mode_reason": self.live.mode_reason,
            "interval": self.interval,
            "watch_requests": self.live.requests,
            # what the client sent, by kind, in the last minute and hour (SEMANTICS.md#d-budget)
            "requests": self.client.budget.snapshot(),
            "in_use": self.in_use(),
        }
