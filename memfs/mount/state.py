"""The mount's state dir: lock, state.db (SQLite), kept/ (DESIGN.md "Mount state dir").

Everything the mount must not lose lives here. Content is kept by sha256 in state.db's `blobs`
table, next to the rows that refer to it: one file create costs ~0.6 ms on the disks we run on,
so 2,000 blob files made a first download slow, while 2,000 rows in one transaction are a
sequential write. Rows are committed in WAL mode with synchronous=NORMAL, so a SIGKILL right after
a commit loses nothing (the page cache holds the data); `durable()` additionally survives power
loss (the fsync() path).

All methods are synchronous and short. The connection is shared between threads under a lock so
that the sync engine may call from `trio.to_thread` while the filesystem core uses it on the trio
thread.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import cachetools

from memfs.limits import NOTICES_KEPT
from memfs.protocol import Access

SCHEMA_VERSION = 2
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
FLAG_BAD_UTF8 = 1  # files.flags bit: content is not UTF-8, never pushed
FLAG_UNBORN = 2  # files.flags bit: created by a writer that has not closed it; dropped at restart
EMPTY_SHA = hashlib.sha256(b"").hexdigest()

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


@dataclass(frozen=True, slots=True)
class StoreRow:
    store_id: str
    name: str
    slug: str
    access: Access
    counter: int | None
    last_sync_at: str | None
    last_result: str | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class FileRow:
    store_id: str
    path: str
    memory_id: str | None
    sha: str
    size: int
    mtime_ns: int
    mode: int
    flags: int

    @property
    def bad_utf8(self) -> bool:
        return bool(self.flags & FLAG_BAD_UTF8)


@dataclass(frozen=True, slots=True)
class DirRow:
    store_id: str
    path: str
    mtime_ns: int
    mode: int


@dataclass(frozen=True, slots=True)
class BaselineRow:
    store_id: str
    memory_id: str
    path: str
    sha: str
    size: int
    updated_at: str | None


@dataclass(frozen=True, slots=True)
class RefusedRow:
    store_id: str
    path: str
    sha: str
    reason: str


@dataclass(frozen=True, slots=True)
class SkippedRow:
    store_id: str
    memory_id: str
    path: str
    sha: str | None
    size: int | None
    reason: str


def _utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class State:
    """One state dir. `State(d)` creates the layout and opens (and migrates) state.db."""

    def __init__(self, state_dir: str | os.PathLike[str], *, cache_bytes: int = DEFAULT_CACHE_BYTES):
        self.path = Path(state_dir).absolute()
        self.blobs_dir = self.path / "blobs"
        self.kept_dir = self.path / "kept"
        self.lock_path = self.path / "lock"
        self.db_path = self.path / "state.db"
        self.control_socket = self.path / "control.sock"
        for d in (self.path, self.kept_dir):
            d.mkdir(parents=True, exist_ok=True)
        self._mutex = threading.RLock()
        self._generations: dict[str, int] = {}  # per store: bumped by every change to what is staged
        self._depth = 0
        self._lock_fd: int | None = None
        self._keep_counter = 0
        self._cache: cachetools.LRUCache[str, bytes] = cachetools.LRUCache(maxsize=cache_bytes, getsizeof=len)
        self._db = sqlite3.connect(self.db_path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.execute("PRAGMA journal_size_limit=67108864")  # a first download's WAL shrinks again
        # No commit pays for copying the WAL into the database (0.4 s after a 32 MiB download):
        # the mount's timer calls checkpoint() from a worker thread instead; close() checkpoints too.
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

    def __enter__(self) -> State:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the lock --------------------------------------------------------------------------

    def lock(self, root: str = "") -> None:
        """Take the state dir for this process (exclusive, non-blocking); raise StateLocked if taken."""
        if self._lock_fd is not None:
            return
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
            info = self.lock_owner_from_fd(fd)
            os.close(fd)
            raise StateLocked(self.path, info.get("pid"), info.get("root")) from None
        body = json.dumps(
            {"pid": os.getpid(), "root": str(root), "started_at": datetime.now(UTC).isoformat()}
        )
        os.ftruncate(fd, 0)
        os.pwrite(fd, body.encode(), 0)
        self._lock_fd = fd

    @staticmethod
    def lock_owner_from_fd(fd: int) -> dict:
        try:
            return json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        except (ValueError, OSError):
            return {}

    def lock_owner(self) -> dict:
        """The JSON in STATE/lock (the last or live owner); {} when none."""
        try:
            return json.loads(self.lock_path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    @property
    def locked(self) -> bool:
        return self._lock_fd is not None

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

    # ---- stores ----------------------------------------------------------------------------

    def set_store(self, store_id: str, name: str, slug: str, access: str) -> None:
        """Insert or update a store's identity; keeps counter and sync results."""
        if access not in ("read_write", "read_only"):
            raise ValueError(f"bad access {access!r}")
        with self.transaction() as db:
            db.execute(
                "INSERT INTO stores(store_id, name, slug, access) VALUES(?,?,?,?) "
                "ON CONFLICT(store_id) DO UPDATE SET name=excluded.name, slug=excluded.slug, "
                "access=excluded.access",
                (store_id, name, slug, access),
            )

    _STORE_FIELDS = frozenset(
        {"counter", "last_sync_at", "last_result", "last_error", "name", "slug", "access"}
    )

    def update_store(self, store_id: str, **fields: object) -> None:
        """update_store(id, counter=…, last_sync_at=…, last_result=…, last_error=…)."""
        bad = set(fields) - self._STORE_FIELDS
        if bad:
            raise ValueError(f"unknown store fields {sorted(bad)}")
        if not fields:
            return
        cols = ", ".join(f"{k}=?" for k in fields)
        with self.transaction() as db:
            cur = db.execute(f"UPDATE stores SET {cols} WHERE store_id=?", (*fields.values(), store_id))
            if cur.rowcount == 0:
                raise KeyError(store_id)

    def store_counter(self, store_id: str) -> int | None:
        """The last counter fully applied to the view (None before the first download)."""
        row = self.store(store_id)
        return row.counter if row else None

    def set_store_counter(self, store_id: str, counter: int | None) -> None:
        self.update_store(store_id, counter=counter)

    def stores(self) -> list[StoreRow]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT store_id, name, slug, access, counter, last_sync_at, last_result, last_error "
                "FROM stores ORDER BY rowid"
            ).fetchall()
        return [StoreRow(*r) for r in rows]

    def store(self, store_id: str) -> StoreRow | None:
        with self._mutex:
            r = self._db.execute(
                "SELECT store_id, name, slug, access, counter, last_sync_at, last_result, last_error "
                "FROM stores WHERE store_id=?",
                (store_id,),
            ).fetchone()
        return StoreRow(*r) if r else None

    def _bump(self, store_id: str) -> None:
        self._generations[store_id] = self._generations.get(store_id, 0) + 1

    def note_change(self, store_id: str) -> None:
        """What the sync may push changed without a write here (a new file's writer closed it)."""
        self._bump(store_id)

    def generation(self, store_id: str) -> int:
        """Changes with every write to the tables that decide what is staged for this store
        (files, baseline, refused, skipped, held deletes): equal numbers mean nothing changed."""
        return self._generations.get(store_id, 0)

    def delete_store(self, store_id: str) -> None:
        """Forget everything about a store (all tables). Blobs go at the next gc_blobs()."""
        self._bump(store_id)
        with self.transaction() as db:
            for table in (
                "stores",
                "baseline",
                "files",
                "dirs",
                "refused",
                "skipped",
                "deletes_held",
                "notices",
            ):
                db.execute(f"DELETE FROM {table} WHERE store_id=?", (store_id,))

    # ---- files (the local view) ------------------------------------------------------------

    def load_files(self, store_id: str) -> dict[str, FileRow]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT store_id, path, memory_id, sha, size, mtime_ns, mode, flags FROM files "
                "WHERE store_id=? ORDER BY path",
                (store_id,),
            ).fetchall()
        return {r[1]: FileRow(*r) for r in rows}

    def upsert_file(
        self,
        store_id: str,
        path: str,
        memory_id: str | None,
        sha: str,
        size: int,
        mtime_ns: int,
        mode: int = 0o644,
        flags: int = 0,
    ) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO files(store_id, path, memory_id, sha, size, mtime_ns, mode, flags) "
                "VALUES(?,?,?,?,?,?,?,?)",
                (store_id, path, memory_id, sha, size, mtime_ns, mode, flags),
            )

    def delete_file(self, store_id: str, path: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute("DELETE FROM files WHERE store_id=? AND path=?", (store_id, path))

    def set_file_memory_id(self, store_id: str, path: str, memory_id: str | None) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute(
                "UPDATE files SET memory_id=? WHERE store_id=? AND path=?", (memory_id, store_id, path)
            )

    def rename_prefix(self, store_id: str, old: str, new: str) -> None:
        """Move `old` and everything below it (files and dirs) to `new`, in one transaction."""
        self._bump(store_id)
        n = len(old)
        with self.transaction() as db:
            for table in ("files", "dirs"):
                db.execute(
                    f"UPDATE {table} SET path = ? || substr(path, ?) "
                    "WHERE store_id=? AND (path=? OR substr(path, 1, ?)=?)",
                    (new, n + 1, store_id, old, n + 1, old + "/"),
                )

    # ---- dirs ------------------------------------------------------------------------------

    def load_dirs(self, store_id: str) -> dict[str, DirRow]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT store_id, path, mtime_ns, mode FROM dirs WHERE store_id=? ORDER BY path", (store_id,)
            ).fetchall()
        return {r[1]: DirRow(*r) for r in rows}

    def upsert_dir(self, store_id: str, path: str, mtime_ns: int, mode: int = 0o755) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO dirs(store_id, path, mtime_ns, mode) VALUES(?,?,?,?)",
                (store_id, path, mtime_ns, mode),
            )

    def delete_dir(self, store_id: str, path: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM dirs WHERE store_id=? AND path=?", (store_id, path))

    # ---- baseline --------------------------------------------------------------------------

    def baseline(self, store_id: str) -> dict[str, BaselineRow]:
        """path -> what the store held at the last sync."""
        with self._mutex:
            rows = self._db.execute(
                "SELECT store_id, memory_id, path, sha, size, updated_at FROM baseline WHERE store_id=?",
                (store_id,),
            ).fetchall()
        return {r[2]: BaselineRow(*r) for r in rows}

    def set_baseline(
        self, store_id: str, memory_id: str, path: str, sha: str, size: int, updated_at: str | None = None
    ) -> None:
        """Record a memory as synced; a row of another memory at the same path is replaced."""
        self._bump(store_id)
        with self.transaction() as db:
            db.execute(
                "DELETE FROM baseline WHERE store_id=? AND path=? AND memory_id<>?",
                (store_id, path, memory_id),
            )
            db.execute(
                "INSERT OR REPLACE INTO baseline(store_id, memory_id, path, sha, size, updated_at) "
                "VALUES(?,?,?,?,?,?)",
                (store_id, memory_id, path, sha, size, updated_at),
            )

    def drop_baseline(self, store_id: str, memory_id: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute("DELETE FROM baseline WHERE store_id=? AND memory_id=?", (store_id, memory_id))

    # ---- refused / skipped / deletes_held ------------------------------------------------

    def refused(self, store_id: str) -> dict[str, RefusedRow]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT store_id, path, sha, reason FROM refused WHERE store_id=?", (store_id,)
            ).fetchall()
        return {r[1]: RefusedRow(*r) for r in rows}

    def set_refused(self, store_id: str, path: str, sha: str, reason: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO refused(store_id, path, sha, reason) VALUES(?,?,?,?)",
                (store_id, path, sha, reason),
            )

    def clear_refused(self, store_id: str, path: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute("DELETE FROM refused WHERE store_id=? AND path=?", (store_id, path))

    def skipped(self, store_id: str) -> dict[str, SkippedRow]:
        """memory_id -> remote memory not materialised here."""
        with self._mutex:
            rows = self._db.execute(
                "SELECT store_id, memory_id, path, sha, size, reason FROM skipped WHERE store_id=?",
                (store_id,),
            ).fetchall()
        return {r[1]: SkippedRow(*r) for r in rows}

    def set_skipped(
        self, store_id: str, memory_id: str, path: str, sha: str | None, size: int | None, reason: str
    ) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO skipped(store_id, memory_id, path, sha, size, reason) VALUES(?,?,?,?,?,?)",
                (store_id, memory_id, path, sha, size, reason),
            )

    def clear_skipped(self, store_id: str, memory_id: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute("DELETE FROM skipped WHERE store_id=? AND memory_id=?", (store_id, memory_id))

    def deletes_held(self, store_id: str) -> set[str]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT memory_id FROM deletes_held WHERE store_id=?", (store_id,)
            ).fetchall()
        return {r[0] for r in rows}

    def add_delete_held(self, store_id: str, memory_id: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO deletes_held(store_id, memory_id) VALUES(?,?)", (store_id, memory_id)
            )

    def clear_delete_held(self, store_id: str, memory_id: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute("DELETE FROM deletes_held WHERE store_id=? AND memory_id=?", (store_id, memory_id))

    # Aliases (the sync engine's spelling).
    add_refused = set_refused
    drop_refused = clear_refused
    drop_skipped = clear_skipped
    drop_delete_held = clear_delete_held

    # ---- notices ---------------------------------------------------------------------------

    def add_notice(self, store_id: str, line: str) -> None:
        """Append one line; only the last NOTICES_KEPT lines per store are kept."""
        with self.transaction() as db:
            (top,) = db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM notices WHERE store_id=?", (store_id,)
            ).fetchone()
            db.execute("INSERT INTO notices(store_id, seq, line) VALUES(?,?,?)", (store_id, top + 1, line))
            db.execute("DELETE FROM notices WHERE store_id=? AND seq<=?", (store_id, top + 1 - NOTICES_KEPT))

    def notices(self, store_id: str) -> list[str]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT line FROM notices WHERE store_id=? ORDER BY seq", (store_id,)
            ).fetchall()
        return [r[0] for r in rows]

    # ---- blobs -----------------------------------------------------------------------------

    def put_blob(self, data: bytes) -> str:
        """Store content by sha256 (in the caller's transaction, if any). Returns the sha."""
        data = bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        # Always asked of the table, never answered from the cache: the cache may hold content
        # whose insert was rolled back with its transaction.
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO blobs(sha, data) VALUES(?, ?)", (sha, data))
        self._cache_put(sha, data)
        return sha

    def _cache_put(self, sha: str, data: bytes) -> None:
        if len(data) <= self._cache.maxsize:
            with self._mutex:
                self._cache[sha] = data

    def get_blob(self, sha: str) -> bytes:
        """Content by sha (hot ones from memory). FileNotFoundError when absent."""
        with self._mutex:
            data = self._cache.get(sha)
        if data is None:
            with self._mutex:
                row = self._db.execute("SELECT data FROM blobs WHERE sha=?", (sha,)).fetchone()
            if row is None:
                raise FileNotFoundError(errno.ENOENT, f"no blob {sha} in {self.db_path}")
            data = bytes(row[0])
            self._cache_put(sha, data)
        return data

    def has_blob(self, sha: str) -> bool:
        with self._mutex:
            return self._db.execute("SELECT 1 FROM blobs WHERE sha=?", (sha,)).fetchone() is not None

    def gc_blobs(self, keep: set[str] | frozenset[str] = frozenset()) -> int:
        """Delete blobs that no files/baseline row references (nor `keep`). Returns how many."""
        with self.transaction() as db:
            live = {r[0] for r in db.execute("SELECT sha FROM files UNION SELECT sha FROM baseline")}
            live |= set(keep)
            live.add(EMPTY_SHA)
            dead = [sha for (sha,) in db.execute("SELECT sha FROM blobs") if sha not in live]
            db.executemany("DELETE FROM blobs WHERE sha=?", ((sha,) for sha in dead))
            for sha in dead:
                self._cache.pop(sha, None)
        return len(dead)

    # ---- kept copies -----------------------------------------------------------------------

    def keep_copy(self, store_id: str, path: str, data: bytes) -> Path:
        """Keep content the agent lost (conflict, store delete): kept/<store>/<UTC time>-<n>/<path>.

        Written durably (fsync) since it exists exactly because it is nowhere else."""
        with self._mutex:
            self._keep_counter += 1
            n = self._keep_counter
        rel = path.lstrip("/") or "unnamed"
        target = self.kept_dir / store_id / f"{_utc_stamp()}-{n}" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".tmp-{os.getpid()}-{n}"
        with open(tmp, "wb") as f:
            f.write(bytes(data))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)
        return target
