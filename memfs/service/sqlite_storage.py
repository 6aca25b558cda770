"""SQLite backend of the store service (SPEC §2.7).

One file in WAL mode, schema versioned with PRAGMA user_version and migrated at start.
Every write is one `BEGIN IMMEDIATE` transaction, so writers from several threads or service
processes on one file are serialised by SQLite itself: the per-store counter (in `store_kv`) is
bumped in the same transaction as the version it counts, and the path checks see every commit.
Deleted memories stay as tombstones in `memories` (content dropped) so the changes feed can
report a deletion with the memory's last path even after its versions are redacted.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import sqlite3
import string
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from memfs.limits import slugify
from memfs.service.storage import (
    Actor,
    Change,
    Changes,
    Invalid,
    LimitExceeded,
    MemoryRecord,
    NotFound,
    Page,
    PathConflict,
    PreconditionFailed,
    PrefixRecord,
    ResourceRecord,
    ResourceSpec,
    SessionRecord,
    StoreArchived,
    StoreRecord,
    VersionFilter,
    VersionRecord,
)

SCHEMA_VERSION = 1
COUNTER_KEY = "counter"
# Counters below this value have no history left (nothing prunes history yet; the key exists so
# a future retention job can raise it and the changes feed answers "too_old").
HISTORY_FLOOR_KEY = "history_floor"

_MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE stores (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            description TEXT NOT NULL,
            metadata TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            archived_at TEXT
        )""",
        """CREATE TABLE store_kv (
            store_id TEXT NOT NULL,
            key TEXT NOT NULL,
            value,
            PRIMARY KEY (store_id, key)
        ) WITHOUT ROWID""",
        """CREATE TABLE memories (
            id TEXT PRIMARY KEY,
            store_id TEXT NOT NULL,
            path TEXT NOT NULL,
            content TEXT,
            sha TEXT,
            size INTEGER,
            version_id TEXT NOT NULL,
            counter INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            deleted_at TEXT
        )""",
        # The backstop against two live memories at one path, whatever the code above it does.
        "CREATE UNIQUE INDEX memories_live_path ON memories (store_id, path) WHERE deleted_at IS NULL",
        "CREATE INDEX memories_counter ON memories (store_id, counter)",
        """CREATE TABLE versions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            store_id TEXT NOT NULL,
            memory_id TEXT NOT NULL,
            operation TEXT NOT NULL,
            path TEXT,
            content TEXT,
            sha TEXT,
            size INTEGER,
            counter INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            actor_type TEXT,
            actor_id TEXT,
            redacted_at TEXT,
            redactor_type TEXT,
            redactor_id TEXT
        )""",
        "CREATE INDEX versions_store ON versions (store_id, seq)",
        "CREATE INDEX versions_memory ON versions (store_id, memory_id, counter)",
        """CREATE TABLE sessions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            token_hash TEXT UNIQUE,
            title TEXT,
            metadata TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            archived_at TEXT
        )""",
        """CREATE TABLE session_resources (
            session_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            memory_store_id TEXT NOT NULL,
            access TEXT NOT NULL,
            name TEXT NOT NULL,
            description TEXT NOT NULL,
            instructions TEXT,
            mount_path TEXT NOT NULL,
            PRIMARY KEY (session_id, position)
        )""",
    ],
}

_ID_ALPHABET = string.ascii_letters + string.digits
_POOL_IDLE_MAX = 8


def new_id(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


def now() -> str:
    """RFC 3339 UTC with fixed width, so text order is time order in SQL."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def encode_cursor(kind: str, value: object) -> str:
    raw = json.dumps([kind, value], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(kind: str, token: str, typ: type) -> object:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        got_kind, value = json.loads(raw)
    except Exception:
        raise Invalid("page: not a page cursor returned by this service") from None
    if got_kind != kind or not isinstance(value, typ) or isinstance(value, bool):
        raise Invalid("page: this cursor belongs to a different listing")
    return value


def _upper(prefix_with_slash: str) -> str:
    """Smallest string above every path under `prefix/` ('0' is the character after '/')."""
    return prefix_with_slash[:-1] + "0"


_MEM_COLS = "id, store_id, path, sha, size, version_id, created_at, updated_at"
_VER_COLS = (
    "id, store_id, memory_id, operation, path, sha, size, created_at, actor_type, actor_id, "
    "redacted_at, redactor_type, redactor_id"
)


def _actor(typ: str | None, ident: str | None) -> Actor | None:
    return Actor(typ, ident) if typ and ident else None


def _store(row: sqlite3.Row) -> StoreRecord:
    return StoreRecord(
        id=row["id"],
        name=row["name"],
        description=row["description"],
        metadata=json.loads(row["metadata"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        archived_at=row["archived_at"],
    )


def _memory(row: sqlite3.Row, content: str | None) -> MemoryRecord:
    return MemoryRecord(
        id=row["id"],
        memory_store_id=row["store_id"],
        path=row["path"],
        content=content,
        content_sha256=row["sha"],
        content_size_bytes=row["size"],
        memory_version_id=row["version_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _version(row: sqlite3.Row, content: str | None) -> VersionRecord:
    return VersionRecord(
        id=row["id"],
        memory_id=row["memory_id"],
        memory_store_id=row["store_id"],
        operation=row["operation"],
        path=row["path"],
        content=content,
        content_sha256=row["sha"],
        content_size_bytes=row["size"],
        created_at=row["created_at"],
        created_by=_actor(row["actor_type"], row["actor_id"]),
        redacted_at=row["redacted_at"],
        redacted_by=_actor(row["redactor_type"], row["redactor_id"]),
    )


class _Snapshot:
    """All live memories of one store read in one read transaction on a dedicated connection."""

    def __init__(self, conn: sqlite3.Connection, store_id: str):
        self._conn = conn
        conn.execute("BEGIN")
        try:
            _require_store(conn, store_id)
            self.counter = _counter(conn, store_id)
            self._cur = conn.execute(
                f"SELECT {_MEM_COLS}, content FROM memories WHERE store_id = ? AND deleted_at IS NULL ORDER BY path",
                (store_id,),
            )
        except BaseException:
            self.close()
            raise

    def read(self, n: int) -> list[MemoryRecord]:
        return [_memory(r, r["content"]) for r in self._cur.fetchmany(n)]

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            finally:
                conn.close()


def _require_store(conn: sqlite3.Connection, store_id: str) -> sqlite3.Row:
    row = conn.execute("SELECT * FROM stores WHERE id = ?", (store_id,)).fetchone()
    if row is None:
        raise NotFound(f"memory store {store_id} not found")
    return row


def _require_writable(conn: sqlite3.Connection, store_id: str) -> sqlite3.Row:
    row = _require_store(conn, store_id)
    if row["archived_at"] is not None:
        raise StoreArchived(f"memory store {store_id} is archived: its memories cannot be created or changed")
    return row


def _kv(conn: sqlite3.Connection, store_id: str, key: str) -> int:
    row = conn.execute(
        "SELECT value FROM store_kv WHERE store_id = ? AND key = ?", (store_id, key)
    ).fetchone()
    return int(row[0]) if row else 0  # a store that never had the key reads 0


def _counter(conn: sqlite3.Connection, store_id: str) -> int:
    return _kv(conn, store_id, COUNTER_KEY)


def _bump(conn: sqlite3.Connection, store_id: str) -> int:
    row = conn.execute(
        "INSERT INTO store_kv (store_id, key, value) VALUES (?, ?, 1) "
        "ON CONFLICT (store_id, key) DO UPDATE SET value = value + 1 RETURNING value",
        (store_id, COUNTER_KEY),
    ).fetchone()
    return int(row[0])


def _live_memory(
    conn: sqlite3.Connection, store_id: str, memory_id: str, content: bool = True
) -> sqlite3.Row:
    cols = _MEM_COLS + (", content" if content else "")
    row = conn.execute(
        f"SELECT {cols} FROM memories WHERE id = ? AND store_id = ? AND deleted_at IS NULL",
        (memory_id, store_id),
    ).fetchone()
    if row is None:
        raise NotFound(f"memory {memory_id} not found in memory store {store_id}")
    return row


def _check_path_free(conn: sqlite3.Connection, store_id: str, path: str, exclude_id: str | None) -> None:
    """A path must not be taken, below another memory, or above other memories (SPEC §2.3)."""
    segs = path[1:].split("/")
    candidates = ["/" + "/".join(segs[:i]) for i in range(1, len(segs) + 1)]
    marks = ",".join("?" * len(candidates))
    rows = conn.execute(
        f"SELECT id, path FROM memories WHERE store_id = ? AND deleted_at IS NULL AND path IN ({marks}) "
        "ORDER BY length(path)",
        (store_id, *candidates),
    ).fetchall()
    for row in rows:
        if row["id"] == exclude_id:
            continue
        if row["path"] == path:
            raise PathConflict(f"a memory already exists at {path}", row["id"], row["path"])
        raise PathConflict(
            f"{path} cannot be created below the memory {row['path']}: a path cannot be both a memory and a directory",
            row["id"],
            row["path"],
        )
    row = conn.execute(
        "SELECT id, path FROM memories WHERE store_id = ? AND deleted_at IS NULL AND path >= ? AND path < ? "
        "AND id IS NOT ? ORDER BY path LIMIT 1",
        (store_id, path + "/", _upper(path + "/"), exclude_id),
    ).fetchone()
    if row is not None:
        raise PathConflict(
            f"{path} is a directory holding the memory {row['path']}: a path cannot be both a memory and a directory",
            row["id"],
            row["path"],
        )


def _insert_version(
    conn: sqlite3.Connection,
    *,
    store_id: str,
    memory_id: str,
    operation: str,
    path: str,
    content: str | None,
    sha: str | None,
    size: int | None,
    counter: int,
    at: str,
    actor: Actor,
) -> str:
    vid = new_id("memver_")
    conn.execute(
        "INSERT INTO versions (id, store_id, memory_id, operation, path, content, sha, size, counter, created_at, "
        "actor_type, actor_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        (vid, store_id, memory_id, operation, path, content, sha, size, counter, at, actor.type, actor.id),
    )
    return vid


class SqliteStorage:
    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0):
        self.path = str(path)
        self._busy_timeout_s = busy_timeout_s
        self._pool: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        with self._conn() as conn:
            self._migrate(conn)

    # --- connections and transactions --------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves. check_same_thread=False: a pooled
        # connection moves between worker threads, but is only ever used by one at a time.
        conn = sqlite3.connect(
            self.path, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: an acknowledged write survives power loss too, not only a process crash.
        conn.execute("PRAGMA synchronous = FULL")
        return conn

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise RuntimeError("storage is closed")
            conn = self._pool.pop() if self._pool else None
        if conn is None:
            conn = self._connect()
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            with self._lock:
                if not self._closed and len(self._pool) < _POOL_IDLE_MAX:
                    self._pool.append(conn)
                    conn = None
            if conn is not None:
                conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        # IMMEDIATE takes the write lock up front: the checks we make inside cannot be invalidated
        # by another writer before we commit, and there is no lock upgrade to deadlock on.
        with self._conn() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        # One read transaction: every query inside sees the same snapshot of the database.
        with self._conn() as conn:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path}: schema version {version} is newer than this memfs supports ({SCHEMA_VERSION})"
                )
            for v in range(version + 1, SCHEMA_VERSION + 1):
                for stmt in _MIGRATIONS[v]:
                    conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, []
        for conn in pool:
            conn.close()

    # --- stores --------------------------------------------------------------------------------

    def create_store(self, name: str, description: str, metadata: dict[str, str]) -> StoreRecord:
        sid, t = new_id("memstore_"), now()
        with self._write() as c:
            c.execute(
                "INSERT INTO stores (id, name, description, metadata, created_at, updated_at) VALUES (?,?,?,?,?,?)",
                (sid, name, description, json.dumps(metadata), t, t),
            )
            return _store(_require_store(c, sid))

    def list_stores(
        self,
        *,
        limit: int,
        page: str | None,
        include_archived: bool,
        created_gte: str | None,
        created_lte: str | None,
        only_ids: Sequence[str] | None = None,
    ) -> Page:
        where, args = ["1"], []
        if page is not None:
            where.append("seq < ?")
            args.append(decode_cursor("stores", page, int))
        if not include_archived:
            where.append("archived_at IS NULL")
        if created_gte is not None:
            where.append("created_at >= ?")
            args.append(created_gte)
        if created_lte is not None:
            where.append("created_at <= ?")
            args.append(created_lte)
        if only_ids is not None:
            where.append(f"id IN ({','.join('?' * len(only_ids))})")
            args.extend(only_ids)
        with self._read() as c:
            rows = c.execute(
                f"SELECT * FROM stores WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?",
                (*args, limit + 1),
            ).fetchall()
        nxt = encode_cursor("stores", rows[limit - 1]["seq"]) if len(rows) > limit else None
        return Page([_store(r) for r in rows[:limit]], nxt)

    def get_store(self, store_id: str) -> StoreRecord:
        with self._read() as c:
            return _store(_require_store(c, store_id))

    def update_store(
        self,
        store_id: str,
        *,
        name: str | None,
        description: str | None,
        metadata_patch: dict[str, str | None] | None,
    ) -> StoreRecord:
        with self._write() as c:
            row = _require_store(c, store_id)
            if row["archived_at"] is not None:
                raise StoreArchived(f"memory store {store_id} is archived: it cannot be updated")
            metadata = json.loads(row["metadata"])
            for k, v in (metadata_patch or {}).items():
                if v is None:
                    metadata.pop(k, None)
                else:
                    metadata[k] = v
            if len(metadata) > 16:
                raise Invalid(
                    f"metadata: a memory store holds at most 16 pairs; this update would leave {len(metadata)}"
                )
            new = (
                row["name"] if name is None else name,
                row["description"] if description is None else description,
                json.dumps(metadata),
            )
            if new != (row["name"], row["description"], row["metadata"]):
                c.execute(
                    "UPDATE stores SET name = ?, description = ?, metadata = ?, updated_at = ? WHERE id = ?",
                    (*new, now(), store_id),
                )
            return _store(_require_store(c, store_id))

    def archive_store(self, store_id: str) -> StoreRecord:
        with self._write() as c:
            row = _require_store(c, store_id)
            if row["archived_at"] is None:
                t = now()
                c.execute("UPDATE stores SET archived_at = ?, updated_at = ? WHERE id = ?", (t, t, store_id))
            return _store(_require_store(c, store_id))

    def delete_store(self, store_id: str) -> None:
        with self._write() as c:
            _require_store(c, store_id)
            for table, col in (
                ("versions", "store_id"),
                ("memories", "store_id"),
                ("store_kv", "store_id"),
                ("stores", "id"),
            ):
                c.execute(f"DELETE FROM {table} WHERE {col} = ?", (store_id,))

    # --- memories ------------------------------------------------------------------------------

    def create_memory(
        self, store_id: str, path: str, content: str, actor: Actor, *, max_memories: int
    ) -> MemoryRecord:
        sha, size = sha256_hex(content), len(content.encode("utf-8"))
        with self._write() as c:
            _require_writable(c, store_id)
            _check_path_free(c, store_id, path, None)
            live = c.execute(
                "SELECT count(*) FROM memories INDEXED BY memories_live_path WHERE store_id = ? AND deleted_at IS NULL", (store_id,)
            ).fetchone()[0]
            if live >= max_memories:
                raise LimitExceeded(
                    f"memory store {store_id} already holds {live} memories, the limit of this service "
                    f"(--max-memories {max_memories}); delete memories before creating more"
                )
            mid, t = new_id("mem_"), now()
            counter = _bump(c, store_id)
            vid = _insert_version(
                c, store_id=store_id, memory_id=mid, operation="created", path=path, content=content,
                sha=sha, size=size, counter=counter, at=t, actor=actor,
            )  # fmt: skip
            try:
                c.execute(
                    "INSERT INTO memories (id, store_id, path, content, sha, size, version_id, counter, created_at, "
                    "updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (mid, store_id, path, content, sha, size, vid, counter, t, t),
                )
            except sqlite3.IntegrityError:  # only reachable if the checks above were bypassed
                raise PathConflict(f"a memory already exists at {path}", "", path) from None
            return _memory(_live_memory(c, store_id, mid, content=False), content)

    def list_memories(
        self,
        store_id: str,
        *,
        path_prefix: str,
        depth: int,
        limit: int,
        page: str | None,
        with_content: bool,
    ) -> Page:
        cols = _MEM_COLS + (", content" if with_content else "")
        base = f"SELECT {cols} FROM memories WHERE store_id = ? AND deleted_at IS NULL AND path >= ? AND path < ?"
        bounds = (store_id, path_prefix, _upper(path_prefix))
        # Resume after the last item of the previous page; a roll-up item resumes after its subtree.
        after: tuple[str, str] | None = None
        if page is not None:
            last = decode_cursor("memories", page, str)
            after = (">=", _upper(last)) if last.endswith("/") else (">", last)

        def mem(r: sqlite3.Row) -> MemoryRecord:
            return _memory(r, r["content"] if with_content else None)

        items: list = []
        with self._read() as c:
            _require_store(c, store_id)
            counter = _counter(c, store_id)
            if depth == 0:
                sql, args = base, list(bounds)
                if after:
                    sql += f" AND path {after[0]} ?"
                    args.append(after[1])
                rows = c.execute(sql + " ORDER BY path LIMIT ?", (*args, limit + 1)).fetchall()
                items = [mem(r) for r in rows]
            else:
                # Walk the children in path order; each deeper subtree is one roll-up, skipped at once.
                while len(items) <= limit:
                    sql, args = base, list(bounds)
                    if after:
                        sql += f" AND path {after[0]} ?"
                        args.append(after[1])
                    row = c.execute(sql + " ORDER BY path LIMIT 1", args).fetchone()
                    if row is None:
                        break
                    rest = row["path"][len(path_prefix) :]
                    if "/" in rest:
                        sub = path_prefix + rest.split("/", 1)[0] + "/"
                        items.append(PrefixRecord(sub))
                        after = (">=", _upper(sub))
                    else:
                        items.append(mem(row))
                        after = (">", row["path"])
        nxt = None
        if len(items) > limit:
            items = items[:limit]
            nxt = encode_cursor("memories", items[-1].path)
        return Page(items, nxt, counter)

    def get_memory(self, store_id: str, memory_id: str) -> MemoryRecord:
        with self._read() as c:
            _require_store(c, store_id)
            row = _live_memory(c, store_id, memory_id)
            return _memory(row, row["content"])

    def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        content: str | None,
        path: str | None,
        expected_sha256: str | None,
        actor: Actor,
    ) -> MemoryRecord:
        with self._write() as c:
            _require_writable(c, store_id)
            row = _live_memory(c, store_id, memory_id)
            new_path = row["path"] if path is None else path
            new_sha = row["sha"] if content is None else sha256_hex(content)
            unchanged = new_sha == row["sha"] and new_path == row["path"]
            if expected_sha256 is not None and expected_sha256 != row["sha"]:
                if unchanged:  # the store already holds what was asked: a retry that already landed
                    return _memory(row, row["content"])
                raise PreconditionFailed(
                    f"memory {memory_id} has content_sha256 {row['sha']}, not the expected {expected_sha256}"
                )
            if unchanged:  # no-op: no version, no counter bump
                return _memory(row, row["content"])
            if new_path != row["path"]:
                _check_path_free(c, store_id, new_path, memory_id)
            new_content = row["content"] if content is None else content
            size = len(new_content.encode("utf-8"))
            t = now()
            counter = _bump(c, store_id)
            vid = _insert_version(
                c, store_id=store_id, memory_id=memory_id, operation="modified", path=new_path,
                content=new_content, sha=new_sha, size=size, counter=counter, at=t, actor=actor,
            )  # fmt: skip
            c.execute(
                "UPDATE memories SET path = ?, content = ?, sha = ?, size = ?, version_id = ?, counter = ?, "
                "updated_at = ? WHERE id = ?",
                (new_path, new_content, new_sha, size, vid, counter, t, memory_id),
            )
            return _memory(_live_memory(c, store_id, memory_id, content=False), new_content)

    def delete_memory(
        self, store_id: str, memory_id: str, *, expected_sha256: str | None, actor: Actor
    ) -> None:
        with self._write() as c:
            _require_store(c, store_id)  # archived stores can still be deleted from
            row = _live_memory(c, store_id, memory_id, content=False)
            if expected_sha256 is not None and expected_sha256 != row["sha"]:
                raise PreconditionFailed(
                    f"memory {memory_id} has content_sha256 {row['sha']}, not the expected {expected_sha256}; "
                    "nothing was deleted"
                )
            t = now()
            counter = _bump(c, store_id)
            vid = _insert_version(
                c, store_id=store_id, memory_id=memory_id, operation="deleted", path=row["path"],
                content=None, sha=None, size=None, counter=counter, at=t, actor=actor,
            )  # fmt: skip
            c.execute(
                "UPDATE memories SET deleted_at = ?, content = NULL, version_id = ?, counter = ?, updated_at = ? "
                "WHERE id = ?",
                (t, vid, counter, t, memory_id),
            )

    # --- versions ------------------------------------------------------------------------------

    def list_versions(
        self, store_id: str, *, filters: VersionFilter, limit: int, page: str | None, with_content: bool
    ) -> Page:
        where, args = ["store_id = ?"], [store_id]
        if page is not None:
            where.append("seq < ?")
            args.append(decode_cursor("versions", page, int))
        for col, val in (
            ("memory_id", filters.memory_id),
            ("operation", filters.operation),
        ):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        if filters.session_id is not None:
            where.append("actor_type = 'session_actor' AND actor_id = ?")
            args.append(filters.session_id)
        if filters.api_key_id is not None:
            where.append("actor_type = 'api_actor' AND actor_id = ?")
            args.append(filters.api_key_id)
        if filters.created_gte is not None:
            where.append("created_at >= ?")
            args.append(filters.created_gte)
        if filters.created_lte is not None:
            where.append("created_at <= ?")
            args.append(filters.created_lte)
        cols = "seq, " + _VER_COLS + (", content" if with_content else "")
        with self._read() as c:
            _require_store(c, store_id)
            rows = c.execute(
                f"SELECT {cols} FROM versions WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?",
                (*args, limit + 1),
            ).fetchall()
        nxt = encode_cursor("versions", rows[limit - 1]["seq"]) if len(rows) > limit else None
        return Page([_version(r, r["content"] if with_content else None) for r in rows[:limit]], nxt)

    def _get_version(self, c: sqlite3.Connection, store_id: str, version_id: str) -> sqlite3.Row:
        _require_store(c, store_id)
        row = c.execute(
            f"SELECT {_VER_COLS}, content FROM versions WHERE id = ? AND store_id = ?", (version_id, store_id)
        ).fetchone()
        if row is None:
            raise NotFound(f"memory version {version_id} not found in memory store {store_id}")
        return row

    def get_version(self, store_id: str, version_id: str) -> VersionRecord:
        with self._read() as c:
            row = self._get_version(c, store_id, version_id)
            return _version(row, row["content"])

    def redact_version(self, store_id: str, version_id: str, actor: Actor) -> VersionRecord:
        # Redaction rewrites history only; the mount never sees it, so the counter does not move.
        with self._write() as c:
            row = self._get_version(c, store_id, version_id)
            if row["redacted_at"] is None:
                c.execute(
                    "UPDATE versions SET content = NULL, path = NULL, sha = NULL, size = NULL, redacted_at = ?, "
                    "redactor_type = ?, redactor_id = ? WHERE id = ?",
                    (now(), actor.type, actor.id, version_id),
                )
                row = self._get_version(c, store_id, version_id)
            return _version(row, row["content"])

    # --- counter extension ---------------------------------------------------------------------

    def get_counters(self, store_ids: Sequence[str]) -> dict[str, int]:
        with self._read() as c:
            out = {}
            for sid in store_ids:
                _require_store(c, sid)
                out[sid] = _counter(c, sid)
            return out

    def changes_since(self, store_id: str, since: int) -> Changes:
        with self._read() as c:
            _require_store(c, store_id)
            counter = _counter(c, store_id)
            if since < 0 or since > counter:
                raise Invalid(f"since: {since} is not between 0 and the store's current counter {counter}")
            if since < _kv(c, store_id, HISTORY_FLOOR_KEY):
                return Changes(store_id, since, counter, too_old=True)
            rows = c.execute(
                f"SELECT {_MEM_COLS}, deleted_at FROM memories WHERE store_id = ? AND counter > ? "
                "ORDER BY path, deleted_at IS NULL, id",  # a tombstone before a live memory at its path
                (store_id, since),
            ).fetchall()
            changes = []
            for r in rows:
                before = c.execute(
                    "SELECT operation, path FROM versions WHERE store_id = ? AND memory_id = ? AND counter <= ? "
                    "ORDER BY counter DESC LIMIT 1",
                    (store_id, r["id"], since),
                ).fetchone()
                previous = None
                if (
                    before is not None
                    and before["operation"] != "deleted"
                    and before["path"] not in (None, r["path"])
                ):
                    previous = before["path"]
                deleted = r["deleted_at"] is not None
                changes.append(
                    Change(
                        memory_id=r["id"],
                        operation="deleted" if deleted else "upserted",
                        path=r["path"],
                        previous_path=previous,
                        content_sha256=None if deleted else r["sha"],
                        content_size_bytes=None if deleted else r["size"],
                        memory_version_id=r["version_id"],
                        updated_at=r["updated_at"],
                    )
                )
            return Changes(store_id, since, counter, too_old=False, changes=changes)

    def open_snapshot(self, store_id: str) -> _Snapshot:
        return _Snapshot(self._connect(), store_id)

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
        with self._write() as c:
            used: set[str] = set()
            rows = []
            for pos, spec in enumerate(resources):
                store = _require_store(c, spec.memory_store_id)
                if store["archived_at"] is not None:
                    raise StoreArchived(
                        f"memory store {spec.memory_store_id} is archived and cannot be attached"
                    )
                base = "/mnt/memory/" + slugify(store["name"])
                mount, n = base, 2
                while mount in used:
                    mount, n = f"{base}-{n}", n + 1
                used.add(mount)
                rows.append(
                    (sid, pos, spec.memory_store_id, spec.access, store["name"], store["description"],
                     spec.instructions, mount)
                )  # fmt: skip
            c.execute(
                "INSERT INTO sessions (id, token_hash, title, metadata, created_at, updated_at) VALUES (?,?,?,?,?,?)",
                (sid, token_hash, title, json.dumps(metadata), t, t),
            )
            c.executemany("INSERT INTO session_resources VALUES (?,?,?,?,?,?,?,?)", rows)
            return self._session(c, sid)

    def _session(self, c: sqlite3.Connection, session_id: str) -> SessionRecord:
        row = c.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            raise NotFound(f"session {session_id} not found")
        res = c.execute(
            "SELECT * FROM session_resources WHERE session_id = ? ORDER BY position", (session_id,)
        ).fetchall()
        return SessionRecord(
            id=row["id"],
            title=row["title"],
            metadata=json.loads(row["metadata"]),
            resources=[
                ResourceRecord(
                    memory_store_id=r["memory_store_id"],
                    access=r["access"],
                    name=r["name"],
                    description=r["description"],
                    instructions=r["instructions"],
                    mount_path=r["mount_path"],
                )
                for r in res
            ],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            archived_at=row["archived_at"],
        )

    def get_session(self, session_id: str) -> SessionRecord:
        with self._read() as c:
            return self._session(c, session_id)

    def session_for_token(self, token_hash: str) -> SessionRecord | None:
        with self._read() as c:
            row = c.execute(
                "SELECT id FROM sessions WHERE token_hash = ? AND archived_at IS NULL", (token_hash,)
            ).fetchone()
            return self._session(c, row["id"]) if row else None

    def archive_session(self, session_id: str) -> SessionRecord:
        with self._write() as c:
            self._session(c, session_id)
            t = now()
            # Dropping the hash revokes the token for good.
            c.execute(
                "UPDATE sessions SET archived_at = coalesce(archived_at, ?), updated_at = ?, token_hash = NULL "
                "WHERE id = ?",
                (t, t, session_id),
            )
            return self._session(c, session_id)

    def sessions_for_store(self, store_id: str) -> list[SessionRecord]:
        """Every session (archived ones too) that attaches the store, newest first."""
        with self._read() as c:
            _require_store(c, store_id)
            rows = c.execute(
                "SELECT DISTINCT s.id, s.seq FROM sessions s JOIN session_resources r ON r.session_id = s.id "
                "WHERE r.memory_store_id = ? ORDER BY s.seq DESC",
                (store_id,),
            ).fetchall()
            return [self._session(c, r["id"]) for r in rows]
