"""SQLite backend of the store service (docs/SEMANTICS.md#d-storage): transactions and queries, no API rules.

One file in WAL mode; the schema (schema.py) versioned with PRAGMA user_version and migrated at start.
Writes hold SQLite's write lock (`BEGIN IMMEDIATE`), so writers from several threads or service
processes on one file are serialised by SQLite itself (the per-store lock of `backend.py` is the
database lock here): the per-store counter (in `store_kv`) is bumped in the same transaction as
the version it counts, and the rules' path checks see every earlier write.

**Group commit.** A commit costs an fsync (`synchronous=FULL`), ~6 ms here, and SQLite has one
writer at a time, so one commit per request bounds a burst of writes at ~170/s. Instead, this
process's writes run on one writer connection, each inside its own SAVEPOINT of a shared
transaction (a *group*): a request that fails rolls back to its savepoint, undoing its own
writes and nobody else's. When a request ends and other writers are already queued for the
connection, the transaction is left open for them; the last one (or the `GROUP_MAX`-th) commits
for all. Every request, failed or not, returns only after the COMMIT of its group returned, i.e.
after the fsync: nothing is acknowledged that a crash could take back. Should that COMMIT (or a
savepoint rollback) fail, every member of the group gets the error; none was acknowledged. A
group forms only from writers that queued while another one was writing, so a lone writer pays
exactly what it did before (one transaction, one commit). Deleted memories stay as
tombstones in `memories` (content dropped) so the changes feed can report a deletion with the
memory's last path even after its versions are redacted. TEXT compares with SQLite's BINARY
collation: byte order of UTF-8, as the rules need.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memfs.service import schema
from memfs.service.backend import DatabaseError, WouldBlock
from memfs.service.sql_tx import HeldRead, SqlTx

SCHEMA_VERSION = schema.latest(schema.SQLITE)


# Idle read connections kept: as many as there can be reads at once (anyio runs at most 40 worker
# threads). With 8, a burst of 32 concurrent list pages closed and reopened connections all the
# time (sqlite3.connect and its PRAGMAs were ~5 % of the service's CPU in a hosted tick, py-spy).
_POOL_IDLE_MAX = 40
# Requests per group commit at most: the write lock is held for the whole group, and a writer in
# another process on the same file waits for it (busy_timeout), so a group must end.
GROUP_MAX = 64


class WriteGroupFailed(RuntimeError):
    """The shared transaction of a group commit could not be committed (or rolled back to a
    request's savepoint): every request in it failed, none was acknowledged."""


class _Group:
    """One shared write transaction and the requests inside it."""

    def __init__(self) -> None:
        self.members = 0
        self.done = threading.Event()  # set once the group's COMMIT (or ROLLBACK) returned
        self.error: BaseException | None = None


class SqliteTx(SqlTx):
    integrity_errors = (sqlite3.IntegrityError,)
    # the planner would otherwise scan the store's tombstones too (PERFORMANCE.md)
    count_live_from = "memories INDEXED BY memories_live_path"
    live_totals_from = "memories INDEXED BY memories_live_size"

    def _tuples(self, sql: str, args) -> list[tuple]:
        cur = self.c.cursor()
        cur.row_factory = None  # plain tuples: no sqlite3.Row per row
        return cur.execute(sql, args).fetchall()


class _HeldRead(SqliteTx, HeldRead):
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
        # group commit (module docstring): the writer connection, the one thread using it, the
        # writers queued for it, and the group whose transaction is open
        self._writer: sqlite3.Connection | None = None
        self._writer_lock = threading.Lock()
        self._queued = 0
        self._queued_lock = threading.Lock()
        self._group: _Group | None = None
        self.commits = 0  # transactions committed by write() (tests and measurements read it)
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
        self._wal(conn)
        # FULL: an acknowledged write survives power loss too, not only a process crash.
        conn.execute("PRAGMA synchronous = FULL")
        return conn

    def _wal(self, conn: sqlite3.Connection) -> None:
        """Switch a new database to WAL. The switch takes an exclusive lock, and SQLite answers
        "database is locked" at once, without its busy handler, when other connections opening
        the same fresh file at that moment hold theirs (replicas starting together): asked again
        until the busy timeout has passed."""
        deadline = time.monotonic() + self._busy_timeout_s
        delay = 0.005
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

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
        # The transaction may be shared with other requests (group commit, module docstring).
        with self._queued_lock:
            self._queued += 1
        self._writer_lock.acquire()
        with self._queued_lock:
            self._queued -= 1
        try:
            conn, group = self._join_group()
        except BaseException:
            self._abandon_turn()
            raise
        try:
            conn.execute("SAVEPOINT request")
        except BaseException as exc:
            self._end_turn(conn, group, abort=exc)
            self._await(group)
            raise
        try:
            yield SqliteTx(conn)
        except BaseException as failure:
            self._end_turn(conn, group, undo=True)
            self._await(group, failure)
            raise
        self._end_turn(conn, group)
        self._await(group)

    def _join_group(self) -> tuple[sqlite3.Connection, _Group]:
        """The writer connection and the open group, a new one if none (holding `_writer_lock`)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("storage is closed")
        if self._writer is None:
            self._writer = self._connect()
        if self._group is None:
            self._writer.execute("BEGIN IMMEDIATE")
            self._group = _Group()
        self._group.members += 1
        return self._writer, self._group

    def _abandon_turn(self) -> None:
        """A writer that could not join (storage closed, no connection, BEGIN refused): a group
        left open for it must not stay open, so it is committed now. Releases `_writer_lock`."""
        try:
            if self._group is not None and self._writer is not None:
                self._commit(self._writer, self._group)
        finally:
            self._writer_lock.release()

    def _end_turn(
        self,
        conn: sqlite3.Connection,
        group: _Group,
        *,
        undo: bool = False,
        abort: BaseException | None = None,
    ) -> None:
        """The end of one request's turn on the writer: keep or undo its savepoint, then commit the
        group unless queued writers will join it. Releases `_writer_lock`."""
        try:
            if abort is None:
                try:
                    if undo:
                        conn.execute("ROLLBACK TO request")
                    conn.execute("RELEASE request")
                except BaseException as exc:  # the transaction is in a state we cannot vouch for
                    abort = exc
            if abort is not None:
                self._finish_group(conn, group, abort)
                return
            with self._queued_lock:
                others_queued = self._queued > 0
            if others_queued and group.members < GROUP_MAX:
                return  # the last of them commits for everyone
            self._commit(conn, group)
        finally:
            self._writer_lock.release()

    def _commit(self, conn: sqlite3.Connection, group: _Group) -> None:
        try:
            conn.execute("COMMIT")
        except BaseException as exc:
            self._finish_group(conn, group, exc)
            return
        self.commits += 1
        self._finish_group(conn, group, None)

    def _finish_group(self, conn: sqlite3.Connection, group: _Group, error: BaseException | None) -> None:
        if error is not None:
            group.error = error
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except BaseException:  # the connection is unusable: the next writer opens another
                self._writer = None
                conn.close()
        self._group = None
        group.done.set()

    @staticmethod
    def _await(group: _Group, failure: BaseException | None = None) -> None:
        """Wait until the group's transaction ended; raise if it did not commit. A request that
        failed on its own raises its own error (by the caller) only when the group committed:
        its answer may rest on the other members' writes."""
        group.done.wait()
        if group.error is not None:
            raise WriteGroupFailed(
                f"the write transaction could not be committed: {type(group.error).__name__}: {group.error}"
            ) from (failure or group.error)

    @contextmanager
    def read(self) -> Iterator[SqliteTx]:
        # One read transaction: every query inside sees the same snapshot of the database.
        with self._conn() as conn, _read_tx(conn) as tx:
            yield tx

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
            with _read_tx(conn) as tx:
                yield tx
        except sqlite3.OperationalError as e:
            raise WouldBlock(str(e)) from None

    def open_read(self) -> _HeldRead:
        return _HeldRead(self._connect())

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            try:
                statements = schema.pending(schema.SQLITE, version, SCHEMA_VERSION)
            except DatabaseError as e:
                raise DatabaseError(f"{self.path}: {e}") from None
            for stmt in statements:
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
        with self._writer_lock:  # after the writer in its turn (a group never stays open idle)
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()


@contextmanager
def _read_tx(conn: sqlite3.Connection) -> Iterator[SqliteTx]:
    """One read transaction on `conn`: every query inside sees the same snapshot of the database."""
    conn.execute("BEGIN")
    try:
        yield SqliteTx(conn)
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
