"""Schema migrations (memfs/service/schema.py): safe when several service processes start on one
empty database at once, and every database an earlier memfs wrote opens with its rows and ends
with the schema a new database gets."""

from __future__ import annotations

import re
import sqlite3
import threading
from pathlib import Path

import pytest

from memfs.service import postgres_backend, schema, sqlite_backend
from memfs.service.database import open_storage
from memfs.service.storage import Actor
from tests.service.dbcheck import rows

pytestmark = pytest.mark.timeout(90)

LEGACY = Path(__file__).parent / "legacy"


class _Db:  # what dbcheck.rows needs to know about a database
    def __init__(self, url: str, path=None):
        self.db_url = None if url.startswith("sqlite") else url
        self.db_path = path


def test_replicas_starting_together_migrate_once(db_url, tmp_path):
    opened, errors = [], []
    barrier = threading.Barrier(6)

    def start() -> None:
        try:
            barrier.wait(10)
            opened.append(open_storage(db_url))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert not errors, errors
        assert len(opened) == 6
        sid = opened[0].create_store("s", "", {}).id
        opened[3].create_memory(sid, "/a", "x", Actor("api_actor", "k"), max_memories=10)
        assert [s.get_counters([sid])[sid] for s in opened] == [1] * 6
        db = _Db(db_url, tmp_path / "contract.db")
        if db.db_url:
            assert rows(db, "SELECT version FROM memfs_schema") == [(postgres_backend.SCHEMA_VERSION,)]
        else:
            assert rows(db, "PRAGMA user_version") == [(sqlite_backend.SCHEMA_VERSION,)]
        # and a later start finds the schema current and changes nothing
        again = open_storage(db_url)
        assert again.get_counters([sid]) == {sid: 1}
        again.close()
    finally:
        for s in opened:
            s.close()


def test_a_version_1_database_is_upgraded_in_place(db_url, tmp_path, monkeypatch):
    """A database written before the covering indexes (schema 1) keeps its rows and gains them."""
    for module in (sqlite_backend, postgres_backend):
        monkeypatch.setattr(module, "SCHEMA_VERSION", 1)
    old = open_storage(db_url)
    try:
        sid = old.create_store("s", "", {}).id
        for path, content in (("/a", "aaa"), ("/b/c", "cc")):
            old.create_memory(sid, path, content, Actor("api_actor", "k"), max_memories=10)
    finally:
        old.close()
    monkeypatch.undo()
    new = open_storage(db_url)
    try:
        t = new.store_totals(sid)
        assert (t.counter, t.memories, t.bytes) == (2, 2, 5)
        db = _Db(db_url, tmp_path / "contract.db")
        if db.db_url:
            assert rows(db, "SELECT version FROM memfs_schema") == [(postgres_backend.SCHEMA_VERSION,)]
            names = rows(
                db, "SELECT indexname FROM pg_indexes WHERE tablename IN ('memories', 'session_resources')"
            )
        else:
            assert rows(db, "PRAGMA user_version") == [(sqlite_backend.SCHEMA_VERSION,)]
            names = rows(db, "SELECT name FROM sqlite_master WHERE type = 'index'")
            assert ("memories_live_listing",) in set(names)  # SQLite's only (schema 3)
        assert {("memories_live_size",), ("session_resources_store",)} <= set(names)
    finally:
        new.close()


def _schema_of(db_url: str, path: Path) -> list[tuple]:
    """What a database's catalog says of its tables, columns and indexes, in a form that does not
    depend on how a statement was spaced (SQLite keeps each CREATE's text as written)."""
    if db_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(db_url) as conn:
            columns = conn.execute(
                "SELECT table_name, column_name, data_type, collation_name, is_nullable, column_default "
                "FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, ordinal_position"
            ).fetchall()
            indexes = conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1"
            ).fetchall()
            tables = conn.execute(
                "SELECT relname, relpersistence FROM pg_class WHERE relkind = 'r' "
                "AND relnamespace = 'public'::regnamespace ORDER BY 1"
            ).fetchall()
        return [*columns, *indexes, *tables]
    with sqlite3.connect(path) as db:
        found = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall()
    spaced = (re.sub(r"\s*([(),])\s*", r"\1", re.sub(r"\s+", " ", sql or "")) for *_, sql in found)
    return [(*row[:3], text) for row, text in zip(found, spaced, strict=True)]


def _load_legacy(db_url: str, path: Path, backend_kind: str) -> None:
    script = next(LEGACY.glob(f"{backend_kind}-schema-*.sql")).read_text()
    if backend_kind == "postgresql":
        import psycopg

        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(script)  # a script, several statements: no parameters
    else:
        with sqlite3.connect(path) as db:
            db.executescript(script)


def test_a_database_written_before_the_one_schema_list_opens(db_url, tmp_path, backend_kind, request):
    """A database as the memfs before schema.py left it (each backend wrote its own schema then,
    and numbered its own versions: SQLite 4, PostgreSQL 3) opens at once: its rows are served,
    its version is what this memfs calls the same schema, and its catalog is a new database's."""
    path = tmp_path / "contract.db"
    _load_legacy(db_url, path, backend_kind)
    legacy = _schema_of(db_url, path)
    storage = open_storage(db_url)
    try:
        (store,) = storage.list_stores(
            limit=10, after=None, include_archived=False, created_gte=None, created_lte=None
        ).items
        assert store.name == "legacy notes"
        page = storage.list_memories(
            store.id, path_prefix="/", depth=0, limit=10, after=None, with_content=True
        )
        assert [(m.path, m.content) for m in page.items] == [("/b.md", "beta"), ("/notes/a.md", "alpha 2\n")]
        assert page.counter == 3
        storage.create_memory(store.id, "/c.md", "new", Actor("api_actor", "k"), max_memories=10)
        assert storage.store_totals(store.id).memories == 3
        assert len(storage.sessions_for_store(store.id)) == 1
    finally:
        storage.close()
    assert _schema_of(db_url, path) == legacy  # nothing to migrate: the list renders what was there
    db = _Db(db_url, path)
    marker = "SELECT version FROM memfs_schema" if db.db_url else "PRAGMA user_version"
    assert rows(db, marker) == [(schema.latest(backend_kind),)]
    fresh, fresh_path = _fresh(request, backend_kind, tmp_path)
    try:
        open_storage(fresh).close()
        assert _schema_of(fresh, fresh_path) == legacy
    finally:
        if backend_kind == "postgresql":
            request.getfixturevalue("pg_cluster").drop_database(fresh)


def _fresh(request, backend_kind: str, tmp_path: Path) -> tuple[str, Path]:
    """A second, empty database of the kind."""
    path = tmp_path / "fresh.db"
    if backend_kind == "postgresql":
        return request.getfixturevalue("pg_cluster").create_database("fresh"), path
    return f"sqlite:///{path}", path
