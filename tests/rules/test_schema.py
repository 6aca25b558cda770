"""The service's one schema list (memfs/service/schema.py), read without a database: what each
dialect renders, and the rules the list keeps. The databases themselves: tests/service/contract/
test_migrations.py (every backend, and the databases an earlier memfs wrote)."""

from __future__ import annotations

import pytest

from memfs.service import schema
from memfs.service.backend import DatabaseError

pytestmark = pytest.mark.timeout(10)


def test_each_dialect_numbers_only_its_own_steps():
    """SQLite's listing index is a step PostgreSQL does not run: the numbers stay what each backend
    wrote into its databases before the list (SQLite's 3 and 4, PostgreSQL's 3), whatever is
    appended later."""
    sqlite, postgres = schema.migrations(schema.SQLITE), schema.migrations(schema.POSTGRESQL)
    assert sqlite[2] == [
        "CREATE INDEX memories_live_listing ON memories (store_id, path, id, sha, size, version_id, "
        "created_at, updated_at, deleted_at) WHERE deleted_at IS NULL"
    ]
    assert sqlite[3] == ["CREATE INDEX versions_time ON versions (store_id, created_at, id)"]
    assert postgres[2] == [
        'CREATE INDEX versions_time ON versions (store_id, created_at, (id COLLATE "C"))',
        "CREATE UNLOGGED TABLE org_buckets (class TEXT PRIMARY KEY, tokens DOUBLE PRECISION NOT NULL, "
        "at DOUBLE PRECISION NOT NULL, took BOOLEAN NOT NULL)",
    ]


def test_a_neutral_type_renders_in_each_dialect():
    memories = next(i for i in schema.STEPS[0] if isinstance(i, schema.Table) and i.name == "memories")
    assert schema.render(memories, schema.SQLITE).startswith(
        "CREATE TABLE memories (id TEXT PRIMARY KEY, store_id TEXT NOT NULL, path TEXT NOT NULL, content TEXT,"
    )
    assert schema.render(memories, schema.POSTGRESQL).startswith(
        'CREATE TABLE memories (id TEXT COLLATE "C" PRIMARY KEY, store_id TEXT NOT NULL, '
        'path TEXT COLLATE "C" NOT NULL, content BYTEA,'
    )
    kv = next(i for i in schema.STEPS[0] if isinstance(i, schema.Table) and i.name == "store_kv")
    assert schema.render(kv, schema.SQLITE).endswith("value, PRIMARY KEY (store_id, key)) WITHOUT ROWID")
    assert schema.render(kv, schema.POSTGRESQL).endswith(
        "value BIGINT NOT NULL, PRIMARY KEY (store_id, key))"
    )


@pytest.mark.parametrize("dialect", schema.DIALECTS)
def test_every_index_names_columns_its_table_has_by_then(dialect):
    tables: dict[str, set[str]] = {}
    for step in schema.STEPS:
        for item in step:
            if item.only not in (None, dialect):
                continue
            if isinstance(item, schema.Table):
                assert item.name not in tables, f"{item.name} created twice"
                tables[item.name] = {c.name for c in item.columns}
                assert set(item.primary_key) <= tables[item.name]
                assert all(c.type in schema.TYPES for c in item.columns)
            else:
                names = {c.column if isinstance(c, schema.Bytewise) else c for c in item.columns}
                assert names <= tables.get(item.table, set()), f"{item.name}: {names - tables[item.table]}"


def test_pending_runs_what_is_missing_and_refuses_a_newer_schema():
    steps = schema.migrations(schema.POSTGRESQL)
    latest = schema.latest(schema.POSTGRESQL)
    assert schema.pending(schema.POSTGRESQL, 0, latest) == [s for step in steps for s in step]
    assert schema.pending(schema.POSTGRESQL, 2, latest) == steps[2]
    assert schema.pending(schema.POSTGRESQL, latest, latest) == []
    with pytest.raises(DatabaseError, match="schema version 4 is newer than this memfs supports \\(3\\)"):
        schema.pending(schema.POSTGRESQL, 4, latest)
    with pytest.raises(ValueError, match="unknown dialect"):
        schema.migrations("mysql")
