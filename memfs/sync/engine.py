"""A sync tick (SEMANTICS.md#d-tick): counters → changes/listing → fetch → apply the plan → push.

The decisions are in plan.py (pure); this module does the I/O around them and keeps the rules of
*when* (SEMANTICS.md#d-when, live mode included), failure (SEMANTICS.md#d-unreachable) and the end
of the session (SEMANTICS.md#d-end).

Two modes. **Polling**: a tick at most once per interval, at `memfs sync` or once the mount is
quiet. **Live** (the service has the watch, SEMANTICS.md#d-counter): one held watch for all the stores tells which
counters moved; a moved store is pulled at the next `memfs sync` or as soon as the mount is quiet,
and what the agent changed is pushed after a short debounce. The interval then only paces the
retries of what failed. A watch that fails counts as an attempt and the mount polls until a tick
succeeds again, then watches again.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import trio

from memfs.client import CONCURRENCY, ApiError, Listing, StoreClient, Unreachable, batch_chunks
from memfs.protocol import Deletions
from memfs.records import LocalFile, StoreInfo
from memfs.sync import plan as P
from memfs.sync.ports import Journal, View

log = logging.getLogger("memfs.sync")

# Requests in flight are bounded by the client (its slots, shared by all stores); these only cap
# how many of one store's fetches or one push stage wait for a slot at once.
FETCH_CONCURRENCY = CONCURRENCY
PUSH_CONCURRENCY = CONCURRENCY
# Batch writes of one stage in flight at once: the service writes one store's batches one after
# the other anyway (one transaction each), so more would only wait there, against the timeout.
BATCH_CONCURRENCY = 4
QUIET_SECONDS = 1.0
TIMER_STEP = 0.1  # seconds between the timer's looks (a watch's answer wakes it at once)
PUSH_DEBOUNCE = 0.3  # live mode: a change is pushed once nothing changed for this long (SEMANTICS.md#d-when)
RETRY_AFTER_CAP = 600.0  # seconds: the longest retry-after a failed tick honours (a broken header must not stop sync for a day)
WATCH_WAIT = 55.0  # seconds a watch is held by the service: renewed about once a minute (≤ 60)
# A pull that lacks the content of at least this many memories, worth at least 1/SNAPSHOT_SHARE
# of the store's bytes, takes one snapshot instead of a GET each (SyncEngine._worth_a_snapshot).
SNAPSHOT_FETCHES = 16
SNAPSHOT_SHARE = 4
GC_INTERVAL = 600.0  # seconds between sweeps of content no file or baseline refers to
CHECKPOINT_INTERVAL = 5.0  # seconds between copies of state.db's WAL into the database file


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _iso_to_ns(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1e9)
    except ValueError:
        return None


async def _gather(items: Iterable[Any], fn: Callable[[Any], Awaitable[None]], concurrency: int) -> None:
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


def _batch_op(st: Journal, a) -> dict[str, Any]:
    """A push action as one operation of a batch write: the body of its single request."""
    if isinstance(a, P.PushCreate):
        return {"type": "create", "path": a.path, "content": st.get_blob(a.sha).decode("utf-8")}
    if isinstance(a, P.PushUpdate):
        op: dict[str, Any] = {
            "type": "update",
            "memory_id": a.memory_id,
            "precondition": {"type": "content_sha256", "content_sha256": a.expected_sha},
        }
        if a.new_sha:
            op["content"] = st.get_blob(a.new_sha).decode("utf-8")
        if a.new_path is not None:
            op["path"] = a.new_path
        return op
    op = {"type": "delete", "memory_id": a.memory_id}
    if a.expected_sha:
        op["expected_content_sha256"] = a.expected_sha
    return op


def _prefix_sizes(base: Mapping[str, Any]) -> dict[str, int]:
    """prefix -> how many memories of the baseline lie under it ("/" is all of them): what lets
    a listing split a prefix known to be large, and ask its sub-prefixes, without probing first."""
    direct: dict[str, int] = {}  # directory -> memories directly in it (one pass, no splitting)
    for b in base.values():
        d = b.path[: b.path.rfind("/") + 1]
        direct[d] = direct.get(d, 0) + 1
    sizes: dict[str, int] = {"/": len(base)}
    for d, n in direct.items():  # each directory's count to it and its ancestors (not "/")
        while d != "/":
            sizes[d] = sizes.get(d, 0) + n
            d = d[: d.rfind("/", 0, -1) + 1]
    return sizes


NOTICES_PER_KIND = 20  # per store and sync; past it, one line stands for the rest


def summarise_notices(notices: Iterable[P.Notice], limit: int = NOTICES_PER_KIND) -> list[P.Notice]:
    """One sync's notices as lines: a mass event (a 10,000-memory store on a 2,000-file mount is
    8,000 over-limit memories) is `limit - 1` lines and one that counts the rest, instead of
    thousands of which the notices file keeps the last 100. A notice whose content was kept is
    always its own line: it names where the agent's version is."""
    counts: dict[str, int] = {}
    for n in notices:
        if not n.kept:
            counts[n.kind] = counts.get(n.kind, 0) + 1
    out: list[P.Notice] = []
    seen: dict[str, int] = {}
    for n in notices:
        if n.kept or counts[n.kind] <= limit:
            out.append(n)
            continue
        i = seen[n.kind] = seen.get(n.kind, 0) + 1
        if i < limit:
            out.append(n)
        elif i == limit:
            rest = counts[n.kind] - limit
            out.append(
                P.Notice(
                    n.kind,
                    n.path,
                    f"{n.details}; and {rest} more {n.kind} path(s) in this sync, not listed one by one",
                )
            )
    return out


class TickFailed(Exception):
    """The store could not be reached or answered with a retryable error (SEMANTICS.md#d-unreachable)."""


@dataclass
class StoreSync:
    """Per-store bookkeeping shown by `memfs status`."""

    store: StoreInfo
    last_sync_at: str | None = None
    last_result: str | None = None
    last_error: str | None = None
    pushed: int = 0


@dataclass
class TickReport:
    ok: bool = True
    error: str | None = None
    pulled: int = 0
    pushed: int = 0
    requests: int = 0


class _StreamedSnapshot:
    """A first download's snapshot as it streams (SEMANTICS.md#d-first-download): each chunk's content
    is hashed and stored in the state dir's blobs from the client's worker thread as it arrives,
    and only what the plan needs is kept (id, path, sha, size, updated_at). Nothing here is in
    the view: the plan applies the store, whole, once the stream has ended."""

    def __init__(self, state: Journal, slug: str):
        self.state = state
        self.slug = slug
        self.entries: list[tuple[str, str, str, int, str | None]] = []
        self.shas: set[str] = set()

    def put(self, memories: list[dict[str, Any]]) -> None:
        blobs: list[tuple[str, bytes]] = []
        for m in memories:
            data = (m.get("content") or "").encode("utf-8")
            sha = hashlib.sha256(data).hexdigest()  # releases the GIL: the trio thread reads on
            if sha != m.get("content_sha256"):
                raise Unreachable(
                    f"{self.slug}: the snapshot's content of {m.get('path')!r} is not its content_sha256"
                )
            if sha not in self.shas:
                self.shas.add(sha)
                blobs.append((sha, data))
            self.entries.append((m["id"], m["path"], sha, len(data), m.get("updated_at")))
        self.state.put_blobs(blobs)


class SyncEngine:
    def __init__(
        self,
        client: StoreClient,
        state: Journal,
        fs: View,
        stores: Iterable[StoreInfo],
        *,
        interval: float,
        deletions: Deletions = "enabled",
        max_files: int,
        max_bytes: int,
        live: bool = True,
    ):
        self.client = client
        self.state = state
        self.fs = fs
        self.stores = list(stores)
        self.interval = interval
        self.deletions = deletions
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.has_counter: bool | None = None  # learned on the first tick (SEMANTICS.md#d-no-counter)
        self.has_batch: bool | None = None  # the batch-write extension; learned on the first push
        self.last_attempt: float | None = None
        self.tick_lock = trio.Lock()
        self.push_done = trio.Event()
        self.push_done.set()
        self.sync = {s.store_id: StoreSync(s) for s in self.stores}
        self._nursery: trio.Nursery | None = None
        # memory id -> updated_at as listed, for the view's mtime: parsed only for the memories
        # a tick materialises (a hosted tick lists 16,000 and parsed each: ~0.15 s per tick)
        self._mtimes: dict[str, str] = {}
        self._streamed: dict[str, set[str]] = {}  # store id -> shas its snapshot stored (this pull)
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

    # -- when (SEMANTICS.md#d-when) ------------------------------------------------------------------
    def due_in(self) -> float:
        now = trio.current_time()
        if self.last_attempt is None:
            return max(0.0, self._not_before - now)
        return max(0.0, self.last_attempt + self.interval - now, self._not_before - now)

    def _asked_to_wait(self, exc: Exception) -> None:
        """A refusal that said how long to wait (429 or 5xx with retry-after, longer than a tick
        retries itself): no tick of ours, timed or live, comes before it (SEMANTICS.md#d-unreachable).
        Only a forced `memfs sync` goes earlier: the user asked for it."""
        wait = exc.retry_after if isinstance(exc, ApiError) and exc.retryable else None
        if wait:
            until = trio.current_time() + min(wait, RETRY_AFTER_CAP)
            if until > self._not_before:
                self._not_before = until
                log.info(
                    "the service asked to wait %.0fs before the next request", min(wait, RETRY_AFTER_CAP)
                )

    @property
    def mode(self) -> str:
        return "live" if self.watching else "polling"

    async def timer(self) -> None:
        """The daemon's own sync: in live mode, pull what moved once the mount is quiet and push
        what changed after the debounce; otherwise (and for retries) a due tick once the mount
        has been quiet for about a second."""
        next_gc = trio.current_time() + GC_INTERVAL
        next_checkpoint = trio.current_time()  # first: the initial download's WAL
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if not self.live_wanted:
                pass
            elif self.has_counter:
                nursery.start_soon(self._watch_loop)
            else:
                self.mode_reason = (
                    f"the service has no counter (the hosted API, SEMANTICS.md#d-no-counter): polling every "
                    f"{self.interval:g}s"
                )
            while True:
                with trio.move_on_after(TIMER_STEP):
                    await self._wake.wait()
                self._wake = trio.Event()
                if trio.current_time() >= next_checkpoint:
                    await trio.to_thread.run_sync(self.state.checkpoint)
                    next_checkpoint = trio.current_time() + CHECKPOINT_INTERVAL
                if trio.current_time() >= next_gc and not self.tick_lock.locked() and self.push_done.is_set():
                    next_gc = trio.current_time() + GC_INTERVAL
                    removed = self.state.gc_blobs(keep=self.fs.live_shas())
                    if removed:
                        log.info("removed %d unreferenced blob(s) from the state dir", removed)
                self._note_changes()
                if self.tick_lock.locked() or not self.push_done.is_set():
                    continue
                quiet = time.monotonic() - self.fs.last_activity >= QUIET_SECONDS
                try:
                    live = self._live_stores(quiet=quiet, debounce=True)
                    if live:
                        async with self.tick_lock:
                            await self._tick(live, counters=self._live_counters(quiet=quiet), wait=False)
                    elif self.due_in() == 0 and quiet and (not self.watching or self._unsettled):
                        await self.sync_now(force=False)
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

    async def sync_now(self, *, force: bool, wait: bool = False) -> dict[str, Any]:
        """`memfs sync`: run a tick if due (or forced); return once remote changes are in the view.
        Uploads go on in the background unless `wait`. In live mode a tick is due for the stores
        the watch saw move and those with changes not yet pushed (no debounce: the caller is
        between commands); the interval only paces retries of what failed."""
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
            "requests": report.requests,
            "mode": self.mode,
        }

    def _after_pull(
        self,
        stores: list[StoreInfo],
        report: TickReport,
        pushes: list[tuple[Any, list]],
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

    # -- the watch (live mode) ----------------------------------------------------------------
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

    # -- the tick ---------------------------------------------------------------------------
    async def initial(self) -> None:
        """Materialise every store before the mount is shown (no pushes: those wait for a tick)."""
        report, _pushes = await self._pull_all(initial=True)
        if not report.ok:
            raise TickFailed(report.error)
        # The download was this interval's pull: the first tick (and the first push of changes a
        # crashed mount left staged) comes one interval later, or at the first `memfs sync --force`.
        self.last_attempt = trio.current_time()
        for s in self.stores:  # what a crashed mount left staged waits for that tick, live or not
            sid = s.store_id
            self._handled[sid] = self._gen_seen[sid] = self.state.generation(sid)
            if s.access == "read_write" and self._maybe_staged(sid, self.state.baseline(sid)):
                self._unsettled.add(sid)

    async def _pull_all(
        self,
        *,
        initial: bool = False,
        stores: list[StoreInfo] | None = None,
        counters: dict[str, int] | None = None,
    ) -> tuple[TickReport, list[tuple[Any, list]]]:
        report = TickReport()
        self._mtimes.clear()
        before = self.client.requests_sent - self.watch_requests  # the watch's own are not this tick's
        pushes: list[tuple[Any, list]] = []
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
            await _gather(stores, pull, len(stores))
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

    async def _pull_store(self, store, counters: dict[str, int] | None, report: TickReport) -> list:
        sid = store.store_id
        applied = self.state.store_counter(sid)
        remote_counter = counters.get(sid) if counters is not None else None
        moved = counters is None or applied is None or remote_counter != applied
        generation = self.state.generation(sid)
        if not moved and self._clean.get(sid) == generation:
            return []  # idle: nothing on either side changed since this store was last found clean
        base = self.state.baseline(sid)
        if not moved and not self._maybe_staged(sid, base):
            self._clean[sid] = generation
            return []
        contents: dict[str, bytes] = {}
        self._streamed.pop(sid, None)  # what a failed pull's snapshot stored is not this pull's
        new_counter = applied
        if moved:
            remote, order, new_counter = await self._remote_state(store, applied, base, contents)
            if new_counter is None:
                new_counter = remote_counter
            if counters is None and remote == self._remote_from_base(sid, base)[0]:
                # No counter (SEMANTICS.md#d-no-counter): every tick lists, and an idle store lists as its baseline.
                # Then nothing moved remotely, and the idle test below applies as with a counter:
                # planning 8 x 2,000 unchanged files each tick took seconds on this thread.
                moved = False
                if self._clean.get(sid) == generation:
                    return []
                if not self._maybe_staged(sid, base):
                    self._clean[sid] = generation
                    return []
        else:
            remote, order = self._remote_from_base(sid, base)
        # Fetch what the plan needs, then plan again on the view as it is *now*, and apply with no
        # await in between: an edit made while we fetched is never overwritten unseen.
        plan: P.Plan | None = None
        snapped = False
        for _round in range(3):
            plan = self._plan(store, base, remote, order, moved)
            streamed = self._streamed.get(sid, ())
            missing = {
                a.sha: a.memory_id
                for a in plan.view
                if isinstance(a, P.Materialise)
                and a.sha not in contents
                and a.sha not in streamed
                and not self.state.has_blob(a.sha)
            }
            if not missing:
                break
            if moved and not snapped and self._worth_a_snapshot(missing, remote):
                snapped = True
                snap = await self._snapshot_state(store)
                if snap is not None:  # the store as it is now, content included: plan again on it
                    remote, order, new_counter = snap
                    continue
            changed = await self._fetch(store, missing, contents)
            for m in changed:  # the memory moved on since it was listed: use what we fetched
                remote[m["id"]] = P.RemoteEntry(
                    m["id"], m["path"], m["content_sha256"], m["content_size_bytes"]
                )
            order = sorted(remote, key=lambda mid: remote[mid].path)
        assert plan is not None  # the loop ran at least once
        with self.state.transaction():  # one commit per store and tick: all of the plan or none of it
            deferred = self._apply(store, plan, contents)
        self._streamed.pop(sid, None)
        if deferred:
            return []
        report.pulled += sum(
            1 for a in plan.view if isinstance(a, (P.Materialise, P.MoveLocal, P.RemoveLocal))
        )
        if new_counter is not None:
            self.state.set_store_counter(sid, new_counter)
        if not moved and plan.empty:  # e.g. only held deletes or refused files differ: nothing to do
            self._clean[sid] = generation
        return list(plan.push_stages) if store.access == "read_write" else []

    def _remote_from_base(self, sid: str, base) -> tuple[dict, list]:
        return _remote_from_base(self.state, sid, base)

    @staticmethod
    def _worth_a_snapshot(missing: dict[str, str], remote: dict) -> bool:
        """Whether one snapshot (every memory with content, one request) beats a GET per missing
        memory: many of them, and a good part of the store's bytes anyway. That is a mount that
        was busy while others wrote (a live mount pulls only when quiet: after a minute of
        writers it lacks most of the store), where a request each took seconds on the service."""
        if len(missing) < SNAPSHOT_FETCHES:
            return False
        total = sum(r.size for r in remote.values()) or 1
        wanted = sum(remote[mid].size for mid in missing.values() if mid in remote)
        return wanted * SNAPSHOT_SHARE >= total

    async def _snapshot_state(self, store):
        """The store's memories at one counter (the snapshot extension, its content stored as it
        streams, as for a first download), or None without it (the hosted API): then the caller
        fetches one by one."""
        snap = _StreamedSnapshot(self.state, store.slug)
        counter = await self.client.snapshot(store.store_id, snap)
        if counter is None:
            return None
        remote = {}
        for memory_id, path, sha, size, updated_at in snap.entries:
            self._note_mtime(memory_id, updated_at)
            remote[memory_id] = P.RemoteEntry(memory_id, path, sha, size)
        self._streamed[store.store_id] = snap.shas
        return remote, sorted(remote, key=lambda mid: remote[mid].path), counter

    async def _remote_state(self, store, applied: int | None, base, contents: dict[str, bytes]):
        """The store's current memories: via the changes feed, a snapshot (first download) or a listing."""
        sid = store.store_id
        if self.has_counter and applied is not None:
            changes = await self.client.changes(sid, applied)
            if changes is not None and not changes.too_old:
                remote, _ = self._remote_from_base(sid, base)
                for c in changes.changes:
                    if c.operation == "deleted":
                        remote.pop(c.memory_id, None)
                    else:
                        remote[c.memory_id] = P.RemoteEntry(c.memory_id, c.path, c.sha or "", c.size or 0)
                        self._note_mtime(c.memory_id, c.updated_at)
                return remote, sorted(remote, key=lambda mid: remote[mid].path), changes.counter
        if self.has_counter and not base:
            snap = await self._snapshot_state(store)
            if snap is not None:
                return snap
        # No feed (the hosted API, SEMANTICS.md#d-no-counter), a counter too old for it, or no snapshot: listings by
        # path prefix, concurrently. A first download asks the full view: content comes with it.
        full = not base
        listing = await self.client.list_memories(
            sid, view="full" if full else "basic", known=_prefix_sizes(base)
        )
        remote = {}
        for m in listing.items:
            remote[m["id"]] = P.RemoteEntry(m["id"], m["path"], m["content_sha256"], m["content_size_bytes"])
            self._note_mtime(m["id"], m.get("updated_at"))
            if full:
                contents[m["content_sha256"]] = (m.get("content") or "").encode("utf-8")
        if not listing.consistent:
            await self._settle_listing(store, listing, base, remote, contents)
        return remote, sorted(remote, key=lambda mid: remote[mid].path), listing.counter

    async def _settle_listing(
        self, store, listing: Listing, base, remote: dict, contents: dict[str, bytes]
    ) -> None:
        """Make a listing that was not one snapshot safe to plan on (SEMANTICS.md#d-tick).

        Listings of different prefixes are read at different moments: a memory renamed from one
        prefix to another in between shows up in both (a duplicate id) or in neither. Taken as
        they are, the first would be two files and the second a remote delete of a file the
        agent has. So every duplicate, and every memory of the baseline that the listing lacks,
        is asked by id: a 404 is a real delete, anything else is the memory as it is now. A
        memory created and renamed during the listing may be missed entirely: it was never
        here, and the next tick finds it. Costs one request per remote delete (or race)."""
        suspects = set(listing.duplicates) | {b.memory_id for b in base.values() if b.memory_id not in remote}
        if not suspects:
            return

        async def one(memory_id: str) -> None:
            try:
                m = await self.client.get_memory(store.store_id, memory_id)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                remote.pop(memory_id, None)
                return
            data = (m.get("content") or "").encode("utf-8")
            sha = hashlib.sha256(data).hexdigest()
            contents[sha] = data
            self._note_mtime(memory_id, m.get("updated_at"))
            remote[memory_id] = P.RemoteEntry(memory_id, m["path"], sha, len(data))

        await _gather(sorted(suspects), one, FETCH_CONCURRENCY)

    async def _fetch(self, store, missing: dict[str, str], contents: dict[str, bytes]) -> list[dict]:
        """Fetch content for the given sha → memory id, concurrently and bounded."""
        changed: list[dict] = []

        async def one(item: tuple[str, str]) -> None:
            sha, memory_id = item
            m = await self.client.get_memory(store.store_id, memory_id)
            data = (m.get("content") or "").encode("utf-8")
            actual = hashlib.sha256(data).hexdigest()
            self._note_mtime(memory_id, m.get("updated_at"))
            contents[actual] = data
            if actual != sha:
                m["content_sha256"] = actual
                m["content_size_bytes"] = len(data)
                changed.append(m)

        await _gather(list(missing.items()), one, FETCH_CONCURRENCY)
        return changed

    def _plan(self, store, base, remote, order, remote_changed: bool) -> P.Plan:
        sid = store.store_id
        inputs = P.Inputs(
            base=base,
            local=self.fs.local_view(sid),
            remote=remote,
            remote_order=tuple(order),
            dirty=frozenset(self.fs.dirty_paths(sid)),
            refused=self.state.refused(sid),
            skipped=self.state.skipped(sid),
            deletes_held=frozenset(self.state.deletes_held(sid)),
            access=store.access,
            deletions=self.deletions,
            max_files=self.max_files,
            max_bytes=self.max_bytes,
            remote_changed=remote_changed,
        )
        return P.plan_store(inputs)

    def _note_mtime(self, memory_id: str, updated_at: str | None) -> None:
        if updated_at:
            self._mtimes[memory_id] = updated_at

    def _maybe_staged(self, sid: str, base) -> bool:
        """A cheap test (no plan) that the view may differ from the baseline: an idle tick over
        many files must not cost a plan per store on the thread that serves FUSE."""
        local = self.fs.local_view(sid)
        if len(local) != len(base):
            return True
        by_id = {b.memory_id: b for b in base.values()}
        for f in local.values():
            b = by_id.get(f.memory_id)
            if b is None or b.path != f.path or b.sha != f.sha:
                return True
        return False

    def _apply(self, store, plan: P.Plan, contents: dict[str, bytes]) -> bool:
        """Apply view and bookkeeping actions. Runs without awaiting: atomic w.r.t. FUSE handlers.
        Returns True when something was deferred (a file open with unflushed writes)."""
        if plan.empty:
            return False
        sid = store.store_id
        dirty = self.fs.dirty_paths(sid)
        touched = {
            p
            for a in plan.view
            for p in (getattr(a, "path", None), getattr(a, "old_path", None), getattr(a, "new_path", None))
            if p
        }
        if dirty & touched:
            # A file open with unflushed writes: leave the whole store for the next tick rather
            # than override half an edit (the counter is not advanced, so nothing is missed).
            return True
        kept: dict[str, str] = {}
        streamed = self._streamed.get(sid, ())
        dirs = self.fs.dir_paths(sid)
        files = self.fs.local_view(sid)

        def clear_empty_dir(path: str) -> None:
            # Directories are local only (the store has none): an empty one may stand where the
            # store now puts a file. One holding files is a clash the plan has already skipped.
            if path in dirs and not any(p.startswith(path + "/") for p in files):
                self.fs.remove_path(sid, path)
                dirs.discard(path)

        # A run of streamed content (a first download's whole store) is placed in one go.
        placing: list[tuple[str, str | None, str, int, int | None]] = []

        def place() -> None:
            if placing:
                self.fs.apply_stored_many(sid, list(placing))
                placing.clear()

        for a in plan.view:
            if (
                isinstance(a, P.Materialise)
                and a.sha in streamed
                and a.sha not in contents
                and a.path not in dirs
            ):
                placing.append(
                    (a.path, a.memory_id, a.sha, a.size, _iso_to_ns(self._mtimes.pop(a.memory_id, None)))
                )
                continue
            place()  # in order: what follows may depend on it
            if isinstance(a, P.KeepLocal):
                kept[a.path] = str(self.state.keep_copy(sid, a.path, self.state.get_blob(a.sha)))
            elif isinstance(a, P.Materialise):
                clear_empty_dir(a.path)
                mtime_ns = _iso_to_ns(self._mtimes.pop(a.memory_id, None))
                data = contents.get(a.sha)
                if data is None and a.sha in streamed:  # stored (and hashed) as the snapshot streamed
                    self.fs.apply_stored(sid, a.path, a.memory_id, a.sha, a.size, mtime_ns)
                    continue
                if data is None:
                    data = self.state.get_blob(a.sha)
                self.fs.apply_remote(
                    sid, a.path, a.memory_id, a.sha, data, mtime_ns
                )  # stores the blob itself
            elif isinstance(a, P.MoveLocal):
                clear_empty_dir(a.new_path)
                self.fs.move_path(sid, a.old_path, a.new_path)
            elif isinstance(a, P.RemoveLocal):
                self.fs.remove_path(sid, a.path)
        place()
        bases: list[tuple[str, str, str, int]] = []  # a run of SetBase: one statement
        for book in plan.bookkeeping:
            if isinstance(book, P.SetBase):
                b = book.entry
                bases.append((b.memory_id, b.path, b.sha, b.size))
                continue
            if bases:
                self.state.set_baselines(sid, bases)
                bases = []
            self._book(sid, book)
        if bases:
            self.state.set_baselines(sid, bases)
        for n in summarise_notices(plan.notices):
            details = n.details
            if n.kept and n.path in kept:
                details = f"{details} (your version is kept at {kept[n.path]})"
            self.fs.add_notice(sid, n.kind, n.path, details)
            log.warning("%s %s %s %s", store.slug, n.kind, n.path, details)
        return False

    def _book(self, sid: str, a) -> None:
        st = self.state
        if isinstance(a, P.SetBase):
            b = a.entry
            st.set_baseline(sid, b.memory_id, b.path, b.sha, b.size)
        elif isinstance(a, P.DropBase):
            st.drop_baseline(sid, a.memory_id)
        elif isinstance(a, P.SetLocalMemoryId):
            self.fs.set_memory_id(sid, a.path, a.memory_id)
        elif isinstance(a, P.Skip):
            st.set_skipped(sid, a.memory_id, a.path, a.sha, a.size, a.reason)
        elif isinstance(a, P.Unskip):
            st.clear_skipped(sid, a.memory_id)
        elif isinstance(a, P.ClearRefused):
            st.clear_refused(sid, a.path)
        elif isinstance(a, P.ClearHeld):
            st.clear_delete_held(sid, a.memory_id)

    # -- push -------------------------------------------------------------------------------
    async def _push_all(self, pushes: list[tuple[Any, list]], report: TickReport) -> None:
        """Every store's pushes at once (each in its own stage order): over a WAN a store must
        not wait for the round trips of the one before it. A store that fails keeps its changes
        staged and the others go on."""

        async def push(store: StoreInfo, actions: list) -> None:
            sid = store.store_id
            before = self.sync[sid].pushed
            log.debug("push %s: %d action(s)", sid, sum(len(stage) for stage in actions))
            try:
                await self._push_store(store, actions, report)
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

    async def _push_store(self, store, stages: list, report: TickReport) -> None:
        """Stages in order (holds and deletes, rename waves, creates); each stage concurrently:
        in batch writes where the service has them (a memfs service: it has the counter), else
        one request per change (the hosted API)."""

        async def one(a) -> None:
            await self._push_one(store, a, report)

        for stage in stages:
            left = (
                await self._push_batched(store, stage, report)
                if self.has_counter and self.has_batch is not False
                else stage
            )
            await _gather(left, one, PUSH_CONCURRENCY)

    async def _push_batched(self, store, stage, report: TickReport) -> list:
        """A stage's changes as batch writes (independent items, so its batches may overlap);
        each item's answer is booked as its single request's would be. Returns what is left to
        send one by one: holds (nothing to send), and everything when the service has no batch."""
        sid, st = store.store_id, self.state
        sent = [a for a in stage if isinstance(a, (P.PushDelete, P.PushUpdate, P.PushCreate))]
        left = [a for a in stage if not isinstance(a, (P.PushDelete, P.PushUpdate, P.PushCreate))]
        if not sent:
            return left
        ops = [_batch_op(st, a) for a in sent]
        unsent: list[list[int]] = []
        failures: list[BaseException] = []

        async def send(chunk: list[int]) -> None:
            try:
                results = await self.client.write_batch(sid, [ops[i] for i in chunk])
            except ApiError as exc:
                if exc.status != 404:  # a 404 names the store: each item is answered with it
                    raise
                results = [
                    {
                        "type": "error",
                        "status": exc.status,
                        "error": {"type": exc.type, "message": exc.message},
                    }
                ] * len(chunk)
            if results is None:
                self.has_batch = False
                unsent.append(chunk)
                return
            self.has_batch = True
            for i, r in zip(chunk, results, strict=True):
                try:
                    if r.get("type") == "error":
                        err = r.get("error") or {}
                        answer = ApiError(
                            int(r.get("status", 0)),
                            str(err.get("type", "error")),
                            str(err.get("message", "")),
                            r,
                        )
                        self._push_failed(store, sent[i], answer, report)
                    else:
                        self._pushed(store, sent[i], r, report)
                except Exception as failure:  # book the rest of the batch first; then fail the push
                    failures.append(failure)

        await _gather(batch_chunks(ops), send, BATCH_CONCURRENCY)
        if failures:
            raise failures[0]
        return left + [sent[i] for chunk in unsent for i in chunk]

    async def _push_one(self, store, a, report: TickReport) -> None:
        sid, st, c = store.store_id, self.state, self.client
        if isinstance(a, P.HoldDelete):
            st.add_delete_held(sid, a.memory_id)
            self.fs.add_notice(
                sid, "delete-held", a.path, f"deleted here, kept on the store (--sync-deletions {a.reason})"
            )
            log.warning("%s: %s deleted locally; not deleted on the store (%s)", store.slug, a.path, a.reason)
            return
        try:
            m: dict[str, Any] | None = None
            if isinstance(a, P.PushDelete):
                await c.delete_memory(sid, a.memory_id, expected_sha=a.expected_sha)
            elif isinstance(a, P.PushUpdate):
                content = st.get_blob(a.new_sha).decode("utf-8") if a.new_sha else None
                m = await c.update_memory(
                    sid, a.memory_id, expected_sha=a.expected_sha, content=content, path=a.new_path
                )
            elif isinstance(a, P.PushCreate):
                m = await c.create_memory(sid, a.path, st.get_blob(a.sha).decode("utf-8"))
            else:
                return
        except ApiError as exc:
            self._push_failed(store, a, exc, report)
            return
        self._pushed(store, a, m, report)

    def _pushed(self, store, a, m: dict[str, Any] | None, report: TickReport) -> None:
        """Book a push the store took (`m`: the memory it answered; None for a delete)."""
        sid, st = store.store_id, self.state
        if isinstance(a, P.PushDelete):
            st.drop_baseline(sid, a.memory_id)
        else:
            assert m is not None
            st.set_baseline(sid, m["id"], m["path"], m["content_sha256"], m["content_size_bytes"])
            if isinstance(a, P.PushCreate):
                local = self.fs.local_file(sid, a.path)  # not local_view(): O(n) per create
                if local is not None and local.memory_id is None:
                    self.fs.set_memory_id(sid, a.path, m["id"])
        report.pushed += 1
        self.sync[sid].pushed += 1

    def _push_failed(self, store, a, exc: ApiError, report: TickReport) -> None:
        """Book a push the store answered with an error: refused (not retried until the file
        changes), someone else's change (the next tick settles it), or raise: the push failed."""
        sid, st = store.store_id, self.state
        if isinstance(a, P.PushDelete) and exc.status == 404:  # already gone: what was asked
            self._pushed(store, a, None, report)
            return
        if exc.refused:
            path, sha = (a.local_path, a.local_sha) if isinstance(a, P.PushUpdate) else (a.path, a.sha)
            st.set_refused(sid, path, sha, exc.message)
            self.fs.add_notice(sid, "upload-refused", path, f"the store refused it: {exc.message}")
            log.warning("%s: upload of %s refused: %s", store.slug, path, exc.message)
        elif exc.status in (404, 409):
            # Someone else changed the store: no retry; the next tick's listing settles it.
            log.info("%s: %s answered %s; the next tick settles it", store.slug, type(a).__name__, exc.type)
        else:
            raise exc

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
        the path a rename just freed goes out one tick after that rename)."""
        result: dict[str, Any] = {"ok": False, "error": "timed out", "pushed": 0}
        pushed = 0
        with trio.move_on_after(timeout):
            for _round in range(3):
                result = await self.sync_now(force=True, wait=True)
                pushed += result.get("pushed", 0)
                if not result.get("ok") or not result.get("pushed") or not self._staged_left():
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
        }


HELD_NOT_UTF8 = "its content is not UTF-8, which the store cannot hold; it stays local until it is changed"
HELD_CLASH = (
    "the store holds a memory at or around this path (a file/directory clash); it stays local "
    "until that memory is gone"
)


@dataclass
class NotOnStore:
    """What one store's view holds that the store does not (SEMANTICS.md#d-end), by category:
    staged (pushes the next tick makes), refused (the service refused the upload; not retried
    until the file changes), held (kept back locally because the store cannot hold it), and
    deletes_held (deleted here, kept on the store by --sync-deletions log_only/disabled). The
    first three are changes that exist only in the state dir: `count`, which makes `memfs unmount`
    and the daemon exit non-zero. A held delete loses nothing (the store keeps more, as asked)."""

    staged: list[str]
    refused: dict[str, str]  # path -> the service's reason
    held: dict[str, str]  # path -> why it is held back
    deletes_held: list[str]

    @property
    def count(self) -> int:
        return len(self.staged) + len(self.refused) + len(self.held)

    def summary(self) -> dict[str, Any]:
        """The fields `memfs status` (live and offline) and `memfs unmount` show for one store."""
        return {
            "staged": len(self.staged),
            "refused": len(self.refused),
            "held": len(self.held),
            "deletes_held": len(self.deletes_held),
            "not_on_store": self.count,
            "paths": {
                "staged": self.staged,
                "refused": sorted(self.refused),
                "held": sorted(self.held),
                "deletes_held": self.deletes_held,
            },
            "reasons": {**self.refused, **self.held},
        }


def _remote_from_base(state: Journal, sid: str, base) -> tuple[dict, list]:
    """The store as the baseline last saw it (plus the memories not materialised here)."""
    remote = {b.memory_id: P.RemoteEntry(b.memory_id, b.path, b.sha, b.size) for b in base.values()}
    for mid, sk in state.skipped(sid).items():
        # a Skip always records the listed sha and size; a NULL (never written since schema 1) reads
        # as a sha no listing has, so that memory is looked at again
        remote.setdefault(mid, P.RemoteEntry(mid, sk.path, sk.sha or "", sk.size or 0))
    return remote, sorted(remote, key=lambda mid: remote[mid].path)


def not_on_store(
    state: Journal,
    store: StoreInfo,
    local: Mapping[str, LocalFile],
    *,
    deletions: Deletions,
    max_files: int,
    max_bytes: int,
) -> NotOnStore:
    """The one rule for "what is not on the store", shared by live and offline `memfs status`,
    the final sync of `memfs unmount` and the daemon's exit, and `memfs flush`: the difference
    between the view (`local`: path -> committed file, from the state dir's `files`) and the
    baseline, planned as the next tick would plan it against an unchanged store."""
    sid = store.store_id
    if store.access != "read_write":
        return NotOnStore([], {}, {}, [])
    base = state.baseline(sid)
    refused = state.refused(sid)
    held_ids = state.deletes_held(sid)
    remote, order = _remote_from_base(state, sid, base)
    plan = P.plan_store(
        P.Inputs(
            base=base,
            local=local,
            remote=remote,
            remote_order=tuple(order),
            refused=refused,
            skipped=state.skipped(sid),
            deletes_held=frozenset(held_ids),
            access=store.access,
            deletions=deletions,
            max_files=max_files,
            max_bytes=max_bytes,
            remote_changed=False,
        )
    )
    staged: set[str] = set()
    deletes_held = {b.path for b in base.values() if b.memory_id in held_ids}
    for a in plan.push:
        if isinstance(a, P.HoldDelete):
            deletes_held.add(a.path)
            continue
        path = a.local_path if isinstance(a, P.PushUpdate) else a.path
        if not path.startswith(P.TEMP_PREFIX):  # the first hop of a swap is half of one change
            staged.add(path)
    synced = {(b.path, b.sha) for b in base.values()}
    refused_now: dict[str, str] = {}
    held: dict[str, str] = {}
    for path, f in local.items():
        if path in staged or (path, f.sha) in synced:
            continue
        row = refused.get(path)
        if f.bad_utf8:
            held[path] = HELD_NOT_UTF8
        elif row is not None and row.sha == f.sha:
            refused_now[path] = row.reason
        else:
            held[path] = HELD_CLASH
    return NotOnStore(sorted(staged), refused_now, held, sorted(deletes_held - staged))
