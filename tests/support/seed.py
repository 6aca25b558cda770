"""Seed a service database directly, before `memfs serve` starts on it (benchmarks, big tests).

Thousands of creates over HTTP are thousands of synchronous commits; this runs the service's own
create path (rules.StoreService over the SQLite backend) in one transaction per store instead, so
the data is exactly what the API would have written. One place for it: scripts/bench and the tests
that need a large store both call `seed_database`.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path


def seed_database(db_path: Path, stores: dict[str, dict[str, str]]) -> dict[str, str]:
    """Create stores and memories through the service's own create paths (rules over the SQLite
    backend), before the service starts. One transaction per store, and a temporary
    (store_id, deleted_at) index that turns create_memory's live-count into an index scan; the
    index is dropped again before the service starts, so the benchmark runs against the stock
    schema. Returns name -> store id."""
    from memfs.service.rules import StoreService
    from memfs.service.sqlite_storage import SqliteBackend, SqliteTx
    from memfs.service.storage import Actor

    class Seeder(SqliteBackend):
        _bulk = None

        @contextmanager
        def write(self, *store_ids):
            if self._bulk is None:
                with super().write(*store_ids) as tx:
                    yield tx
            else:
                yield SqliteTx(self._bulk)

    backend = Seeder(db_path)
    s = StoreService(backend)
    actor = Actor("api_actor", "bench-seed")
    ids: dict[str, str] = {}
    with backend._conn() as c:
        c.execute("CREATE INDEX IF NOT EXISTS bench_seed_live ON memories (store_id, deleted_at)")
        c.execute("PRAGMA synchronous = OFF")
        for name, contents in stores.items():
            c.execute("BEGIN IMMEDIATE")
            backend._bulk = c
            try:
                st = s.create_store(name, "benchmark data", {})
                for path, text in contents.items():
                    s.create_memory(st.id, path, text, actor, max_memories=10_000)
                c.execute("COMMIT")
            finally:
                backend._bulk = None
            ids[name] = st.id
        c.execute("DROP INDEX bench_seed_live")
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    return ids
