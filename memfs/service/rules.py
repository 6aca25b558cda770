"""The store service's rules, above every backend: `StoreService(backend)` is the storage the app uses.

Everything here is the API's behaviour, whatever database holds the rows: ids and timestamps,
which memory a path conflict names, the precondition/no-op rule, the metadata merge, mount-path
allocation, the --max-memories check, paging (a listing's pages are read by listing.py), the
changes feed's previous paths and the snapshot.
A backend (`backend.py`) only runs transactions and queries, so a second one implements storage
and nothing else, and both give the same answers to the last error message.
"""

from __future__ import annotations

import hashlib
import secrets
import string
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from memfs.limits import slugify
from memfs.service.backend import Backend
from memfs.service.listing import list_page, upper_bound
from memfs.service.sql_tx import HeldRead, PathTaken, SqlTx
from memfs.service.storage import (
    Actor,
    BatchCreate,
    BatchDelete,
    BatchItem,
    BatchOutcome,
    BatchResult,
    BatchUpdate,
    Change,
    Changes,
    Invalid,
    LimitExceeded,
    MemoryRecord,
    NotFound,
    Page,
    PathConflict,
    PreconditionFailed,
    ResourceRecord,
    ResourceSpec,
    SessionRecord,
    StorageError,
    StoreArchived,
    StoreRecord,
    StoreTotals,
    VersionFilter,
    VersionRecord,
)

MAX_METADATA_PAIRS = 16
# Bytes of content a changes answer asked with view=full carries (docs/API.md): a full listing
# page's most (20 memories of 100 KiB), so no answer is larger than the API's largest page.
CHANGES_CONTENT_BUDGET = 2 * 1024 * 1024
_CONTENT_IDS_PER_QUERY = 500  # ids in one `IN (...)`: well under SQLite's bound on parameters
_ID_ALPHABET = string.ascii_letters + string.digits


R = TypeVar("R")  # what a checked read returns (`read_checked`)


def new_id(prefix: str) -> str:
    """prefix + 24 random letters and digits. One read of the system's random bytes, kept where
    they fall below 62*4 (so each maps onto the alphabet uniformly): secrets.choice per character
    cost ~0.15 ms an id, a fifth of a batch create's time."""
    out = ""
    while len(out) < 24:
        out += "".join(_ID_ALPHABET[b % 62] for b in secrets.token_bytes(32) if b < 248)
    return prefix + out[:24]


def now(backdate_s: float = 0.0) -> str:
    """RFC 3339 UTC with fixed width, so text order is time order in every backend.
    `backdate_s`: that many seconds ago (the emulator's late-version knob, routes/memories.py)."""
    t = datetime.now(UTC)
    if backdate_s:
        t -= timedelta(seconds=backdate_s)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# Ids are generated here and never hold NUL; PostgreSQL's text cannot even be asked about one
# (psycopg refuses the parameter), so such an id is answered "not found" before any query, the
# same answer on every backend.
def _require_store(tx: SqlTx, store_id: str) -> StoreRecord:
    store = None if "\x00" in store_id else tx.store(store_id)
    if store is None:
        raise NotFound(f"memory store {store_id} not found")
    return store


def _require_writable(tx: SqlTx, store_id: str) -> StoreRecord:
    store = _require_store(tx, store_id)
    if store.archived_at is not None:
        raise StoreArchived(f"memory store {store_id} is archived: its memories cannot be created or changed")
    return store


def _carry_content(
    tx: SqlTx, store_id: str, changes: list[Change], budget: int, reader: Actor | None
) -> None:
    """The content of `changes`' live memories, in the answer's order, until the next would pass
    `budget` bytes (`changes_since` for view=full), except those whose current version `reader`
    wrote (a mount reading its own writes back has their content). Read in the answer's own
    transaction, so each is the content of the sha its change names."""
    live = [c for c in changes if c.operation == "upserted"]
    if reader is not None:
        writers: dict[str, Actor | None] = {}
        for part in _parts(live):
            writers.update(tx.writers(store_id, [c.memory_id for c in part]))
        live = [c for c in live if writers.get(c.memory_id) != reader]
    chosen: list[Change] = []
    total = 0
    for c in live:
        total += c.content_size_bytes or 0
        if total > budget:
            break
        chosen.append(c)
    for part in _parts(chosen):
        got = tx.contents(store_id, [c.memory_id for c in part])
        for c in part:
            c.content = got.get(c.memory_id)


def _parts(changes: list[Change]) -> Iterator[list[Change]]:
    for at in range(0, len(changes), _CONTENT_IDS_PER_QUERY):
        yield changes[at : at + _CONTENT_IDS_PER_QUERY]


def _live_memory(tx: SqlTx, store_id: str, memory_id: str, *, content: bool = True) -> MemoryRecord:
    mem = None if "\x00" in memory_id else tx.live_memory(store_id, memory_id, content=content)
    if mem is None:
        raise NotFound(f"memory {memory_id} not found in memory store {store_id}")
    return mem


def check_path_free(tx: SqlTx, store_id: str, path: str, exclude_id: str | None) -> None:
    """A path must not be taken, below another memory, or above other memories (docs/SEMANTICS.md#d-api).

    The memory named: the one at the exact path, else the one at the shortest ancestor path,
    else the first (byte order) below the path."""
    segs = path[1:].split("/")
    candidates = ["/" + "/".join(segs[:i]) for i in range(1, len(segs) + 1)]
    for mid, at in tx.live_at(store_id, candidates):
        if mid == exclude_id:
            continue
        if at == path:
            raise PathConflict(f"a memory already exists at {path}", mid, at)
        raise PathConflict(
            f"{path} cannot be created below the memory {at}: a path cannot be both a memory and a directory",
            mid,
            at,
        )
    below = tx.first_live_in(store_id, path + "/", upper_bound(path + "/"), exclude_id)
    if below is not None:
        mid, at = below
        raise PathConflict(
            f"{path} is a directory holding the memory {at}: a path cannot be both a memory and a directory",
            mid,
            at,
        )


def merge_metadata(current: dict[str, str], patch: dict[str, str | None] | None) -> dict[str, str]:
    """A metadata patch: null deletes a key; the 16-pair limit applies to the result."""
    merged = dict(current)
    for k, v in (patch or {}).items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = v
    if len(merged) > MAX_METADATA_PAIRS:
        raise Invalid(
            f"metadata: a memory store holds at most {MAX_METADATA_PAIRS} pairs; this update would leave {len(merged)}"
        )
    return merged


def mount_paths(names: Sequence[str]) -> list[str]:
    """`/mnt/memory/<slug>` per attached store, `-2`, `-3`… when two would share one (docs/SEMANTICS.md#d-sessions)."""
    used: set[str] = set()
    out = []
    for name in names:
        base = "/mnt/memory/" + slugify(name)
        mount, n = base, 2
        while mount in used:
            mount, n = f"{base}-{n}", n + 1
        used.add(mount)
        out.append(mount)
    return out


def _paged(rows: list, limit: int) -> Page:
    """Rows fetched with limit + 1 -> one page and the position the next one resumes after."""
    if len(rows) > limit:
        return Page([r for _, r in rows[:limit]], rows[limit - 1][0])
    return Page([r for _, r in rows], None)


class Snapshot:
    """All live memories of one store, read in one read transaction held open while it streams."""

    def __init__(self, tx: HeldRead, store_id: str):
        self._tx: HeldRead | None = tx
        try:
            _require_store(tx, store_id)
            self.counter = tx.counter(store_id)
            self._batches: Iterator[list[MemoryRecord]] | None = None
            self._store_id = store_id
        except BaseException:
            self.close()
            raise

    def read(self, n: int) -> list[MemoryRecord]:
        if self._tx is None:
            return []
        if self._batches is None:
            self._batches = self._tx.live_batches(self._store_id, n)
        return next(self._batches, [])

    def close(self) -> None:
        tx, self._tx = self._tx, None
        if tx is not None:
            tx.close()


class StoreService:
    """The app's storage: the API's rules over one backend. Every method is blocking and is called
    from a worker thread, never from the event loop (the counter and list fast paths' reads on the
    loop say so: `inline_read`)."""

    def __init__(self, backend: Backend):
        self.backend = backend

    def close(self) -> None:
        self.backend.close()

    def ping(self) -> None:
        with self.backend.read() as tx:
            tx.ping()

    # --- stores --------------------------------------------------------------------------------

    def create_store(self, name: str, description: str, metadata: dict[str, str]) -> StoreRecord:
        t = now()
        store = StoreRecord(new_id("memstore_"), name, description, dict(metadata), t, t, None)
        with self.backend.write() as tx:
            tx.insert_store(store)
            return _require_store(tx, store.id)

    def list_stores(
        self,
        *,
        limit: int,
        after: int | None,
        include_archived: bool,
        created_gte: str | None,
        created_lte: str | None,
        only_ids: Sequence[str] | None = None,
    ) -> Page:
        with self.backend.read() as tx:
            rows = tx.list_stores(
                after=after,
                limit=limit + 1,
                include_archived=include_archived,
                created_gte=created_gte,
                created_lte=created_lte,
                only_ids=only_ids,
            )
        return _paged(rows, limit)

    def get_store(self, store_id: str) -> StoreRecord:
        with self.backend.read() as tx:
            return _require_store(tx, store_id)

    def update_store(
        self,
        store_id: str,
        *,
        name: str | None,
        description: str | None,
        metadata_patch: dict[str, str | None] | None,
    ) -> StoreRecord:
        with self.backend.write(store_id) as tx:
            store = _require_store(tx, store_id)
            if store.archived_at is not None:
                raise StoreArchived(f"memory store {store_id} is archived: it cannot be updated")
            metadata = merge_metadata(store.metadata, metadata_patch)
            new_name = store.name if name is None else name
            new_desc = store.description if description is None else description
            if (new_name, new_desc, metadata) != (store.name, store.description, store.metadata):
                tx.update_store(store_id, name=new_name, description=new_desc, metadata=metadata, at=now())
            return _require_store(tx, store_id)

    def archive_store(self, store_id: str) -> StoreRecord:
        with self.backend.write(store_id) as tx:
            if _require_store(tx, store_id).archived_at is None:
                tx.archive_store(store_id, now())
            return _require_store(tx, store_id)

    def store_totals(self, store_id: str) -> StoreTotals:
        """Counter, live memories and their bytes, read in one transaction: exact at that counter."""
        with self.backend.read() as tx:
            _require_store(tx, store_id)
            return StoreTotals(tx.counter(store_id), *tx.live_totals(store_id))

    def delete_store(self, store_id: str) -> None:
        with self.backend.write(store_id) as tx:
            _require_store(tx, store_id)
            tx.delete_store(store_id)

    # --- memories ------------------------------------------------------------------------------

    def create_memory(
        self,
        store_id: str,
        path: str,
        content: str,
        actor: Actor,
        *,
        max_memories: int,
        backdate_s: float = 0.0,
    ) -> MemoryRecord:
        with self.backend.write(store_id) as tx:
            return self._create(tx, store_id, path, content, actor, max_memories, backdate_s)

    @staticmethod
    def _create(
        tx: SqlTx,
        store_id: str,
        path: str,
        content: str,
        actor: Actor,
        max_memories: int,
        backdate_s: float = 0.0,
    ) -> MemoryRecord:
        sha, size = sha256_hex(content), len(content.encode("utf-8"))
        _require_writable(tx, store_id)
        check_path_free(tx, store_id, path, None)
        live = tx.count_live(store_id)
        if live >= max_memories:
            raise LimitExceeded(
                f"memory store {store_id} already holds {live} memories, the limit of this service "
                f"(--max-memories {max_memories}); delete memories before creating more"
            )
        mid, vid, t = new_id("mem_"), new_id("memver_"), now(backdate_s)
        counter = tx.bump(store_id)
        tx.insert_version(
            VersionRecord(vid, mid, store_id, "created", path, content, sha, size, t, actor, None, None),
            counter,
        )
        try:
            tx.insert_memory(MemoryRecord(mid, store_id, path, content, sha, size, vid, t, t), counter)
        except PathTaken:  # only reachable if the checks above were bypassed
            raise PathConflict(f"a memory already exists at {path}", "", path) from None
        return _live_memory(tx, store_id, mid)

    def list_memories(
        self,
        store_id: str,
        *,
        path_prefix: str,
        depth: int,
        limit: int,
        after: str | None,
        with_content: bool,
    ) -> Page:
        with self.backend.read() as tx:
            _require_store(tx, store_id)
            return list_page(tx, store_id, path_prefix, depth, limit, after, with_content)

    def list_memories_as(
        self,
        token_hash: str,
        store_id: str,
        *,
        path_prefix: str,
        depth: int,
        limit: int,
        after: str | None,
        with_content: bool,
    ) -> tuple[SessionRecord | None, Page | None]:
        """A session token's listing page, with its session, looked up and read in one read
        transaction (so one worker-thread hop per page, not two: a hosted tick is hundreds of
        pages, PERFORMANCE.md's network section). (None, None): no live session holds the token;
        (session, None): the session does not attach the store. Either way nothing was read, and
        the caller answers the error as `list_memories` after `session_for_token` would."""
        with self.backend.read() as tx:
            sid = tx.session_id_for_token(token_hash)
            session = self._session(tx, sid) if sid else None
            if session is None or session.resource_for(store_id) is None:
                return session, None
            _require_store(tx, store_id)
            return session, list_page(tx, store_id, path_prefix, depth, limit, after, with_content)

    def read_checked(
        self, token_hash: str | None, store_id: str, read_page: Callable[[SqlTx], R], *, read=None
    ) -> tuple[R, int] | None:
        """`read_page(tx)` and the store's counter, for the admin (`token_hash` None) or the live
        session holding `token_hash`, checked and read in one read transaction (the list fast
        path, list_path.py, reads its page this way and renders it itself; `read`: the
        transaction to use, default `backend.read`). The check is `counters_for`'s statement:
        the store exists and, for a token, its live session attaches it. None when any of it
        would be an error: the caller answers through the full path, which says which."""
        if "\x00" in store_id:
            return None
        with (read or self.backend.read)() as tx:
            counters = tx.counters_for(token_hash, [store_id])
            if counters is None:
                return None
            return read_page(tx), counters[store_id]

    def get_memory(self, store_id: str, memory_id: str) -> MemoryRecord:
        with self.backend.read() as tx:
            _require_store(tx, store_id)
            return _live_memory(tx, store_id, memory_id)

    def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        content: str | None,
        path: str | None,
        expected_sha256: str | None,
        actor: Actor,
        backdate_s: float = 0.0,
        repeat_ok: bool = True,
    ) -> MemoryRecord:
        with self.backend.write(store_id) as tx:
            return self._update(
                tx, store_id, memory_id, content, path, expected_sha256, actor, backdate_s, repeat_ok
            )

    @staticmethod
    def _update(
        tx: SqlTx,
        store_id: str,
        memory_id: str,
        content: str | None,
        path: str | None,
        expected_sha256: str | None,
        actor: Actor,
        backdate_s: float = 0.0,
        repeat_ok: bool = True,
    ) -> MemoryRecord:
        """`repeat_ok` False: a landed update sent again is 409 like any failed precondition (the
        hosted API's answer, which its emulator gives); True: 200 (SEMANTICS.md#d-api)."""
        _require_writable(tx, store_id)
        row = _live_memory(tx, store_id, memory_id)
        new_path = row.path if path is None else path
        new_sha = row.content_sha256 if content is None else sha256_hex(content)
        unchanged = new_sha == row.content_sha256 and new_path == row.path
        if expected_sha256 is not None and expected_sha256 != row.content_sha256:
            if unchanged and repeat_ok:  # the store already holds what was asked: a landed retry
                return row
            raise PreconditionFailed(
                f"memory {memory_id} has content_sha256 {row.content_sha256}, not the expected {expected_sha256}"
            )
        if unchanged:  # no-op: no version, no counter bump
            return row
        if new_path != row.path:
            check_path_free(tx, store_id, new_path, memory_id)
        new_content = row.content if content is None else content
        assert new_content is not None
        size = len(new_content.encode("utf-8"))
        vid, t = new_id("memver_"), now(backdate_s)
        counter = tx.bump(store_id)
        tx.insert_version(
            VersionRecord(vid, memory_id, store_id, "modified", new_path, new_content, new_sha, size, t,
                          actor, None, None),
            counter,
        )  # fmt: skip
        tx.update_memory(
            memory_id, path=new_path, content=new_content, sha=new_sha, size=size, version_id=vid,
            counter=counter, at=t,
        )  # fmt: skip
        return _live_memory(tx, store_id, memory_id)

    def delete_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        expected_sha256: str | None,
        actor: Actor,
        backdate_s: float = 0.0,
    ) -> None:
        with self.backend.write(store_id) as tx:
            self._delete(tx, store_id, memory_id, expected_sha256, actor, backdate_s)

    @staticmethod
    def _delete(
        tx: SqlTx,
        store_id: str,
        memory_id: str,
        expected_sha256: str | None,
        actor: Actor,
        backdate_s: float = 0.0,
    ) -> None:
        _require_store(tx, store_id)  # archived stores can still be deleted from
        row = _live_memory(tx, store_id, memory_id, content=False)
        if expected_sha256 is not None and expected_sha256 != row.content_sha256:
            raise PreconditionFailed(
                f"memory {memory_id} has content_sha256 {row.content_sha256}, not the expected "
                f"{expected_sha256}; nothing was deleted"
            )
        vid, t = new_id("memver_"), now(backdate_s)
        counter = tx.bump(store_id)
        tx.insert_version(
            VersionRecord(
                vid, memory_id, store_id, "deleted", row.path, None, None, None, t, actor, None, None
            ),
            counter,
        )
        tx.tombstone_memory(memory_id, version_id=vid, counter=counter, at=t)

    def write_batch(
        self, store_id: str, items: Sequence[BatchItem], actor: Actor, *, max_memories: int
    ) -> BatchResult:
        """Many writes to one store in one transaction (memfs's batch extension, docs/API.md).

        Items are independent and applied in order: each runs exactly the rules of its single
        request, inside its own savepoint, so an item that fails (precondition, path conflict,
        --max-memories, archived store) undoes its own writes only and the later items see the
        store as if it had never been sent; each item that writes is its own version and counter
        step. Anything else (the database failing) fails the whole batch: nothing of it is kept."""
        outcomes: list[BatchOutcome] = []
        with self.backend.write(store_id) as tx:
            _require_store(tx, store_id)
            for item in items:
                try:
                    with tx.savepoint():
                        outcomes.append(
                            BatchOutcome(memory=self._apply_item(tx, store_id, item, actor, max_memories))
                        )
                except StorageError as e:
                    outcomes.append(BatchOutcome(error=e))
            return BatchResult(outcomes, tx.counter(store_id))

    def _apply_item(
        self, tx: SqlTx, store_id: str, item: BatchItem, actor: Actor, max_memories: int
    ) -> MemoryRecord | None:
        if isinstance(item, BatchCreate):
            return self._create(tx, store_id, item.path, item.content, actor, max_memories)
        if isinstance(item, BatchUpdate):
            return self._update(
                tx, store_id, item.memory_id, item.content, item.path, item.expected_sha256, actor
            )
        if isinstance(item, BatchDelete):
            self._delete(tx, store_id, item.memory_id, item.expected_sha256, actor)
            return None
        raise TypeError(f"not a batch item: {item!r}")

    # --- versions ------------------------------------------------------------------------------

    def list_versions(
        self, store_id: str, *, filters: VersionFilter, limit: int, after: str | None, with_content: bool
    ) -> Page:
        with self.backend.read() as tx:
            _require_store(tx, store_id)
            rows = tx.list_versions(
                store_id, filters=filters, after=after, limit=limit + 1, content=with_content
            )
        return _paged(rows, limit)

    @staticmethod
    def _version(tx: SqlTx, store_id: str, version_id: str) -> VersionRecord:
        _require_store(tx, store_id)
        v = None if "\x00" in version_id else tx.version(store_id, version_id)
        if v is None:
            raise NotFound(f"memory version {version_id} not found in memory store {store_id}")
        return v

    def get_version(self, store_id: str, version_id: str) -> VersionRecord:
        with self.backend.read() as tx:
            return self._version(tx, store_id, version_id)

    def redact_version(self, store_id: str, version_id: str, actor: Actor) -> VersionRecord:
        # Redaction rewrites history only; the mount never sees it, so the counter does not move.
        with self.backend.write(store_id) as tx:
            if self._version(tx, store_id, version_id).redacted_at is None:
                tx.redact_version(version_id, at=now(), actor=actor)
            return self._version(tx, store_id, version_id)

    # --- counter extension ---------------------------------------------------------------------

    def get_counters(self, store_ids: Sequence[str]) -> dict[str, int]:
        with self.backend.read() as tx:
            out = {}
            for sid in store_ids:
                _require_store(tx, sid)
                out[sid] = tx.counter(sid)
            return out

    def inline_read(self):
        """The backend's `read_nowait` (a read the event loop may run itself), or None."""
        return getattr(self.backend, "read_nowait", None)

    def counters_for(
        self, token_hash: str | None, store_ids: Sequence[str], *, read=None
    ) -> dict[str, int] | None:
        """The counters of `store_ids` for the admin (`token_hash` None) or for the live session
        holding `token_hash`, checked and read in one read transaction (the counter fast path,
        counter_path.py; `read`: the transaction to use, default `backend.read`). None when any
        of it would be an error: the caller then answers through the full path, which says which."""
        with (read or self.backend.read)() as tx:
            return tx.counters_for(token_hash, store_ids)

    def counters_batch(
        self, token_hashes: Sequence[str], store_ids: Sequence[str], *, read=None
    ) -> tuple[dict[str, int], dict[str, set[str]]]:
        """Many fast-path requests' `counters_for` in one statement (counter_path.py's batch): the
        counters of the stores of `store_ids` that exist, and the stores of them each live session
        holding one of `token_hashes` attaches. Each request checks its own part."""
        with (read or self.backend.read)() as tx:
            return tx.counters_batch(token_hashes, store_ids)

    def changes_since(
        self,
        store_id: str,
        since: int,
        *,
        full: bool = False,
        content_budget: int | None = None,
        reader: Actor | None = None,
    ) -> Changes:
        """`full` (view=full): the changes carry their live memories' content, in the answer's
        order, until the next would pass `content_budget` bytes (None: CHANGES_CONTENT_BUDGET,
        read when called), but not those `reader` (the caller) wrote last; the rest carry none
        (the client asks those by id)."""
        with self.backend.read() as tx:
            _require_store(tx, store_id)
            counter = tx.counter(store_id)
            if since < 0 or since > counter:
                raise Invalid(f"since: {since} is not between 0 and the store's current counter {counter}")
            if since < tx.history_floor(store_id):
                return Changes(store_id, since, counter, too_old=True)
            changes = []
            for mem, deleted in tx.changed_since(store_id, since):
                before = tx.path_at(store_id, mem.id, since)
                previous = None
                if before is not None and before[0] != "deleted" and before[1] not in (None, mem.path):
                    previous = before[1]
                changes.append(
                    Change(
                        memory_id=mem.id,
                        operation="deleted" if deleted else "upserted",
                        path=mem.path,
                        previous_path=previous,
                        content_sha256=None if deleted else mem.content_sha256,
                        content_size_bytes=None if deleted else mem.content_size_bytes,
                        memory_version_id=mem.memory_version_id,
                        updated_at=mem.updated_at,
                    )
                )
            if full:
                budget = CHANGES_CONTENT_BUDGET if content_budget is None else content_budget
                _carry_content(tx, store_id, changes, budget, reader)
            return Changes(store_id, since, counter, too_old=False, changes=changes)

    def open_snapshot(self, store_id: str) -> Snapshot:
        return Snapshot(self.backend.open_read(), store_id)

    # --- sessions ------------------------------------------------------------------------------

    def create_session(
        self,
        resources: Sequence[ResourceSpec],
        *,
        token_hash: str,
        title: str | None,
        metadata: dict[str, str],
    ) -> SessionRecord:
        sid, t = new_id("sesn_"), now()
        # The attached stores' write locks: none can be archived between the check and the commit.
        with self.backend.write(*(spec.memory_store_id for spec in resources)) as tx:
            stores = []
            for spec in resources:
                store = _require_store(tx, spec.memory_store_id)
                if store.archived_at is not None:
                    raise StoreArchived(
                        f"memory store {spec.memory_store_id} is archived and cannot be attached"
                    )
                stores.append(store)
            records = [
                ResourceRecord(spec.memory_store_id, spec.access, store.name, store.description,
                               spec.instructions, mount)
                for spec, store, mount in zip(resources, stores, mount_paths([s.name for s in stores]), strict=True)
            ]  # fmt: skip
            tx.insert_session(SessionRecord(sid, title, dict(metadata), records, t, t, None), token_hash)
            return self._session(tx, sid)

    @staticmethod
    def _session(tx: SqlTx, session_id: str) -> SessionRecord:
        s = tx.session(session_id)
        if s is None:
            raise NotFound(f"session {session_id} not found")
        return s

    def get_session(self, session_id: str) -> SessionRecord:
        with self.backend.read() as tx:
            return self._session(tx, session_id)

    def session_for_token(self, token_hash: str) -> SessionRecord | None:
        with self.backend.read() as tx:
            sid = tx.session_id_for_token(token_hash)
            return self._session(tx, sid) if sid else None

    def archive_session(self, session_id: str) -> SessionRecord:
        with self.backend.write() as tx:
            self._session(tx, session_id)
            tx.archive_session(session_id, now())
            return self._session(tx, session_id)

    def sessions_for_store(self, store_id: str) -> list[SessionRecord]:
        """Every session (archived ones too) that attaches the store, newest first (the console)."""
        with self.backend.read() as tx:
            _require_store(tx, store_id)
            return [self._session(tx, sid) for sid in tx.session_ids_for_store(store_id)]
