"""SQLite backend of the store service (docs/SEMANTICS.md#d-storage): transactions and queries, no API rules.

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

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memfs.service.backend import WouldBlock
from memfs.service.sql_tx import SqlTx

SCHEMA_VERSION = 2

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
    # 2: a store's overview (count and bytes) and the sessions attaching it, each from an index.
    2: [
        # covering: a store's live count and bytes are summed without reading a memory row
        # (deleted_at is a column too: SQLite covers a query only with every column it names)
        "CREATE INDEX memories_live_size ON memories (store_id, size, deleted_at) WHERE deleted_at IS NULL",
        "CREATE INDEX session_resources_store ON session_resources (memory_store_id, session_id)",
    ],
}


_POOL_IDLE_MAX = 8


class SqliteTx(SqlTx):
    integrity_errors = (sqlite3.IntegrityError,)
    # the planner would otherwise scan the store's tombstones too (PERFORMANCE.md)
    count_live_from = "memories INDEXED BY memories_live_path"
    live_totals_from = "memories INDEXED BY memories_live_size"


class _HeldRead(SqliteTx):
    """A read transaction on its own connection, held open until close() (a streamed snapshot)."""

    def __init__(self, conn: sqlite3.Connection):
        super().__init__(conn)
        conn.execute("BEGIN")

    def close(self) -> None:
        conn, self.c = self.c, None
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
        self._loop_conn: sqlite3.Connection | None = None  # read_nowait's, created on first use
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
                # mypy keeps the narrowing of the check before the yield; close() may have run since
                if not self._closed and len(self._pool) < _POOL_IDLE_MAX:  # type: ignore[redundant-expr]
                    self._pool.append(conn)
                    conn = None
            if conn is not None:
                conn.close()

    @contextmanager
    def write(self, *store_ids: str) -> Iterator[SqliteTx]:
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

    @contextmanager
    def read_nowait(self) -> Iterator[SqliteTx]:
        """A read transaction that never waits, for the event loop itself (the counter fast path):
        in WAL mode a reader takes no lock a writer holds, so this is a few indexed page reads
        (~30 µs), where a hop to a worker thread costs ~120 µs. Should SQLite answer busy anyway
        (busy timeout 0: a WAL recovery, a checkpoint restarting), it raises `WouldBlock` at once and
        the caller reads from a worker thread. Its own connection, used only by the loop's thread."""
        conn = self._loop_conn
        if conn is None:
            if self._closed:
                raise RuntimeError("storage is closed")
            conn = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            self._loop_conn = conn
        try:
            conn.execute("BEGIN")
            try:
                yield SqliteTx(conn)
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        except sqlite3.OperationalError as e:
            raise WouldBlock(str(e)) from None

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
        if self._loop_conn is not None:
            self._loop_conn.close()
            self._loop_conn = None
