"""The store as it is now, read for one store's pull (SEMANTICS.md#d-tick): the changes feed since the
applied counter, a snapshot (a first download, or a pull that lacks most of the store), or listings
by path prefix (the hosted API, SEMANTICS.md#d-no-counter) made safe to plan on; and the content the
plan needs that the state dir lacks.

What a pull reads besides the memories' list (fetched content, what a snapshot stored, the
memories' `updated_at`) is gathered in one `Pulled` per store and pull, which the apply step
consumes (apply.py). Nothing here changes the view or the baseline.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import trio

from memfs.client.errors import ApiError
from memfs.client.records import Listing
from memfs.client.snapshot_stream import SnapshotEntry, StreamedSnapshot
from memfs.records import BaseEntry, FeedPosition, StoreInfo
from memfs.sync import plan as P
from memfs.sync.bounded import gather
from memfs.sync.feed import VersionFeed, listed_position
from memfs.sync.ports import Journal, StoreApi

# A pull that lacks the content of at least this many memories, worth at least 1/SNAPSHOT_SHARE
# of the store's bytes, takes one snapshot instead of a GET each (`worth_a_snapshot`).
SNAPSHOT_FETCHES = 16
SNAPSHOT_SHARE = 4


@dataclass
class Pulled:
    """What one store's pull has read beside the list of memories, for its apply step."""

    contents: dict[str, bytes] = field(default_factory=dict)  # sha -> content fetched in this pull
    streamed: set[str] = field(default_factory=set)  # shas a snapshot of this pull stored in the state dir
    # memory id -> updated_at as the store gave it, for the view's mtime: parsed only for the
    # memories the apply step materialises (a hosted tick lists 16,000 and parsed each: ~0.15 s)
    mtimes: dict[str, str] = field(default_factory=dict)
    # A listing's memories, whose updated_at is indexed only when the apply step first needs one
    # (an idle hosted tick lists 16,000 memories and writes no file).
    listed: list[dict[str, Any]] = field(default_factory=list)
    # The hosted API's version feed: where it stands once this pull is applied (None: nothing to
    # record), which the engine records with the pull's result (sync/feed.py).
    feed: FeedPosition | None = None

    def note_mtime(self, memory_id: str, updated_at: str | None) -> None:
        if updated_at:
            self.mtimes[memory_id] = updated_at

    def take_mtime(self, memory_id: str) -> str | None:
        """The updated_at of a memory the apply step writes: as fetched in this pull, else as listed."""
        if self.listed:
            mtimes = self.mtimes
            for m in self.listed:
                if updated_at := m.get("updated_at"):
                    mtimes.setdefault(m["id"], updated_at)  # a fetch saw the memory later
            self.listed = []
        return self.mtimes.pop(memory_id, None)

    def has_content(self, sha: str) -> bool:
        return sha in self.contents or sha in self.streamed


class RemoteRead(NamedTuple):
    """The store's memories by id, their ids in path order, and the counter they were read at
    (None when the service has none)."""

    entries: dict[str, P.RemoteEntry]
    order: list[str]
    counter: int | None


def in_path_order(entries: dict[str, P.RemoteEntry]) -> list[str]:
    return sorted(entries, key=lambda mid: entries[mid].path)


def remote_from_base(state: Journal, sid: str, base: Mapping[str, BaseEntry]) -> tuple[dict, list]:
    """The store as the baseline last saw it (plus the memories not materialised here)."""
    remote = {b.memory_id: P.RemoteEntry(b.memory_id, b.path, b.sha, b.size) for b in base.values()}
    for mid, sk in state.skipped(sid).items():
        # a Skip always records the listed sha and size; a NULL (never written since schema 1) reads
        # as a sha no listing has, so that memory is looked at again
        remote.setdefault(mid, P.RemoteEntry(mid, sk.path, sk.sha or "", sk.size or 0))
    return remote, in_path_order(remote)


def _unset(entries: dict[str, BaseEntry], remote: dict[str, P.RemoteEntry], memory_id: str) -> None:
    """One memory out of a baseline held both ways (by path, by id)."""
    old = remote.pop(memory_id, None)
    if old is not None and (e := entries.get(old.path)) is not None and e.memory_id == memory_id:
        del entries[old.path]


def _take_content(pulled: Pulled, content: str | None, sha: str) -> None:
    """A version's or a change's content (view=full), kept for the plan's Materialise when it is
    the sha it names (a redacted version, a basic one or a change past the answer's budget has
    none: the memory is fetched)."""
    if content is None:
        return
    data = content.encode("utf-8")
    if hashlib.sha256(data).hexdigest() == sha:
        pulled.contents[sha] = data


def prefix_sizes(base: Mapping[str, Any]) -> dict[str, int]:
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


@dataclass
class Baseline:
    """One store's baseline as read at one state generation, and what a listing derives from it:
    the prefix sizes that steer its split, and the store as the baseline saw it (what an idle
    store's listing equals). A hosted tick lists every store (SEMANTICS.md#d-no-counter): reading
    the baseline from the state dir and deriving these each time cost ~20 ms per 2,000-memory
    store on the thread that serves FUSE, the same figures every tick while nothing changed."""

    generation: int
    entries: Mapping[str, BaseEntry]  # by path, read-only
    sizes: dict[str, int]
    remote: dict[str, P.RemoteEntry]  # by memory id, read-only: callers that change it copy it
    order: list[str]  # `remote`'s ids in path order, read-only


def _lists_as(items: list[dict[str, Any]], expect: dict[str, P.RemoteEntry]) -> bool:
    """Whether a listing's memories (no id twice) are exactly `expect`: compared item by item,
    without building an entry for each (16,000 a hosted tick)."""
    if len(items) != len(expect):
        return False
    get = expect.get
    for m in items:
        e = get(m["id"])
        if (
            e is None
            or e.sha != m["content_sha256"]
            or e.path != m["path"]
            or e.size != m["content_size_bytes"]
        ):
            return False
    return True


def worth_a_snapshot(missing: dict[str, str], remote: dict[str, P.RemoteEntry]) -> bool:
    """Whether one snapshot (every memory with content, one request) beats a GET per missing
    memory: many of them, and a good part of the store's bytes anyway. That is a mount that
    was busy while others wrote (a live mount pulls only when quiet: after a minute of
    writers it lacks most of the store), where a request each took seconds on the service."""
    if len(missing) < SNAPSHOT_FETCHES:
        return False
    total = sum(r.size for r in remote.values()) or 1
    wanted = sum(remote[mid].size for mid in missing.values() if mid in remote)
    return wanted * SNAPSHOT_SHARE >= total


class Prefetched(Protocol):
    """One store's snapshot streamed before the engine asked (the mount's early download)."""

    def take(self) -> tuple[int, list[SnapshotEntry], set[str]] | None:
        """Blocks until the stream ended: (its counter, its memories, the shas it stored), or
        None when it failed (nothing of it is in the view; the caller reads the store anew)."""


class StoreReader:
    """Reads what a pull needs from the store, through the client, into the state dir's blobs
    (a snapshot's content) and a `Pulled`."""

    def __init__(self, client: StoreApi, state: Journal):
        self.client = client
        self.state = state
        self._baselines: dict[str, Baseline] = {}
        # store id -> (a listing's items, the baseline's store they were found equal to, their
        # ids in path order): the last idle listing of the store, for the next (`read`).
        self._idle: dict[str, tuple[list[dict[str, Any]], dict[str, P.RemoteEntry], list[str]]] = {}
        # store id -> a snapshot the mount's start already streamed into the state dir (the
        # early download, memfs/session/early_fetch.py): `take()` blocks until it has ended and
        # gives (counter, entries, shas), or None when it failed; then the store is asked anew.
        # Taken once, by the store's first snapshot (a first download).
        self.prefetched: dict[str, Prefetched] = {}
        # The hosted API's change detection (sync/feed.py), its versions read with their content:
        # a remote edit costs the read that finds it, not a GET more.
        self.feed = VersionFeed(client, full=True)

    def baseline(self, sid: str) -> Baseline:
        """The store's baseline, read again only when the state's generation moved (every write
        to the baseline, the skipped memories or the files moves it: statedb.generation)."""
        generation = self.state.generation(sid)
        got = self._baselines.get(sid)
        if got is None or got.generation != generation:
            base = self.state.baseline(sid)
            remote, order = remote_from_base(self.state, sid, base)
            got = self._baselines[sid] = Baseline(generation, base, prefix_sizes(base), remote, order)
        return got

    async def read(
        self,
        store: StoreInfo,
        applied: int | None,
        base: Mapping[str, BaseEntry],
        pulled: Pulled,
        *,
        has_counter: bool | None,
        sizes: dict[str, int] | None = None,
        expect: dict[str, P.RemoteEntry] | None = None,
        net: bool = False,
        wide: float | None = None,
    ) -> RemoteRead:
        """The store's current memories: via the changes feed, a snapshot (first download) or a listing.
        `sizes`, `expect`: the baseline's prefix sizes and the store as the baseline saw it
        (`Baseline`); a listing equal to `expect` returns `expect` itself, which the caller must
        copy before changing it. `net`: without a counter, list the store even though the
        version feed works (the safety net's rare listing, for a version later than any window);
        `wide`: read the version feed this many seconds back instead of the overlap (the safety
        net's wide window against a late version, SEMANTICS.md#d-no-counter)."""
        sid = store.store_id
        # A first download without a counter: where the version feed stands is what its listing
        # says (sync/feed.py `listed_position`), not a request of its own.
        first = has_counter is False and not base and self.state.feed_position(sid) is None
        if has_counter is False and not first:
            fed = await self._from_feed(store, base, pulled, expect, net=net, wide=wide)
            if fed is not None:
                return fed
        if has_counter and applied is not None:
            changed = await self._from_changes(sid, applied, base, pulled, expect)
            if changed is not None:
                return changed
        if has_counter and not base:
            snap = await self.snapshot(store, pulled)
            if snap is not None:
                return snap
        # No feed (the hosted API, SEMANTICS.md#d-no-counter), a counter too old for it, or no snapshot: listings by
        # path prefix, concurrently. A first download asks the full view: content comes with it,
        # and each page's is hashed and stored in the state dir from a worker thread as the page
        # arrives, as a snapshot's is (`StreamedSnapshot`), while the other pages are received;
        # the apply step then places the whole store in one go (apply_stored_many) instead of
        # storing 2,000 blobs and rows one by one on the thread that serves FUSE.
        full = not base
        stored = StreamedSnapshot(self.state, store.slug, entries=False)

        async def store_page(data: list[dict[str, Any]]) -> None:
            await trio.to_thread.run_sync(stored.put, data)

        listing = await self.client.list_memories(
            sid,
            view="full" if full else "basic",
            known=prefix_sizes(base) if sizes is None else sizes,
            on_page=store_page if full else None,
        )
        if first:
            pulled.feed = listed_position(listing.items, listing.served, self.feed.overlap)
        if full:
            pulled.streamed = stored.shas
        items = pulled.listed = listing.items  # in path order (the client sorts them)
        if expect is not None and not listing.duplicates:
            # An idle store: every memory the baseline saw, listed once and as it was, and nothing
            # else, so nothing to settle either (no duplicate, no memory missing). The client
            # gives a listing whose every page is as last time the same list (memfs/client/listing.py `LastListing`);
            # both are read-only, so what was found of them then holds now.
            idle = self._idle.get(sid)
            if idle is not None and idle[0] is items and idle[1] is expect:
                return RemoteRead(expect, list(idle[2]), listing.counter)
            if _lists_as(items, expect):
                order = [m["id"] for m in items]
                self._idle[sid] = (items, expect, order)
                return RemoteRead(expect, list(order), listing.counter)
        self._idle.pop(sid, None)
        # A store that moved but little (one edit): its unchanged memories keep the baseline's
        # entries (frozen), so the store's 2,000 entries are not built again, and comparing the
        # result with the baseline finds them equal by identity.
        entry = P.RemoteEntry
        known: dict[str, P.RemoteEntry] = expect if expect is not None else {}
        remote = {}
        for m in items:
            mid, path, sha, size = m["id"], m["path"], m["content_sha256"], m["content_size_bytes"]
            e = known.get(mid)
            if e is None or e.sha != sha or e.path != path or e.size != size:
                e = entry(mid, path, sha, size)
            remote[mid] = e
        settled = not listing.consistent and await self._settle_listing(store, listing, base, remote, pulled)
        order = in_path_order(remote) if settled or listing.duplicates else [m["id"] for m in items]
        return RemoteRead(remote, order, listing.counter)

    async def _from_changes(
        self,
        sid: str,
        applied: int,
        base: Mapping[str, BaseEntry],
        pulled: Pulled,
        expect: dict[str, P.RemoteEntry] | None = None,
    ) -> RemoteRead | None:
        """The store as the baseline plus the counter's changes since `applied`, or None when the
        service has no changes feed or `applied` is too old for it. Built on `expect` (the
        baseline's store, `Baseline.remote`) when given: its unchanged entries stay the same
        objects, which is how a narrowed plan (sync/narrow.py) finds the changed ones."""
        changes = await self.client.changes(sid, applied)
        if changes is None or changes.too_old:
            return None
        remote = dict(expect) if expect is not None else remote_from_base(self.state, sid, base)[0]
        for c in changes.changes:
            if c.operation == "deleted":
                remote.pop(c.memory_id, None)
            else:
                remote[c.memory_id] = P.RemoteEntry(c.memory_id, c.path, c.sha or "", c.size or 0)
                pulled.note_mtime(c.memory_id, c.updated_at)
                if c.sha:
                    _take_content(pulled, c.content, c.sha)
        return RemoteRead(remote, in_path_order(remote), changes.counter)

    def advance(self, sid: str, book: Iterable[P.BookAction]) -> None:
        """After a narrowed pull was applied (sync/narrow.py): the cached baseline moved by the
        plan's SetBase and DropBase, as the journal's rows did, instead of read again (2,000
        rows and entries: ~12 ms of a pull of one memory). Anything else: read again."""
        got = self._baselines.get(sid)
        if got is None:
            return
        entries, remote = dict(got.entries), dict(got.remote)
        for a in book:
            if isinstance(a, P.DropBase):
                _unset(entries, remote, a.memory_id)
            elif isinstance(a, P.SetBase):
                b = a.entry
                _unset(entries, remote, b.memory_id)
                if (displaced := entries.get(b.path)) is not None:  # the journal replaces its row
                    remote.pop(displaced.memory_id, None)
                entries[b.path] = b
                remote[b.memory_id] = P.RemoteEntry(b.memory_id, b.path, b.sha, b.size)
            else:
                del self._baselines[sid]
                return
        self._baselines[sid] = Baseline(
            self.state.generation(sid), entries, prefix_sizes(entries), remote, in_path_order(remote)
        )

    async def _from_feed(
        self,
        store: StoreInfo,
        base: Mapping[str, BaseEntry],
        pulled: Pulled,
        expect: dict[str, P.RemoteEntry] | None,
        *,
        net: bool,
        wide: float | None = None,
    ) -> RemoteRead | None:
        """The store as the baseline plus the versions written since (sync/feed.py), or None when
        it must be listed: the feed refused or too old, more versions than the store has
        memories, or `net` (a first download is listed: `read`). Nothing new:
        `expect` itself (one request)."""
        sid = store.store_id
        at = self.state.feed_position(sid)
        fed = await self.feed.read(sid, at, most=max(len(base), 100), wide=wide)
        pulled.feed = fed.position
        if fed.versions is None or net:
            return None
        if expect is None:
            expect, order = remote_from_base(self.state, sid, base)
        else:
            kept = self._baselines.get(sid)
            order = kept.order if kept is not None and kept.remote is expect else in_path_order(expect)
        if not fed.fresh:
            return RemoteRead(expect, list(order), None)
        remote = dict(expect)
        redacted: list[str] = []
        changed = False
        for mid, v in fed.newest_by_memory().items():
            if v.get("operation") == "deleted":
                changed = changed or mid in expect
                remote.pop(mid, None)
            elif v.get("path") is None or v.get("content_sha256") is None:
                redacted.append(mid)  # its path and sha are gone from the version: ask the memory
            else:
                path, sha, size = v["path"], v["content_sha256"], v["content_size_bytes"]
                e = expect.get(mid)
                if (
                    e is None or e.path != path or e.sha != sha or e.size != size
                ):  # else kept: equal by identity
                    remote[mid] = P.RemoteEntry(mid, path, sha, size)
                    pulled.note_mtime(mid, v.get("created_at"))
                    changed = True
                    _take_content(pulled, v.get("content"), sha)
        if not changed and not redacted:
            # Versions read again (the wide window reads an hour of versions that were applied
            # already): the store is its baseline, which spares the planning of every entry.
            return RemoteRead(expect, list(order), None)
        await self._ask(store, redacted, remote, pulled)
        return RemoteRead(remote, in_path_order(remote), None)

    async def _ask(
        self, store: StoreInfo, ids: list[str], remote: dict[str, P.RemoteEntry], pulled: Pulled
    ) -> None:
        """Each memory of `ids` as it is now, by id, into `remote` (a 404: deleted), concurrently."""

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
            pulled.contents[sha] = data
            pulled.note_mtime(memory_id, m.get("updated_at"))
            remote[memory_id] = P.RemoteEntry(memory_id, m["path"], sha, len(data))

        # Requests in flight are bounded by the store (its slots, shared by all stores); this only
        # caps how many of one store's fetches wait for a slot at once.
        await gather(sorted(ids), one, self.client.concurrency)

    async def snapshot(self, store: StoreInfo, pulled: Pulled) -> RemoteRead | None:
        """The store's memories at one counter (the snapshot extension, its content stored as it
        streams, as for a first download), or None without it (the hosted API): then the caller
        fetches one by one."""
        early = self.prefetched.pop(store.store_id, None)
        got = await trio.to_thread.run_sync(early.take, abandon_on_cancel=True) if early else None
        if got is not None:  # streamed whole while the mount started: its content is stored
            counter, entries, shas = got
        else:
            snap = StreamedSnapshot(self.state, store.slug)
            streamed = await self.client.snapshot(store.store_id, snap)
            if streamed is None:
                return None
            counter, entries, shas = streamed, snap.entries, snap.shas
        remote = {}
        for memory_id, path, sha, size, updated_at in entries:
            pulled.note_mtime(memory_id, updated_at)
            remote[memory_id] = P.RemoteEntry(memory_id, path, sha, size)
        pulled.streamed = shas
        return RemoteRead(remote, in_path_order(remote), counter)

    async def _settle_listing(
        self,
        store: StoreInfo,
        listing: Listing,
        base: Mapping[str, BaseEntry],
        remote: dict[str, P.RemoteEntry],
        pulled: Pulled,
    ) -> bool:
        """Make a listing that was not one snapshot safe to plan on (SEMANTICS.md#d-tick); True
        when that asked anything (then `remote` may have changed).

        Listings of different prefixes are read at different moments: a memory renamed from one
        prefix to another in between shows up in both (a duplicate id) or in neither. Taken as
        they are, the first would be two files and the second a remote delete of a file the
        agent has. So every duplicate, and every memory of the baseline that the listing lacks,
        is asked by id: a 404 is a real delete, anything else is the memory as it is now. A
        memory created and renamed during the listing may be missed entirely: it was never
        here, and the next tick finds it. Costs one request per remote delete (or race)."""
        suspects = set(listing.duplicates) | {b.memory_id for b in base.values() if b.memory_id not in remote}
        if not suspects:
            return False
        await self._ask(store, sorted(suspects), remote, pulled)
        return True

    async def fetch(self, store: StoreInfo, missing: dict[str, str], pulled: Pulled) -> list[dict]:
        """Fetch content for the given sha → memory id, concurrently and bounded. Returns the
        memories that moved on since they were listed (their content is not the listed sha)."""
        changed: list[dict] = []

        async def one(item: tuple[str, str]) -> None:
            sha, memory_id = item
            m = await self.client.get_memory(store.store_id, memory_id)
            data = (m.get("content") or "").encode("utf-8")
            actual = hashlib.sha256(data).hexdigest()
            pulled.note_mtime(memory_id, m.get("updated_at"))
            pulled.contents[actual] = data
            if actual != sha:
                m["content_sha256"] = actual
                m["content_size_bytes"] = len(data)
                changed.append(m)

        await gather(list(missing.items()), one, self.client.concurrency)
        return changed
