"""Schema migrations are safe when several service processes start on one empty database at once."""

from __future__ import annotations

import threading

import pytest

from memfs.service import postgres_storage, sqlite_storage
from memfs.service.database import open_storage
from memfs.service.storage import Actor
from tests.service.dbcheck import rows

pytestmark = pytest.mark.timeout(90)


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
            assert rows(db, "SELECT version FROM memfs_schema") == [(postgres_storage.SCHEMA_VERSION,)]
        else:
            assert rows(db, "PRAGMA user_version") == [(sqlite_storage.SCHEMA_VERSION,)]
        # and a later start finds the schema current and changes nothing
        again = open_storage(db_url)
        assert again.get_counters([sid]) == {sid: 1}
        again.close()
    finally:
        for s in opened:
            s.close()


def test_a_version_1_database_is_upgraded_in_place(db_url, tmp_path, monkeypatch):
    """A database written before the covering indexes (schema 1) keeps its rows and gains them."""
    for module in (sqlite_storage, postgres_storage):
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
            assert rows(db, "SELECT version FROM memfs_schema") == [(postgres_storage.SCHEMA_VERSION,)]
            names = rows(
                db, "SELECT indexname FROM pg_indexes WHERE tablename IN ('memories', 'session_resources')"
            )
        else:
            assert rows(db, "PRAGMA user_version") == [(sqlite_storage.SCHEMA_VERSION,)]
            names = rows(db, "SELECT name FROM sqlite_master WHERE type = 'index'")
            assert ("memories_live_listing",) in set(names)  # SQLite's only (schema 3)
        assert {("memories_live_size",), ("session_resources_store",)} <= set(names)
    finally:
        new.close()
