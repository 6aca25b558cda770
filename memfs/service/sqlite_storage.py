"""SQLite backend of the store service (SPEC §2.7): transactions and queries, no API rules.

One file in WAL mode, schema versioned with PRAGMA user_version and migrated at start.
Every write is one `BEGIN IMMEDIATE` transaction, so writers from several threads or service
processes on one file are serialised by SQLite itself (the per-store lock of `backend.py` is the
database lock here): the per-store counter (in `store_kv`) is bumped in the same transaction as
the version it counts, and the rules' path checks see every commit. Deleted memories stay as
tombstones in `memories` (content dropped) so the changes feed can report a deletion with the
memory's last path even after its versions are redacted. TEXT compares with SQLite's BINARY
collation: byte order of UTF-8, as the rules need.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from memfs.service.backend import PathTaken
from memfs.service.storage import (
    Actor,
    MemoryRecord,
    ResourceRecord,
    SessionRecord,
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


_POOL_IDLE_MAX = 8
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


class SqliteTx:
    """The queries of `backend.Tx` on one connection inside one transaction."""

    def __init__(self, conn: sqlite3.Connection):
        self.c = conn

    # --- stores ----------------------------------------------------------------------------------

    def store(self, store_id: str) -> StoreRecord | None:
        row = self.c.execute("SELECT * FROM stores WHERE id = ?", (store_id,)).fetchone()
        return _store(row) if row else None

    def insert_store(self, s: StoreRecord) -> None:
        self.c.execute(
            "INSERT INTO stores (id, name, description, metadata, created_at, updated_at) VALUES (?,?,?,?,?,?)",
            (s.id, s.name, s.description, json.dumps(s.metadata), s.created_at, s.updated_at),
        )

    def update_store(
        self, store_id: str, *, name: str, description: str, metadata: dict[str, str], at: str
    ) -> None:
        self.c.execute(
            "UPDATE stores SET name = ?, description = ?, metadata = ?, updated_at = ? WHERE id = ?",
            (name, description, json.dumps(metadata), at, store_id),
        )

    def archive_store(self, store_id: str, at: str) -> None:
        self.c.execute("UPDATE stores SET archived_at = ?, updated_at = ? WHERE id = ?", (at, at, store_id))

    def delete_store(self, store_id: str) -> None:
        for table, col in (
            ("versions", "store_id"),
            ("memories", "store_id"),
            ("store_kv", "store_id"),
            ("stores", "id"),
        ):
            self.c.execute(f"DELETE FROM {table} WHERE {col} = ?", (store_id,))

    def list_stores(
        self,
        *,
        after: int | None,
        limit: int,
        include_archived: bool,
        created_gte: str | None,
        created_lte: str | None,
        only_ids: Sequence[str] | None,
    ) -> list[tuple[int, StoreRecord]]:
        where, args = ["1"], []
        if after is not None:
            where.append("seq < ?")
            args.append(after)
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
        rows = self.c.execute(
            f"SELECT * FROM stores WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?", (*args, limit)
        ).fetchall()
        return [(r["seq"], _store(r)) for r in rows]

    # --- the counter and the history floor --------------------------------------------------------

    def _kv(self, store_id: str, key: str) -> int:
        row = self.c.execute(
            "SELECT value FROM store_kv WHERE store_id = ? AND key = ?", (store_id, key)
        ).fetchone()
        return int(row[0]) if row else 0  # a store that never had the key reads 0

    def counter(self, store_id: str) -> int:
        return self._kv(store_id, COUNTER_KEY)

    def history_floor(self, store_id: str) -> int:
        return self._kv(store_id, HISTORY_FLOOR_KEY)

    def bump(self, store_id: str) -> int:
        row = self.c.execute(
            "INSERT INTO store_kv (store_id, key, value) VALUES (?, ?, 1) "
            "ON CONFLICT (store_id, key) DO UPDATE SET value = value + 1 RETURNING value",
            (store_id, COUNTER_KEY),
        ).fetchone()
        return int(row[0])

    # --- memories --------------------------------------------------------------------------------

    def live_memory(self, store_id: str, memory_id: str, *, content: bool) -> MemoryRecord | None:
        cols = _MEM_COLS + (", content" if content else "")
        row = self.c.execute(
            f"SELECT {cols} FROM memories WHERE id = ? AND store_id = ? AND deleted_at IS NULL",
            (memory_id, store_id),
        ).fetchone()
        return _memory(row, row["content"] if content else None) if row else None

    def live_at(self, store_id: str, paths: Sequence[str]) -> list[tuple[str, str]]:
        marks = ",".join("?" * len(paths))
        rows = self.c.execute(
            f"SELECT id, path FROM memories WHERE store_id = ? AND deleted_at IS NULL AND path IN ({marks}) "
            "ORDER BY length(path)",
            (store_id, *paths),
        ).fetchall()
        return [(r["id"], r["path"]) for r in rows]

    def first_live_in(self, store_id: str, lo: str, hi: str, exclude_id: str | None) -> tuple[str, str] | None:
        row = self.c.execute(
            "SELECT id, path FROM memories WHERE store_id = ? AND deleted_at IS NULL AND path >= ? AND path < ? "
            "AND id IS NOT ? ORDER BY path LIMIT 1",
            (store_id, lo, hi, exclude_id),
        ).fetchone()
        return (row["id"], row["path"]) if row else None

    def count_live(self, store_id: str) -> int:
        return self.c.execute(
            "SELECT count(*) FROM memories INDEXED BY memories_live_path WHERE store_id = ? AND deleted_at IS NULL",
            (store_id,),
        ).fetchone()[0]

    def list_live(
        self, store_id: str, *, lo: str, lo_inclusive: bool, hi: str, limit: int, content: bool
    ) -> list[MemoryRecord]:
        cols = _MEM_COLS + (", content" if content else "")
        op = ">=" if lo_inclusive else ">"
        rows = self.c.execute(
            f"SELECT {cols} FROM memories WHERE store_id = ? AND deleted_at IS NULL AND path {op} ? AND path < ? "
            "ORDER BY path LIMIT ?",
            (store_id, lo, hi, limit),
        ).fetchall()
        return [_memory(r, r["content"] if content else None) for r in rows]

    def insert_memory(self, m: MemoryRecord, counter: int) -> None:
        try:
            self.c.execute(
                "INSERT INTO memories (id, store_id, path, content, sha, size, version_id, counter, created_at, "
                "updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (m.id, m.memory_store_id, m.path, m.content, m.content_sha256, m.content_size_bytes,
                 m.memory_version_id, counter, m.created_at, m.updated_at),
            )  # fmt: skip
        except sqlite3.IntegrityError:
            raise PathTaken(m.path) from None

    def update_memory(
        self,
        memory_id: str,
        *,
        path: str,
        content: str,
        sha: str,
        size: int,
        version_id: str,
        counter: int,
        at: str,
    ) -> None:
        try:
            self.c.execute(
                "UPDATE memories SET path = ?, content = ?, sha = ?, size = ?, version_id = ?, counter = ?, "
                "updated_at = ? WHERE id = ?",
                (path, content, sha, size, version_id, counter, at, memory_id),
            )
        except sqlite3.IntegrityError:
            raise PathTaken(path) from None

    def tombstone_memory(self, memory_id: str, *, version_id: str, counter: int, at: str) -> None:
        self.c.execute(
            "UPDATE memories SET deleted_at = ?, content = NULL, version_id = ?, counter = ?, updated_at = ? "
            "WHERE id = ?",
            (at, version_id, counter, at, memory_id),
        )

    def changed_since(self, store_id: str, since: int) -> list[tuple[MemoryRecord, bool]]:
        rows = self.c.execute(
            f"SELECT {_MEM_COLS}, deleted_at FROM memories WHERE store_id = ? AND counter > ? "
            "ORDER BY path, deleted_at IS NULL, id",  # a tombstone before a live memory at its path
            (store_id, since),
        ).fetchall()
        return [(_memory(r, None), r["deleted_at"] is not None) for r in rows]

    def path_at(self, store_id: str, memory_id: str, counter: int) -> tuple[str, str | None] | None:
        row = self.c.execute(
            "SELECT operation, path FROM versions WHERE store_id = ? AND memory_id = ? AND counter <= ? "
            "ORDER BY counter DESC LIMIT 1",
            (store_id, memory_id, counter),
        ).fetchone()
        return (row["operation"], row["path"]) if row else None

    def live_batches(self, store_id: str, n: int) -> Iterator[list[MemoryRecord]]:
        cur = self.c.execute(
            f"SELECT {_MEM_COLS}, content FROM memories WHERE store_id = ? AND deleted_at IS NULL ORDER BY path",
            (store_id,),
        )
        while rows := cur.fetchmany(n):
            yield [_memory(r, r["content"]) for r in rows]

    # --- versions --------------------------------------------------------------------------------

    def insert_version(self, v: VersionRecord, counter: int) -> None:
        actor = v.created_by
        self.c.execute(
            "INSERT INTO versions (id, store_id, memory_id, operation, path, content, sha, size, counter, created_at, "
            "actor_type, actor_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (v.id, v.memory_store_id, v.memory_id, v.operation, v.path, v.content, v.content_sha256,
             v.content_size_bytes, counter, v.created_at, actor.type if actor else None, actor.id if actor else None),
        )  # fmt: skip

    def version(self, store_id: str, version_id: str) -> VersionRecord | None:
        row = self.c.execute(
            f"SELECT {_VER_COLS}, content FROM versions WHERE id = ? AND store_id = ?", (version_id, store_id)
        ).fetchone()
        return _version(row, row["content"]) if row else None

    def list_versions(
        self, store_id: str, *, filters: VersionFilter, after: int | None, limit: int, content: bool
    ) -> list[tuple[int, VersionRecord]]:
        where, args = ["store_id = ?"], [store_id]
        if after is not None:
            where.append("seq < ?")
            args.append(after)
        for col, val in (("memory_id", filters.memory_id), ("operation", filters.operation)):
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
        cols = "seq, " + _VER_COLS + (", content" if content else "")
        rows = self.c.execute(
            f"SELECT {cols} FROM versions WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?", (*args, limit)
        ).fetchall()
        return [(r["seq"], _version(r, r["content"] if content else None)) for r in rows]

    def redact_version(self, version_id: str, *, at: str, actor: Actor) -> None:
        self.c.execute(
            "UPDATE versions SET content = NULL, path = NULL, sha = NULL, size = NULL, redacted_at = ?, "
            "redactor_type = ?, redactor_id = ? WHERE id = ?",
            (at, actor.type, actor.id, version_id),
        )

    # --- sessions --------------------------------------------------------------------------------

    def insert_session(self, s: SessionRecord, token_hash: str) -> None:
        self.c.execute(
            "INSERT INTO sessions (id, token_hash, title, metadata, created_at, updated_at) VALUES (?,?,?,?,?,?)",
            (s.id, token_hash, s.title, json.dumps(s.metadata), s.created_at, s.updated_at),
        )
        self.c.executemany(
            "INSERT INTO session_resources VALUES (?,?,?,?,?,?,?,?)",
            [(s.id, pos, r.memory_store_id, r.access, r.name, r.description, r.instructions, r.mount_path)
             for pos, r in enumerate(s.resources)],
        )  # fmt: skip

    def session(self, session_id: str) -> SessionRecord | None:
        row = self.c.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        res = self.c.execute(
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

    def session_id_for_token(self, token_hash: str) -> str | None:
        row = self.c.execute(
            "SELECT id FROM sessions WHERE token_hash = ? AND archived_at IS NULL", (token_hash,)
        ).fetchone()
        return row["id"] if row else None

    def archive_session(self, session_id: str, at: str) -> None:
        # Dropping the hash revokes the token for good.
        self.c.execute(
            "UPDATE sessions SET archived_at = coalesce(archived_at, ?), updated_at = ?, token_hash = NULL "
            "WHERE id = ?",
            (at, at, session_id),
        )


class _HeldRead(SqliteTx):
    """A read transaction on its own connection, held open until close() (a streamed snapshot)."""

    def __init__(self, conn: sqlite3.Connection):
        super().__init__(conn)
        conn.execute("BEGIN")

    def close(self) -> None:
        conn, self.c = self.c, None  # type: ignore[assignment]
        if conn is not None:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            finally:
                conn.close()


class SqliteBackend:
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
    def write(self, store_id: str | None = None) -> Iterator[SqliteTx]:
        # IMMEDIATE takes the write lock up front: the checks the rules make inside cannot be
        # invalidated by another writer before we commit, and there is no lock upgrade to deadlock
        # on. One lock for the whole file: writers to different stores wait for each other here.
        with self._conn() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield SqliteTx(conn)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def read(self) -> Iterator[SqliteTx]:
        # One read transaction: every query inside sees the same snapshot of the database.
        with self._conn() as conn:
            conn.execute("BEGIN")
            try:
                yield SqliteTx(conn)
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    def open_read(self) -> _HeldRead:
        return _HeldRead(self._connect())

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
