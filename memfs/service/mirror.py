"""A cache's writes: memories copied from an upstream store service into this service's storage.

`memfs serve --upstream` (the relay, memfs/relay/) keeps its cache in the service's own storage,
so the counter, the changes feed, the snapshot, the watches and the list fast path serve the cache
unchanged. What differs is where a write comes from: not a caller with rules to check, but the
upstream's answer, which is the truth. These are the rules of such a write, above every backend
like rules.py's:

- A memory keeps the upstream's id, path, content, sha, size, version id and timestamps.
- A state older than the cached one (`updated_at` earlier: an answer that was on its way while a
  newer write was applied) is skipped; so is any state of a memory the cache holds as deleted
  (the upstream never reuses an id), so a fetch that raced a delete cannot bring a memory back.
- The upstream holds no two memories at overlapping paths at any one time, but the cache learns
  of a rename or a delete and of the create that took its place in whichever order the answers
  come: a memory applied at a path tombstones whatever the cache still holds at that path, above
  it or below it (the newest information wins; a state skipped as stale is fetched again at the
  next poll).
- Every change bumps the store's counter and appends a version (the cache's own id: the changes
  feed reads them for a rename's previous path) in one transaction, so watches wake and mounts pull
  exactly what moved. Applying what the cache already holds changes nothing and moves nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from dataclasses import replace as with_fields

from memfs.service.backend import Backend
from memfs.service.listing import upper_bound
from memfs.service.rules import new_id, now, sha256_hex
from memfs.service.sql_tx import SqlTx
from memfs.service.storage import MemoryRecord, StoreRecord, VersionRecord

POLLED_AT_KEY = "relay_polled_at_ms"  # store_kv: when some relay replica last claimed this store's poll
# store_kv, under no store: this database is a relay's cache (neither kind of server takes the other's)
CACHE_MARK = ("", "relay_cache")
DOWNLOADED_KEY = "relay_downloaded"  # store_kv: the store's first download ended (it may be served)
# store_kv: a position (ms since the epoch) in the upstream's version feed such that every version
# created before it is in the cache; a restarted relay (or another replica) reads the feed from
# there instead of listing the store again. 0: none known.
FEED_AT_KEY = "relay_feed_at_ms"


def counter_base() -> int:
    """Where a store's counter starts in a new cache: the time in milliseconds, with the history
    floor there too. A mount keeps the counter it applied; a cache that lost its database (a new
    volume, another relay behind the same URL) would count from 0 again and could land on that
    very number with other content, and the mount would never pull. Started from the clock, a new
    cache's counters are above any an older cache of the same stores served (unless that one
    counted more than a thousand changes a second over its whole life), and a mount's counter is
    then below the floor: "too old", so it reads the store again."""
    return int(time.time() * 1000)


def is_relay_cache(backend: Backend) -> bool:
    with backend.read() as tx:
        return bool(tx.kv(*CACHE_MARK))


@dataclass(frozen=True)
class Gone:
    """A memory the upstream no longer holds (deleted, or absent from a whole listing)."""

    memory_id: str


State = MemoryRecord | Gone


class Mirror:
    """The cache's writes over a backend (see the module's docstring)."""

    def __init__(self, backend: Backend):
        self.backend = backend

    def claim_database(self) -> str | None:
        """Make this database a relay's cache: None when it is one (or was empty), else why it
        cannot be (a store service's stores are not a cache to overwrite from an upstream)."""
        with self.backend.write() as tx:
            if tx.kv(*CACHE_MARK):
                return None
            if tx.store_ids():
                return "this database holds a store service's stores, not a relay's cache: give the relay its own --db"
            tx.set_kv(*CACHE_MARK, 1)
            return None

    def put_store(self, store: StoreRecord) -> None:
        """The store's row, as the upstream has it (created when new; name and description kept current)."""
        with self.backend.write(store.id) as tx:
            if tx.store(store.id) is None:
                tx.insert_store(store)
                tx.start_counter(store.id, counter_base())
            else:
                tx.update_store(
                    store.id,
                    name=store.name,
                    description=store.description,
                    metadata=store.metadata,
                    at=store.updated_at,
                )

    def counter(self, store_id: str) -> int:
        with self.backend.read() as tx:
            return tx.counter(store_id)

    def apply(self, store_id: str, states: Iterable[State], *, feed_at_ms: int | None = None) -> int:
        """Apply upstream states in one transaction; returns how many changed the cache.
        `feed_at_ms`: the feed position these states bring the cache to, recorded with them."""
        states = list(states)
        if not states and feed_at_ms is None:
            return 0
        with self.backend.write(store_id) as tx:
            if tx.store(store_id) is None:
                return 0  # not cached (any more): nothing to keep current
            changed = sum(_apply_one(tx, store_id, s) for s in _newest_per_memory(states))
            _record_feed(tx, store_id, feed_at_ms)
            return changed

    def replace(
        self,
        store_id: str,
        memories: Sequence[MemoryRecord],
        *,
        listed_from: int,
        listed_ids: set[str] | None = None,
        download: bool = False,
        feed_at_ms: int | None = None,
    ) -> int:
        """The store's whole content, as a listing read it: each of `memories` applied, and every
        cached memory the listing did not hold (`listed_ids`, default the memories' ids) made
        gone, except those the cache changed after `listed_from` (its counter when the listing
        began: a write applied meanwhile is newer than the listing, which may not hold it).
        Returns how many changed the cache. `download`: this is the store's first download,
        after which it may be served (`downloaded`). `feed_at_ms`: as for `apply` (the feed's
        position read before the listing began)."""
        with self.backend.write(store_id) as tx:
            if tx.store(store_id) is None:
                return 0
            listed = {m.id for m in memories} if listed_ids is None else listed_ids
            changed = sum(_apply_one(tx, store_id, m) for m in _newest_per_memory(memories))
            recent = {m.id for m, _gone in tx.changed_since(store_id, listed_from)}
            for memory_id in tx.memory_states(store_id, None).keys() - listed - recent:
                changed += _apply_one(tx, store_id, Gone(memory_id))
            if download:  # in the same transaction: a store is served whole or not at all
                tx.set_kv(store_id, DOWNLOADED_KEY, 1)
            _record_feed(tx, store_id, feed_at_ms)
            return changed

    def feed_at(self, store_id: str) -> int:
        """The recorded feed position (ms; 0: none): every version before it is in the cache."""
        with self.backend.read() as tx:
            return tx.kv(store_id, FEED_AT_KEY) if tx.store(store_id) is not None else 0

    def downloaded(self, store_ids: Sequence[str] | None = None) -> list[str]:
        """The stores (of those named; None: all) whose first download ended: a relay killed in
        the middle of one left a store that must not be served."""
        with self.backend.read() as tx:
            ids = tx.store_ids() if store_ids is None else store_ids
            return [sid for sid in ids if tx.kv(sid, DOWNLOADED_KEY)]

    def states(self, store_id: str, memory_ids: Sequence[str]) -> dict[str, tuple[str, str, bool]]:
        """id -> (version id, updated_at, deleted) of those the cache holds, tombstones included."""
        with self.backend.read() as tx:
            return tx.memory_states(store_id, memory_ids)

    def live_versions(self, store_id: str) -> dict[str, str]:
        """id -> version id of every cached live memory (a listing is compared with it)."""
        with self.backend.read() as tx:
            return {mid: vid for mid, (vid, _at, _gone) in tx.memory_states(store_id, None).items()}

    def drop(self, store_id: str) -> None:
        """The store's memories leave the cache (nobody used it for long); its counter stays and
        moves on, its history floor with it, so a mount that comes back with an older counter
        reads the store again, whatever changed upstream meanwhile. Served again after a new download."""
        with self.backend.write(store_id) as tx:
            if tx.store(store_id) is None:
                return
            tx.clear_store(store_id)
            tx.set_kv(store_id, DOWNLOADED_KEY, 0)
            tx.set_kv(store_id, FEED_AT_KEY, 0)
            tx.raise_history_floor(store_id, tx.bump(store_id))

    def claim_poll(self, store_id: str, now_ms: int, every_ms: int) -> bool:
        """Whether this replica polls the store now: True (and recorded) when no replica sharing this
        database has claimed its poll within `every_ms`. Several relays on one PostgreSQL then
        poll a store once per interval between them, not once each."""
        with self.backend.write(store_id) as tx:
            if now_ms - tx.kv(store_id, POLLED_AT_KEY) < every_ms:
                return False
            tx.set_kv(store_id, POLLED_AT_KEY, now_ms)
            return True


def _record_feed(tx: SqlTx, store_id: str, feed_at_ms: int | None) -> None:
    """Only forward: replicas sharing the cache each record what their poll applied, and a later
    position stays true whoever's older one comes after it (the cache only gains versions)."""
    if feed_at_ms and feed_at_ms > tx.kv(store_id, FEED_AT_KEY):
        tx.set_kv(store_id, FEED_AT_KEY, feed_at_ms)


def _newest_per_memory(states: Iterable[State]) -> list[State]:
    """One state per memory: a listing read while a memory was renamed can hold it twice; the one
    updated last is its state (a Gone, given by the caller for a delete it saw, wins)."""
    out: dict[str, State] = {}
    for s in states:
        mid = s.memory_id if isinstance(s, Gone) else s.id
        held = out.get(mid)
        if held is None or isinstance(s, Gone):
            out[mid] = s
        elif isinstance(held, MemoryRecord) and s.updated_at > held.updated_at:
            out[mid] = s
    return list(out.values())


def _apply_one(tx: SqlTx, store_id: str, state: State) -> int:
    if isinstance(state, Gone):
        cur = tx.memory_states(store_id, [state.memory_id]).get(state.memory_id)
        if cur is None or cur[2]:
            return 0
        _tombstone(tx, store_id, state.memory_id)
        return 1
    m = state
    cur = tx.memory_states(store_id, [m.id]).get(m.id)
    if cur is not None:
        version_id, updated_at, deleted = cur
        if deleted or version_id == m.memory_version_id or m.updated_at < updated_at:
            return 0
    content = m.content
    if content is None and cur is not None:  # a rename's answer: the content stays the cached one
        held = tx.live_memory(store_id, m.id, content=True)
        content = held.content if held is not None else None
    if content is None or sha256_hex(content) != m.content_sha256:
        return 0  # not known whole here: the next poll fetches it
    m = with_fields(m, content=content)
    _clear_path(tx, store_id, m.path, m.id)
    counter = tx.bump(store_id)
    operation = "created" if cur is None else "modified"
    tx.insert_version(
        VersionRecord(
            new_id("memver_"),
            m.id,
            store_id,
            operation,
            m.path,
            m.content,
            m.content_sha256,
            m.content_size_bytes,
            now(),  # the cache's own history: when it learned of the change (retention counts from it)
            None,
            None,
            None,
        ),
        counter,
    )
    record = MemoryRecord(
        m.id,
        store_id,
        m.path,
        m.content,
        m.content_sha256,
        m.content_size_bytes,
        m.memory_version_id,
        m.created_at,
        m.updated_at,
    )
    if cur is None:
        tx.insert_memory(record, counter)
    else:
        tx.update_memory(
            m.id,
            path=m.path,
            content=content,
            sha=m.content_sha256,
            size=m.content_size_bytes,
            version_id=m.memory_version_id,
            counter=counter,
            at=m.updated_at,
        )
    return 1


def _clear_path(tx: SqlTx, store_id: str, path: str, keep_id: str) -> None:
    """Tombstone every other live memory at `path`, above it or below it (see the module's docstring)."""
    segs = path[1:].split("/")
    above = ["/" + "/".join(segs[:i]) for i in range(1, len(segs) + 1)]
    for mid, _at in tx.live_at(store_id, above):
        if mid != keep_id:
            _tombstone(tx, store_id, mid)
    while (below := tx.first_live_in(store_id, path + "/", upper_bound(path + "/"), keep_id)) is not None:
        _tombstone(tx, store_id, below[0])


def _tombstone(tx: SqlTx, store_id: str, memory_id: str) -> None:
    mem = tx.live_memory(store_id, memory_id, content=False)
    if mem is None:
        return
    counter, at = tx.bump(store_id), now()
    vid = new_id("memver_")
    tx.insert_version(
        VersionRecord(vid, memory_id, store_id, "deleted", mem.path, None, None, None, at, None, None, None),
        counter,
    )
    tx.tombstone_memory(memory_id, version_id=vid, counter=counter, at=at)
