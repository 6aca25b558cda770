"""Seed a service database directly, before `memfs serve` starts on it (benchmarks, big tests).

Thousands of creates over HTTP are thousands of synchronous commits; this runs the service's own
create path (rules.StoreService) in one transaction per store instead, so the data is exactly what
the API would have written. One place for it: scripts/bench and the tests that need a large store
both call `seed_database`.

Only public names: the schema comes from `SqliteBackend` (opened once, which migrates the file, and
closed); the creates run on `_OneTransaction`, a `Backend` (memfs/service/backend.py) of its own
whose every write is part of the one transaction this module holds open.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class _OneTransaction:
    """The `Backend` protocol on one SQLite connection: `write` and `read` join the transaction the
    caller opened (BEGIN … COMMIT around a whole store), so a create costs no commit of its own."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    @contextmanager
    def write(self, *store_ids: str) -> Iterator:
        from memfs.service.sqlite_backend import SqliteTx

        yield SqliteTx(self.conn)

    @contextmanager
    def read(self) -> Iterator:
        from memfs.service.sqlite_backend import SqliteTx

        yield SqliteTx(self.conn)

    def open_read(self):
        raise NotImplementedError("seeding never streams a snapshot")

    def close(self) -> None:
        pass


def seed_database(db_path: Path, stores: dict[str, dict[str, str]], *, age_s: float = 0.0) -> dict[str, str]:
    """Create stores and memories through the service's own create paths (rules over SQLite),
    before the service starts; `age_s`: their versions dated that many seconds ago. One transaction per store, and a temporary (store_id, deleted_at)
    index that turns create_memory's live-count into an index scan; the index is dropped again
    before the service starts, so the benchmark runs against the stock schema. Returns
    name -> store id."""
    from memfs.service.rules import StoreService
    from memfs.service.sqlite_backend import SqliteBackend
    from memfs.service.storage import Actor

    SqliteBackend(db_path).close()  # creates and migrates the schema, as `memfs serve` would
    conn = sqlite3.connect(str(db_path), isolation_level=None)
    conn.row_factory = sqlite3.Row
    s = StoreService(_OneTransaction(conn))
    actor = Actor("api_actor", "bench-seed")
    ids: dict[str, str] = {}
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("CREATE INDEX IF NOT EXISTS bench_seed_live ON memories (store_id, deleted_at)")
        for name, contents in stores.items():
            conn.execute("BEGIN IMMEDIATE")
            try:
                st = s.create_store(name, "benchmark data", {})
                for path, text in contents.items():
                    s.create_memory(st.id, path, text, actor, max_memories=10_000, backdate_s=age_s)
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            ids[name] = st.id
        conn.execute("DROP INDEX bench_seed_live")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return ids
