"""The relay's upstream poll: each store some client uses is downloaded once and kept current with
one upstream poll per interval, however many mounts use it (SEMANTICS.md#d-relay).

It runs on trio in a thread of its own, with the mount's store client (memfs/client/: the per-prefix
listing, the 429 hold and pacer) and version feed (memfs/sync/feed.py), while the HTTP side runs
on uvicorn's loop. The two meet only here: the front calls `touch`, `download` and `hold`, which
take plain values and never wait on trio (`run_sync_soon`); what a download ends with comes back
through the callback the front gave.

A store's poll reads its version feed since the last one (nothing new: one request) and fetches
the memories with a version the cache does not hold (a write that went through the relay is in
the cache already: its version is not fetched again). Where the feed is refused or too far
behind, the store is listed (basic view) and only what differs is fetched. Every requests of all
stores shares one budget and pacer: a 429 slows every poll of the relay.

Without the operator's key a store is polled with a credential that recently proved access to it
(the last few are kept, newest first). One the upstream answers 401 is dropped from every store at
once, one answered 403/404 from that store, and the front is told (`on_refused`); the poll is
made again at once with the next credential kept, if any, else it waits for a client whose
credential the front confirms: the credential is never presented again by the poll.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import trio

from memfs.client.api import StoreClient
from memfs.client.budget import Pacer, RequestBudget
from memfs.client.errors import ApiError, Unreachable
from memfs.records import FeedPosition
from memfs.relay.access import credential_hash
from memfs.service.mirror import Gone, Mirror, State
from memfs.service.rules import sha256_hex
from memfs.service.storage import MemoryRecord, StoreRecord
from memfs.sync.bounded import gather
from memfs.sync.feed import OVERLAP_SECONDS, VersionFeed, format_time, parse_time

log = logging.getLogger("memfs.relay")

DEFAULT_INTERVAL_S = 15.0
# A store is polled every interval while a client uses it: a request other than a held watch (a
# read, a write, the counters a live mount reads once an interval while its agent works:
# memfs/sync/live.py) within ACTIVE_FOR_S (at least two intervals). Watched only (mounts whose
# agents are idle): every IDLE_EVERY_S, as an idle mount polls the hosted API itself. Nothing at
# all for IDLE_AFTER_S: not polled (the next request polls it at once).
ACTIVE_FOR_S = 60.0
IDLE_EVERY_S = 300.0
IDLE_AFTER_S = 600.0
DROP_AFTER_S = (
    86400.0  # a store nobody asked anything of for a day leaves the cache (downloaded again on use)
)
WIDE_EVERY = 20  # one poll in this many reads the feed's wide window (sync/feed.py's safety net)
LIST_INSTEAD = 400  # more new versions than this: the store is listed instead (sync/feed.py `most`)
FULL_INSTEAD = 200  # more memories to fetch than this: a full-view listing instead of a GET each
FETCHES_AT_ONCE = 16
TICK_S = 0.25
CLIENTS_KEPT = 256
CREDENTIALS_KEPT = 4  # per store: the poll's fallbacks when the newest is refused

Refusal = Callable[[str, "str | None"], None]  # (credential hash, store or None: every store)

Done = Callable[[BaseException | None], None]


@dataclass
class Slot:
    """One store the relay keeps current."""

    # the last ones that proved access to it, by hash, newest last (memory only, never logged)
    credentials: dict[str, str] = field(default_factory=dict)
    using: str | None = None  # the credential of the poll under way
    used_at: float = float("-inf")  # time.monotonic() of the last request a client made of it, a watch aside
    watched_at: float = float("-inf")  # of the last watch that named it
    polled_at: float = float("-inf")
    # None: not read since this relay started (read from the cache's recorded position, else listed)
    position: FeedPosition | None = None
    recorded: float = float("-inf")  # time.monotonic() when this relay last recorded the position
    busy: bool = False
    polls: int = 0
    downloads: int = 0
    failures: int = 0
    last_error: str = ""


def to_record(store_id: str, m: dict[str, Any]) -> MemoryRecord:
    """A memory as the upstream answered it, its times in the service's fixed-width form (they
    are compared as text)."""
    return MemoryRecord(
        id=m["id"],
        memory_store_id=store_id,
        path=m["path"],
        content=m.get("content"),
        content_sha256=m["content_sha256"],
        content_size_bytes=int(m["content_size_bytes"]),
        memory_version_id=m["memory_version_id"],
        created_at=_time(m.get("created_at")),
        updated_at=_time(m.get("updated_at")),
    )


def from_version(store_id: str, v: dict[str, Any], cached: bool) -> MemoryRecord | None:
    """A memory as its newest version read with its content says (view=full), or None where
    a GET must ask: no content (a basic page, a redacted version), or a memory the cache does
    not hold that this version did not create (its creation time is not in it)."""
    content, sha = v.get("content"), v.get("content_sha256")
    if content is None or sha is None or v.get("path") is None or v.get("memory_id") is None:
        return None
    if sha256_hex(content) != sha:
        return None
    if not cached and v.get("operation") != "created":
        return None
    return MemoryRecord(
        id=v["memory_id"],
        memory_store_id=store_id,
        path=v["path"],
        content=content,
        content_sha256=sha,
        content_size_bytes=int(v.get("content_size_bytes") or len(content.encode("utf-8"))),
        memory_version_id=v["id"],
        created_at=_time(v.get("created_at")),  # the memory's, for a version that created it
        updated_at=_time(v.get("created_at")),
    )


def _time(value: str | None) -> str:
    try:
        return format_time(parse_time(value)) if value else format_time(parse_time("1970-01-01T00:00:00Z"))
    except ValueError:
        return value or ""


class Poller:
    def __init__(
        self,
        upstream_url: str,
        mirror: Mirror,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        idle_after: float = IDLE_AFTER_S,
        drop_after: float = DROP_AFTER_S,
        operator_key: str | None = None,
    ):
        self.url = upstream_url.rstrip("/")
        self.mirror = mirror
        self.interval = interval
        self.idle_after = idle_after
        self.drop_after = drop_after
        self.active_for = max(ACTIVE_FOR_S, 2 * interval)
        self.operator_key = operator_key  # polls with this when given, else with a client's credential
        self.on_refused: Refusal | None = None  # told of a client's credential the upstream refused
        self.stores: dict[str, Slot] = {}
        self.cached: set[str] = set()  # stores whose download ended (served from the cache)
        self.budget = RequestBudget()  # every upstream request of the poll, by kind; the hold after a 429
        self.pacer = Pacer()
        self._clients: dict[str, StoreClient] = {}
        self._refused: dict[str, float] = {}  # the version feed refused, per store (sync/feed.py)
        self._waiters: dict[str, list[Done]] = {}
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()

    # -- from the HTTP side's thread ------------------------------------------------------------

    def start(self, cached: list[str]) -> None:
        """`cached`: the stores the cache already holds (a restart reuses them; each is read at
        its first use from the feed position the cache recorded, else listed again)."""
        self.cached.update(cached)
        now = time.monotonic()
        for sid in cached:  # unused since the start counts from the start (then dropped, if never used)
            self.stores.setdefault(sid, Slot(watched_at=now))
        self._thread = threading.Thread(
            target=trio.run, args=(self._main,), name="memfs-relay-poll", daemon=True
        )
        self._thread.start()
        self._started.wait(10)

    def stop(self) -> None:
        if self._token is not None and self._nursery is not None:
            try:
                self._token.run_sync_soon(self._nursery.cancel_scope.cancel)
            except trio.RunFinishedError:
                pass
        if self._thread is not None:
            self._thread.join(10)

    def touch(self, store_id: str, credential: str | None, *, watch: bool = False) -> None:
        """A client used the store (its credential confirmed); `watch`: only held a watch on it.
        Plain assignments: safe from any thread."""
        slot = self.stores.get(store_id)
        if slot is None:
            slot = self.stores[store_id] = Slot()
        now = time.monotonic()
        if watch:
            if now - max(slot.used_at, slot.watched_at) > self.idle_after:
                slot.polled_at = float("-inf")  # not polled for a while: poll it now
            slot.watched_at = now
        else:
            if now - slot.used_at > self.active_for:
                slot.polled_at = float("-inf")  # idle until now: poll it at once
            slot.used_at = now
        if credential is not None:
            key = credential_hash(credential)
            slot.credentials.pop(key, None)
            slot.credentials[key] = credential
            while len(slot.credentials) > CREDENTIALS_KEPT:
                slot.credentials.pop(next(iter(slot.credentials)), None)

    def stale(self, slot: Slot, now: float) -> bool:
        """Nobody asked anything of the store for `drop_after`: its memories leave the cache."""
        return now - max(slot.used_at, slot.watched_at) > self.drop_after

    def period(self, slot: Slot, now: float) -> float | None:
        """Seconds between the store's polls now; None: not polled (nobody asked anything of it)."""
        if now - slot.used_at <= self.active_for:
            return self.interval
        if now - max(slot.used_at, slot.watched_at) <= self.idle_after:
            return max(self.interval, IDLE_EVERY_S)
        return None

    def download(self, store_id: str, credential: str, done: Done) -> None:
        """Download the store into the cache (once, however many ask); `done(None)` once it is
        served from the cache, `done(exc)` if it could not be (called on the poll's thread)."""
        self.touch(store_id, credential)
        assert self._token is not None
        self._token.run_sync_soon(self._download_wanted, store_id, done)

    def forget(self, cred: str, store_id: str | None = None) -> None:
        """The upstream refused this credential (by hash) to the front: to every store (None, a
        401) or to this one. The poll does not present it again."""
        if self._token is None:
            return
        try:
            self._token.run_sync_soon(self._drop_credential, cred, store_id)
        except trio.RunFinishedError:
            pass

    def hold(self, seconds: float) -> None:
        """A write met the upstream's 429: every poll waits as long too."""
        self.budget.hold(seconds)

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "requests": self.budget.snapshot(),
            "paced": self.pacer.decreases,
            "stores": [
                {
                    "memory_store_id": sid,
                    "cached": sid in self.cached,
                    "polls": s.polls,
                    "downloads": s.downloads,
                    "failures": s.failures,
                    "used_s_ago": round(now - s.used_at, 1) if s.used_at > 0 else None,
                    "watched_s_ago": round(now - s.watched_at, 1) if s.watched_at > 0 else None,
                    "period_s": self.period(s, now),
                    "polled_s_ago": round(now - s.polled_at, 1) if s.polled_at > 0 else None,
                    "last_error": s.last_error,
                }
                for sid, s in sorted(self.stores.items())
            ],
        }

    # -- on the poll's thread ---------------------------------------------------------------------

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._started.set()
                nursery.start_soon(self._ticker)
        finally:
            for client in self._clients.values():
                with trio.move_on_after(2):
                    await client.aclose()

    def _download_wanted(self, store_id: str, done: Done) -> None:
        if store_id in self.cached:
            done(None)
            return
        self._waiters.setdefault(store_id, []).append(done)
        slot = self.stores[store_id]
        if not slot.busy:
            slot.busy = True
            assert self._nursery is not None
            self._nursery.start_soon(self._sync, store_id)

    async def _ticker(self) -> None:
        while True:
            now = time.monotonic()
            for sid, slot in list(self.stores.items()):
                if not slot.busy and sid in self.cached and self.stale(slot, now):
                    slot.busy = True
                    assert self._nursery is not None
                    self._nursery.start_soon(self._drop, sid)
                    continue
                period = self.period(slot, now)
                if slot.busy or sid not in self.cached or period is None:
                    continue
                if (slot.credentials or self.operator_key) and now - slot.polled_at >= period:
                    slot.busy = True
                    assert self._nursery is not None
                    self._nursery.start_soon(self._sync, sid)
            await trio.sleep(TICK_S)

    def _drop_credential(self, cred: str, store_id: str | None) -> None:
        for sid, slot in self.stores.items():
            if store_id in (None, sid):
                slot.credentials.pop(cred, None)
        if store_id is None:
            client = self._clients.pop(cred, None)
            if client is not None and self._nursery is not None:
                self._nursery.start_soon(client.aclose)

    def _client(self, slot: Slot) -> StoreClient:
        credential = self.operator_key or slot.using
        assert credential is not None
        key = credential_hash(credential)
        client = self._clients.get(key)
        if client is None:
            if len(self._clients) >= CLIENTS_KEPT:  # the oldest goes (its pools close with it)
                oldest = next(iter(self._clients))
                assert self._nursery is not None
                self._nursery.start_soon(self._clients.pop(oldest).aclose)
            client = self._clients[key] = StoreClient(self.url, credential, timeout=30.0)
            client.budget, client.pacer = self.budget, self.pacer  # one hold, one pace for the relay
        return client

    async def _sync(self, store_id: str) -> None:
        slot = self.stores[store_id]
        error: BaseException | None = None
        again = False
        kept = list(slot.credentials.values())
        slot.using = kept[-1] if kept else None
        try:
            if store_id not in self.cached and await trio.to_thread.run_sync(
                self._downloaded_elsewhere, store_id
            ):
                # another relay sharing the cache downloaded it: read it again as after a restart
                self.cached.add(store_id)
                slot.position = None
            if store_id not in self.cached:
                await self._download(store_id, slot)
            elif await trio.to_thread.run_sync(
                self.mirror.claim_poll, store_id, int(time.time() * 1000), int(self.interval * 800)
            ):
                if slot.position is None:
                    slot.position = await trio.to_thread.run_sync(self._recorded_position, store_id)
                if slot.position is None:
                    await self._relist(store_id, slot)
                else:
                    await self._poll(store_id, slot)
                slot.polls += 1
            slot.failures, slot.last_error = 0, ""
        except (ApiError, Unreachable) as exc:
            error = exc
            if (
                isinstance(exc, ApiError)
                and exc.status in (401, 403, 404)
                and slot.using
                and not self.operator_key
            ):
                # never presented again: the next credential kept is tried at once (if none, the
                # store waits for a client whose credential the front confirms)
                cred = credential_hash(slot.using)
                refused_store = None if exc.status == 401 else store_id
                self._drop_credential(cred, refused_store)
                if self.on_refused is not None:
                    self.on_refused(cred, refused_store)
                again = bool(slot.credentials)
            slot.failures += 1
            slot.last_error = str(exc)
            log.warning(
                "relay: %s of %s failed: %s", "poll" if store_id in self.cached else "download", store_id, exc
            )
        except Exception as exc:  # a bug in one store's poll must not stop the others'
            error = exc
            slot.failures += 1
            slot.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("relay: the poll of %s crashed", store_id)
        finally:
            slot.polled_at = float("-inf") if again else time.monotonic()
            slot.using = None
            slot.busy = False
            for done in self._waiters.pop(store_id, []):
                done(error if store_id not in self.cached else None)

    async def _drop(self, store_id: str) -> None:
        try:
            self.cached.discard(store_id)  # first: no request is served from it meanwhile
            await trio.to_thread.run_sync(self.mirror.drop, store_id)
            log.info("relay: dropped %s from the cache (unused for %.0fs)", store_id, self.drop_after)
        except Exception:
            log.exception("relay: dropping %s from the cache failed", store_id)
        finally:
            slot = self.stores[store_id]
            slot.busy, slot.position = False, None
            if self._waiters.get(store_id):  # asked for meanwhile: downloaded again
                slot.busy = True
                assert self._nursery is not None
                self._nursery.start_soon(self._sync, store_id)
            elif self.stale(slot, time.monotonic()):
                del self.stores[store_id]

    def _downloaded_elsewhere(self, store_id: str) -> bool:
        return bool(self.mirror.downloaded([store_id]))

    def _recorded_position(self, store_id: str) -> FeedPosition | None:
        """Where the cache's recorded feed position says to read from (a restart, or a replica
        that did not poll the store before): no ids seen, so the first read takes the overlap
        behind it again, and what the cache holds already is not fetched (`_holds`)."""
        ms = self.mirror.feed_at(store_id)
        if ms <= 0:
            return None
        return FeedPosition(format_time(datetime.fromtimestamp(ms / 1000, UTC)), frozenset())

    def _to_record(self, slot: Slot, position: FeedPosition | None, *, states: bool) -> int | None:
        """The position to record with what a poll applies (ms), or None: with every apply that
        changes something, else at most once per overlap (a restart then reads at most about two
        overlaps of the feed again), so a quiet poll writes nothing."""
        if position is None or not position.position:
            return None
        now = time.monotonic()
        if not states and now - slot.recorded < OVERLAP_SECONDS:
            return None
        slot.recorded = now
        return int(parse_time(position.position).timestamp() * 1000)

    def _feed(self, client: StoreClient) -> VersionFeed:
        # Content in the feed's read (sync/feed.py `full`): an upstream edit costs the poll only.
        return VersionFeed(client, refused_until=self._refused, full=True)

    async def _download(self, store_id: str, slot: Slot) -> None:
        """The store's first download: the feed's position, then every memory with its content."""
        client = self._client(slot)
        probe = await self._feed(client).probe(store_id)
        # The store object is the upstream's to serve (its route passes through): the cache's row
        # only holds the memories.
        at = format_time(parse_time("1970-01-01T00:00:00Z"))
        await trio.to_thread.run_sync(
            self.mirror.put_store, StoreRecord(store_id, store_id, "", {}, at, at, None)
        )
        listed_from = await trio.to_thread.run_sync(self.mirror.counter, store_id)
        listing = await client.list_memories(store_id, view="full")
        memories = [to_record(store_id, m) for m in listing.items]
        feed_at = self._to_record(slot, probe.position, states=True)
        changed = await trio.to_thread.run_sync(
            lambda: self.mirror.replace(
                store_id, memories, listed_from=listed_from, download=True, feed_at_ms=feed_at
            )
        )
        slot.position = probe.position
        slot.downloads += 1
        self.cached.add(store_id)
        log.info(
            "relay: downloaded %s (%d memories, %d written to the cache)", store_id, len(memories), changed
        )

    async def _relist(self, store_id: str, slot: Slot, position: FeedPosition | None = None) -> None:
        """The store listed (basic view) and compared with the cache; what differs fetched."""
        client = self._client(slot)
        if position is None:
            position = (await self._feed(client).probe(store_id)).position
        listed_from = await trio.to_thread.run_sync(self.mirror.counter, store_id)
        listing = await client.list_memories(store_id, view="basic")
        have = await trio.to_thread.run_sync(self.mirror.live_versions, store_id)
        want = [m["id"] for m in listing.items if have.get(m["id"]) != m.get("memory_version_id")]
        if len(want) > FULL_INSTEAD:
            full = await client.list_memories(store_id, view="full")
            memories: list[MemoryRecord] = [to_record(store_id, m) for m in full.items]
            listed = {m.id for m in memories}
        else:
            states = await self._fetch(client, store_id, want)
            memories = [s for s in states if isinstance(s, MemoryRecord)]
            listed = {m["id"] for m in listing.items} - {s.memory_id for s in states if isinstance(s, Gone)}
        feed_at = self._to_record(slot, position, states=True)
        await trio.to_thread.run_sync(
            lambda: self.mirror.replace(
                store_id, memories, listed_from=listed_from, listed_ids=listed, feed_at_ms=feed_at
            )
        )
        slot.position = position

    async def _poll(self, store_id: str, slot: Slot) -> None:
        client = self._client(slot)
        assert slot.position is not None
        wide = 3600.0 if slot.polls % WIDE_EVERY == WIDE_EVERY - 1 else None
        read = await self._feed(client).read(store_id, slot.position, most=LIST_INSTEAD, wide=wide)
        if read.versions is None:  # refused, too old, or more than a listing costs
            await self._relist(store_id, slot, read.position)
            return
        newest = read.newest_by_memory()
        held = await trio.to_thread.run_sync(self.mirror.states, store_id, list(newest))
        gone: list[State] = [Gone(mid) for mid, v in newest.items() if v.get("operation") == "deleted"]
        want = [
            mid
            for mid, v in newest.items()
            if v.get("operation") != "deleted" and not _holds(held.get(mid), v.get("id"))
        ]
        read_whole = [r for mid in want if (r := from_version(store_id, newest[mid], mid in held))]
        asked = [mid for mid in want if mid not in {r.id for r in read_whole}]
        states = gone + read_whole + await self._fetch(client, store_id, asked)
        feed_at = self._to_record(slot, read.position, states=bool(states))
        if states or feed_at is not None:
            await trio.to_thread.run_sync(lambda: self.mirror.apply(store_id, states, feed_at_ms=feed_at))
        if read.position is not None:
            slot.position = read.position

    async def _fetch(self, client: StoreClient, store_id: str, memory_ids: list[str]) -> list[State]:
        """The memories' current states, a GET each, several at once (404: gone)."""
        out: list[State] = []

        async def one(memory_id: str) -> None:
            try:
                out.append(to_record(store_id, await client.get_memory(store_id, memory_id)))
            except ApiError as exc:
                if exc.status != 404:
                    raise
                out.append(Gone(memory_id))

        await gather(memory_ids, one, FETCHES_AT_ONCE)
        return out


def _holds(state: tuple[str, str, bool] | None, version_id: str | None) -> bool:
    """The cache holds this version of the memory already, or the memory as deleted (ids are
    never reused: a later version of a deleted memory cannot come)."""
    return state is not None and (state[2] or state[0] == version_id)
