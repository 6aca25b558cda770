"""The state dir's database: opening it, its schema and migrations, the lock, transactions.

`StateDb` is the base the state dir's parts build on (view_rows.py, journal.py, blobs.py,
kept.py; state.py puts them together). Rows are committed in WAL mode with synchronous=NORMAL, so
a SIGKILL right after a commit loses nothing (the page cache holds the data); `durable()`
additionally survives power loss (the fsync() path).

All methods are synchronous and short. The connection is shared between threads under a lock so
that the sync engine may call from `trio.to_thread` while the filesystem core uses it on the trio
thread.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from memfs.private_files import open_private_rw, private_dir, private_file

SCHEMA_VERSION = 3

# Each entry migrates from version i to i+1. Never edit a released entry: append.
_MIGRATIONS: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
    CREATE TABLE stores(
        store_id TEXT PRIMARY KEY, name TEXT NOT NULL, slug TEXT NOT NULL, access TEXT NOT NULL,
        counter INTEGER, last_sync_at TEXT, last_result TEXT, last_error TEXT);
    CREATE TABLE baseline(
        store_id TEXT NOT NULL, memory_id TEXT NOT NULL, path TEXT NOT NULL, sha TEXT NOT NULL,
        size INTEGER NOT NULL, updated_at TEXT,
        PRIMARY KEY(store_id, memory_id), UNIQUE(store_id, path));
    CREATE TABLE files(
        store_id TEXT NOT NULL, path TEXT NOT NULL, memory_id TEXT, sha TEXT NOT NULL,
        size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, mode INTEGER NOT NULL DEFAULT 420,
        flags INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(store_id, path));
    CREATE TABLE dirs(
        store_id TEXT NOT NULL, path TEXT NOT NULL, mtime_ns INTEGER NOT NULL,
        mode INTEGER NOT NULL DEFAULT 493, PRIMARY KEY(store_id, path));
    CREATE TABLE refused(
        store_id TEXT NOT NULL, path TEXT NOT NULL, sha TEXT NOT NULL, reason TEXT NOT NULL,
        PRIMARY KEY(store_id, path));
    CREATE TABLE skipped(
        store_id TEXT NOT NULL, memory_id TEXT NOT NULL, path TEXT NOT NULL, sha TEXT,
        size INTEGER, reason TEXT NOT NULL, PRIMARY KEY(store_id, memory_id));
    CREATE TABLE deletes_held(store_id TEXT NOT NULL, memory_id TEXT NOT NULL,
        PRIMARY KEY(store_id, memory_id));
    CREATE TABLE notices(store_id TEXT NOT NULL, seq INTEGER NOT NULL, line TEXT NOT NULL,
        PRIMARY KEY(store_id, seq));
    """,
    # 2: content moves from blobs/<sha[:2]>/<sha> files into the database (_import_blob_files).
    """
    CREATE TABLE blobs(sha TEXT PRIMARY KEY, data BLOB NOT NULL);
    """,
    # 3: each store's place in the hosted API's version feed (SEMANTICS.md#d-no-counter): the newest
    # version created_at applied, and the ids of the versions seen within the overlap behind it.
    """
    CREATE TABLE feed(store_id TEXT PRIMARY KEY, position TEXT NOT NULL, seen TEXT NOT NULL);
    """,
]


class StateError(Exception):
    pass


class StateLocked(StateError):
    """The state dir belongs to a live mount."""

    def __init__(self, state_dir: Path, pid: int | None, root: str | None):
        self.state_dir, self.pid, self.root = state_dir, pid, root
        super().__init__(
            f"state dir {state_dir} is in use by a live memfs mount (pid {pid if pid else '?'}, "
            f"root {root or '?'}); unmount it first or use another --state-dir"
        )


class StateDb:
    """state.db of one state dir, opened (and migrated) on construction; the lock is separate."""

    def __init__(self, state_dir: str | os.PathLike[str]):
        self.path = Path(state_dir).absolute()
        self.blobs_dir = self.path / "blobs"  # schema 1 only: imported into the blobs table, then removed
        self.kept_dir = self.path / "kept"
        self.lock_path = self.path / "lock"
        self.db_path = self.path / "state.db"
        for d in (self.path, self.kept_dir):  # every store's content: private whatever the umask
            private_dir(d)
        private_file(self.db_path)  # before SQLite creates it: its -wal and -shm take its mode
        self._mutex = threading.RLock()
        self._generations: dict[str, int] = {}  # per store: bumped by every change to what is staged
        self._depth = 0
        self._lock_fd: int | None = None
        self._db = sqlite3.connect(self.db_path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.execute("PRAGMA journal_size_limit=67108864")  # a first download's WAL shrinks again
        # No commit pays for copying the WAL into the database (0.4 s after a 32 MiB download):
        # the state dir's upkeep (mount/upkeep.py) calls checkpoint() from a worker thread instead;
        # close() checkpoints too.
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        self._ckpt_db: sqlite3.Connection | None = None
        self._ckpt_mutex = threading.Lock()
        self._migrate()
        self._import_blob_files()

    # ---- lifecycle -------------------------------------------------------------------------

    def _migrate(self) -> None:
        with self.transaction():
            self._db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)")
            row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise StateError(
                    f"state dir {self.path} has schema version {version}, newer than this memfs "
                    f"({SCHEMA_VERSION}); use a newer memfs or another --state-dir"
                )
            for v in range(version, SCHEMA_VERSION):
                for stmt in _MIGRATIONS[v].split(";"):
                    if stmt.strip():
                        self._db.execute(stmt)
            self._db.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', ?)", (str(SCHEMA_VERSION),)
            )

    def _import_blob_files(self) -> None:
        """Move a schema-1 state dir's blob files into the table (once; a crash just repeats it)."""
        if not self.blobs_dir.is_dir():
            return
        files = [f for f in self.blobs_dir.glob("??/*") if not f.name.startswith(".tmp-")]
        with self.transaction() as db:
            for f in files:
                db.execute("INSERT OR IGNORE INTO blobs(sha, data) VALUES(?, ?)", (f.name, f.read_bytes()))
        shutil.rmtree(self.blobs_dir)

    def close(self) -> None:
        with self._ckpt_mutex:
            if self._ckpt_db is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._ckpt_db.close()
                self._ckpt_db = None
        with self._mutex:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self.unlock()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the lock --------------------------------------------------------------------------

    def lock(self, root: str = "") -> None:
        """Take the state dir for this process (exclusive, non-blocking); raise StateLocked if taken."""
        if self._lock_fd is not None:
            return
        fd = open_private_rw(self.lock_path)  # 0600 on every start, whatever an earlier version left
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
            info = self._lock_owner_from_fd(fd)
            os.close(fd)
            raise StateLocked(self.path, info.get("pid"), info.get("root")) from None
        body = json.dumps(
            {"pid": os.getpid(), "root": str(root), "started_at": datetime.now(UTC).isoformat()}
        )
        os.ftruncate(fd, 0)
        os.pwrite(fd, body.encode(), 0)
        self._lock_fd = fd

    @staticmethod
    def _lock_owner_from_fd(fd: int) -> dict[str, Any]:
        """The JSON the live owner wrote into STATE/lock ({} when unreadable)."""
        try:
            return json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        except (ValueError, OSError):
            return {}

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the description releases the flock
            self._lock_fd = None

    # ---- transactions ----------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Group several accessor calls into one commit (nestable; the outermost commits)."""
        with self._mutex:
            outer = self._depth == 0
            if outer:
                self._db.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield self._db
            except BaseException:
                self._depth -= 1
                if outer:
                    self._db.execute("ROLLBACK")
                raise
            self._depth -= 1
            if outer:
                self._db.execute("COMMIT")

    def checkpoint(self) -> None:
        """Copy committed WAL frames into the database file, on a connection of its own (PASSIVE:
        never waits for, nor blocks, the mount's connection). Safe from a worker thread."""
        with self._ckpt_mutex:
            if self._ckpt_db is None:
                self._ckpt_db = sqlite3.connect(self.db_path, isolation_level=None, check_same_thread=False)
                self._ckpt_db.execute("PRAGMA busy_timeout=0")
            with contextlib.suppress(sqlite3.OperationalError):  # busy: the next call does it
                self._ckpt_db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def durable(self) -> None:
        """Make every commit so far survive power loss (fsync() path)."""
        with self._mutex:
            if self._depth == 0:
                self._db.execute("PRAGMA wal_checkpoint(FULL)")

    # ---- meta ------------------------------------------------------------------------------

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        with self._mutex:
            row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str | None) -> None:
        with self.transaction() as db:
            if value is None:
                db.execute("DELETE FROM meta WHERE key=?", (key,))
            else:
                db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", (key, value))

    # ---- generations ---------------------------------------------------------------------

    def _bump(self, store_id: str) -> None:
        self._generations[store_id] = self._generations.get(store_id, 0) + 1

    def note_change(self, store_id: str) -> None:
        """What the sync may push changed without a write here (a new file's writer closed it)."""
        self._bump(store_id)

    def generation(self, store_id: str) -> int:
        """Changes with every write to the tables that decide what is staged for this store
        (files, baseline, refused, skipped, held deletes): equal numbers mean nothing changed."""
        return self._generations.get(store_id, 0)
