"""PostgreSQL backend of the store service (docs/SEMANTICS.md#d-storage): several `memfs serve` on one database.

psycopg 3 with its connection pool, blocking API, called from worker threads like SQLite's. The
statements are SQLite's (`sql_tx.SqlTx`); what is PostgreSQL's own:

- **Per-store writers.** `write(store_id)` takes `pg_advisory_xact_lock` on the store id (a
  64-bit hash of it) before anything else, so the rules' check-then-write sees every earlier
  commit to that store and no other writer to it can slip in; writers to other stores take
  other locks and never wait on each other. The counter row (`store_kv`) is bumped in the same
  transaction (`INSERT … ON CONFLICT DO UPDATE … RETURNING`), so it never skips or repeats.
- **Reads** are `REPEATABLE READ READ ONLY`: one snapshot for a listing page, its counter
  header and a streamed snapshot (a server-side cursor on its own pooled connection).
- **Byte-order paths**: every compared or sorted text column is `COLLATE "C"`, whatever the
  database's locale (schema.py's `bytewise` columns).
- **Content** is `bytea` (UTF-8): PostgreSQL text cannot hold NUL, memory content may.
- **Migrations** run under a transaction-scoped advisory lock, so replicas starting together
  apply each one exactly once; the version lives in `memfs_schema`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import dict_row, tuple_row

from memfs.service import schema
from memfs.service.backend import DatabaseError
from memfs.service.sql_tx import _MEM_COLS, COUNTER_KEY, HeldRead, SqlTx

WATCH_CHANNEL = "memfs_counters"  # watch.CHANNEL (not imported: watch.py imports anyio)

SCHEMA_VERSION = schema.latest(schema.POSTGRESQL)
_MIGRATION_LOCK = 0x6D656D6673  # "memfs": the advisory lock key of schema migrations
_POOL_MAX = 16

# `sql_tx.counters_batch_query` with arrays for its lists: every batch, whatever its number of
# stores, is one of two statements (admin reads only, or with tokens to check), so each is
# prepared once per connection and psycopg converts it once. With a generic plan (the fast
# path's connections force it: for `= ANY($n)` PostgreSQL otherwise plans every execution anew,
# as the length of the array might change the plan — it does not here, every step is an
# index lookup) the server's CPU per statement was ~55-70 µs instead of ~170 µs unprepared.
_COUNTERS_OF_STORES = (
    "SELECT s.id, COALESCE((SELECT kv.value FROM store_kv kv WHERE kv.store_id = s.id "
    "AND kv.key = %(key)s), 0), CAST(NULL AS TEXT) FROM stores s WHERE s.id = ANY(%(ids)s::text[])"
)
COUNTERS_BATCH = _COUNTERS_OF_STORES
COUNTERS_BATCH_TOKENS = (
    _COUNTERS_OF_STORES + " UNION ALL SELECT r.memory_store_id, 0, se.token_hash FROM session_resources r "
    "JOIN sessions se ON se.id = r.session_id WHERE se.token_hash = ANY(%(tokens)s::text[]) "
    "AND se.archived_at IS NULL AND r.memory_store_id = ANY(%(ids)s::text[])"
)


def text_array(items) -> str:
    """A `text[]` literal of `items`, every element quoted (so a comma, a brace or a space in an
    id is data): cheaper than psycopg's list dumper, which inspects each element's type."""
    return "{" + ",".join('"' + i.replace("\\", "\\\\").replace('"', '\\"') + '"' for i in items) + "}"


def counters_batch_statement(token_hashes, store_ids) -> tuple[str, dict[str, str]]:
    args = {"key": COUNTER_KEY, "ids": text_array(store_ids)}
    if not token_hashes:
        return COUNTERS_BATCH, args
    args["tokens"] = text_array(token_hashes)
    return COUNTERS_BATCH_TOKENS, args


def counters_batch_from_tuples(rows) -> tuple[dict[str, int], dict[str, set[str]]]:
    """`sql_tx.counters_batch_from_rows` for the (id, counter, token_hash) tuples of COUNTERS_BATCH."""
    counters: dict[str, int] = {}
    attached: dict[str, set[str]] = {}
    for sid, counter, token_hash in rows:
        if token_hash is None:
            counters[sid] = counter
        else:
            attached.setdefault(token_hash, set()).add(sid)
    return counters, attached


class PostgresTx(SqlTx):
    integrity_errors = (psycopg.errors.UniqueViolation,)
    not_id = "id IS DISTINCT FROM ?"
    version_id = 'id COLLATE "C"'

    def _sql(self, sql: str) -> str:
        # The shared statements hold no literal '?' or '%': only placeholders to rewrite.
        return sql.replace("?", "%s")

    def _content_in(self, text: str | None):
        return None if text is None else text.encode("utf-8")

    def bump(self, store_id: str) -> int:
        value = super().bump(store_id)
        # Delivered at commit (and only then) to every replica's LISTEN connection: watch.py.
        self.c.execute("SELECT pg_notify(%s, %s)", (WATCH_CHANNEL, f"{store_id}:{value}"))
        return value

    def delete_store(self, store_id: str) -> None:
        super().delete_store(store_id)
        # No counter any more: held watches on it wake and answer 404.
        self.c.execute("SELECT pg_notify(%s, %s)", (WATCH_CHANNEL, f"{store_id}:"))

    def _content_out(self, value) -> str | None:
        return None if value is None else bytes(value).decode("utf-8")


class _HeldRead(PostgresTx, HeldRead):
    """A REPEATABLE READ transaction on a pooled connection, held until close() (a snapshot)."""

    def __init__(self, pool: psycopg_pool.ConnectionPool):
        self._pool = pool
        conn = pool.getconn()
        try:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        except BaseException:
            pool.putconn(conn)
            raise
        super().__init__(conn)

    def live_batches(self, store_id: str, n: int) -> Iterator[list]:
        # A server-side cursor: the store is streamed, never held whole in this process.
        cur = self.c.cursor(name="memfs_snapshot")
        cur.execute(
            self._sql(
                f"SELECT {_MEM_COLS}, content FROM memories WHERE store_id = ? AND deleted_at IS NULL ORDER BY path"
            ),
            (store_id,),
        )
        while rows := cur.fetchmany(n):
            yield [self._memory(r, True) for r in rows]

    def close(self) -> None:
        conn, self.c = self.c, None
        if conn is not None:
            try:
                if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    conn.execute("ROLLBACK")
            finally:
                self._pool.putconn(conn)


# orglimit.py's token bucket as one row per class. `level` is the bucket refilled up to now (never
# drained by a clock that steps back, capped at the burst); a token is taken when one is there.
_LEVEL = "LEAST(%(burst)s, b.tokens + GREATEST(0, EXCLUDED.at - b.at) * %(rate)s)"
_ORG_TAKE = (
    "INSERT INTO org_buckets AS b (class, tokens, at, took) "
    "SELECT %(cls)s, %(burst)s - 1, extract(epoch FROM clock_timestamp())::float8, true "
    f"ON CONFLICT (class) DO UPDATE SET tokens = {_LEVEL} - CASE WHEN {_LEVEL} >= 1 THEN 1 ELSE 0 END, "
    f"at = GREATEST(b.at, EXCLUDED.at), took = {_LEVEL} >= 1 RETURNING took, tokens"
)


class PostgresBackend:
    def __init__(self, url: str, *, pool_max: int = _POOL_MAX, connect_timeout_s: float = 15.0):
        self.url = url
        # autocommit: we issue BEGIN/COMMIT ourselves, with the isolation level each use needs.
        self._pool = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=pool_max,
            kwargs={"autocommit": True, "row_factory": dict_row},
            open=False,
            name="memfs",
        )
        self._closed = threading.Event()
        try:
            # One direct connection first: an unreachable database fails at once with libpq's own
            # reason, instead of the pool's retries ending in "initialization incomplete".
            psycopg.connect(url, connect_timeout=max(1, int(connect_timeout_s))).close()
            self._pool.open(wait=True, timeout=connect_timeout_s)
            self._migrate()
        except DatabaseError:
            self._pool.close()
            raise
        except (psycopg.Error, psycopg_pool.PoolTimeout) as e:
            self._pool.close()
            raise DatabaseError(f"cannot use the PostgreSQL database: {e}") from None

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[psycopg.Connection[Any]]:  # rows are dicts: dict_row
        with self._pool.connection() as conn:
            conn.execute(begin)
            try:
                yield conn
            except BaseException:
                if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def write(self, *store_ids: str) -> Iterator[PostgresTx]:
        with self._transaction("BEGIN") as conn:
            # Writers to one store queue here; a hash collision only makes two stores share a queue.
            # Several stores (a session attaching them) are locked in one order: no deadlock.
            # An id with NUL names no store (ids never hold one) and cannot be a text parameter:
            # it is not locked, and the rules' lookup answers "not found" as on SQLite.
            for store_id in sorted({s for s in store_ids if "\x00" not in s}):
                conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (store_id,))
            yield PostgresTx(conn)

    @contextmanager
    def read(self) -> Iterator[PostgresTx]:
        with self._transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") as conn:
            yield PostgresTx(conn)

    def open_read(self) -> _HeldRead:
        return _HeldRead(self._pool)

    def org_take(self, cls: str, rate: float, burst: int) -> float | None:
        """Take one token from the organisation's `cls` bucket, shared by every replica: one
        statement (its own transaction) that refills the row by the database's clock, takes a
        token if there is one, and says whether it did. None: taken; else seconds until one is."""
        with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=tuple_row)
            row = cur.execute(_ORG_TAKE, {"cls": cls, "rate": float(rate), "burst": float(burst)}).fetchone()
        assert row is not None
        took, tokens = row
        return None if took else (1.0 - tokens) / rate

    def async_counter_reader(self) -> AsyncCounterReader:
        return AsyncCounterReader(self.url)

    def _migrate(self) -> None:
        with self._transaction("BEGIN") as conn:
            # Replicas starting at once queue here; each sees the version the previous one left.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS memfs_schema (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM memfs_schema").fetchone()
            version = row["version"] if row else 0
            for stmt in schema.pending(schema.POSTGRESQL, version, SCHEMA_VERSION):
                conn.execute(stmt)
            if row is None:
                conn.execute("INSERT INTO memfs_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
            else:
                conn.execute("UPDATE memfs_schema SET version = %s", (SCHEMA_VERSION,))

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._pool.close()


class AsyncCounterReader:
    """The counter fast path's reads on asyncio (uvicorn): psycopg's async API, no worker thread.

    A hop to a worker thread and back costs ~120 µs here and the blocking path's transaction four
    round trips; this runs the fast path's one statement (COUNTERS_BATCH, prepared; autocommit:
    one statement is one snapshot) on a few connections of its own, opened on first use on the
    running loop, each with one cursor kept for its life. Only on asyncio: under trio (the app in
    process, in tests) `available()` is False and the caller uses the worker-thread path. A
    connection that fails is dropped and the error raised: the caller then answers through the
    full path.
    """

    SIZE = 4  # counter_path sends at most MAX_STATEMENTS_OUT (2) at once; a margin, opened lazily

    def __init__(self, url: str):
        self.url = url
        self._idle: list[psycopg.AsyncCursor[Any]] = []  # a cursor of each idle connection
        self._opened = 0
        self._waiting = 0  # tasks waiting for a connection (all SIZE in use)
        self._free: asyncio.Condition | None = None  # made on the loop

    @staticmethod
    def available() -> bool:
        import sniffio

        try:
            return sniffio.current_async_library() == "asyncio"
        except sniffio.AsyncLibraryNotFoundError:
            return False

    def _condition(self) -> asyncio.Condition:
        if self._free is None:
            self._free = asyncio.Condition()
        return self._free

    async def _get(self) -> psycopg.AsyncCursor[Any]:
        if self._idle:  # the common case: no lock, no wait
            return self._idle.pop()
        free = self._condition()
        async with free:
            self._waiting += 1
            try:
                while not self._idle and self._opened >= self.SIZE:
                    await free.wait()
            finally:
                self._waiting -= 1
            if self._idle:
                return self._idle.pop()
            self._opened += 1
        conn = None
        try:
            # tuple rows: the three columns are read by position, no dict per row
            conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
            await conn.execute("SET plan_cache_mode = force_generic_plan")  # see COUNTERS_BATCH
            return conn.cursor()
        except BaseException:
            self._opened -= 1
            if conn is not None:
                await conn.close()
            raise

    async def _put(self, cur: psycopg.AsyncCursor[Any], ok: bool) -> None:
        if ok and not cur.connection.closed:
            self._idle.append(cur)
        else:
            self._opened -= 1
            await cur.connection.close()
        if self._waiting:
            free = self._condition()
            async with free:
                free.notify()

    async def counters_batch(self, token_hashes, store_ids) -> tuple[dict[str, int], dict[str, set[str]]]:
        cur = await self._get()
        ok = False
        try:
            await cur.execute(*counters_batch_statement(token_hashes, store_ids), prepare=True)
            rows = await cur.fetchall()
            ok = True
        finally:
            await self._put(cur, ok)
        return counters_batch_from_tuples(rows)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for cur in idle:
            await cur.connection.close()
