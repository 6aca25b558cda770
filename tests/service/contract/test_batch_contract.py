"""The batch write (memfs's extension) on every backend: one transaction, independent items.

Each item runs the rules of its single request in its own savepoint, in order: an item that
fails keeps none of its writes and changes nothing for the others; each item that writes is its
own version and counter step.
"""

from __future__ import annotations

import pytest

from memfs.service.rules import sha256_hex
from memfs.service.storage import (
    Actor,
    BatchCreate,
    BatchDelete,
    BatchUpdate,
    LimitExceeded,
    NotFound,
    PathConflict,
    PreconditionFailed,
    StoreArchived,
    VersionFilter,
)

pytestmark = pytest.mark.timeout(60)
A = Actor("api_actor", "apikey_test")


def new_store(storage, name: str = "b") -> str:
    return storage.create_store(name, "", {}).id


def counter(storage, sid: str) -> int:
    return storage.get_counters([sid])[sid]


def versions(storage, sid: str) -> list:
    return storage.list_versions(sid, filters=VersionFilter(), limit=100, after=None, with_content=True).items


def test_every_kind_in_one_batch_each_its_own_version_and_counter_step(storage):
    sid = new_store(storage)
    old = storage.create_memory(sid, "/old", "o", A, max_memories=100)
    gone = storage.create_memory(sid, "/gone", "g", A, max_memories=100)
    res = storage.write_batch(
        sid,
        [
            BatchCreate("/new", "n"),
            BatchUpdate(old.id, "o2", None, sha256_hex("o")),
            BatchUpdate(old.id, None, "/dir/renamed", sha256_hex("o2")),
            BatchDelete(gone.id, sha256_hex("g")),
        ],
        A,
        max_memories=100,
    )
    assert [o.error for o in res.outcomes] == [None] * 4
    created, updated, renamed, deleted = (o.memory for o in res.outcomes)
    assert created.path == "/new" and updated.content_sha256 == sha256_hex("o2")
    assert renamed.id == old.id and renamed.path == "/dir/renamed" and deleted is None
    assert res.counter == counter(storage, sid) == 6
    ops = sorted((v.operation, v.path) for v in versions(storage, sid))
    assert ops == sorted(
        [
            ("created", "/old"),
            ("created", "/gone"),
            ("created", "/new"),
            ("modified", "/old"),
            ("modified", "/dir/renamed"),
            ("deleted", "/gone"),
        ]
    )
    # the changes feed sees every step of the batch
    ch = storage.changes_since(sid, 2)
    assert {(c.operation, c.path) for c in ch.changes} == {
        ("upserted", "/new"),
        ("upserted", "/dir/renamed"),
        ("deleted", "/gone"),
    }


def test_a_failing_item_changes_nothing_for_the_others(storage):
    sid = new_store(storage)
    m = storage.create_memory(sid, "/m", "m", A, max_memories=100)
    res = storage.write_batch(
        sid,
        [
            BatchCreate("/a", "1"),
            BatchCreate("/a", "2"),  # taken by the item before: 409, as its single request
            BatchUpdate(m.id, "x", None, sha256_hex("not m")),  # precondition fails
            BatchCreate("/a/b", "3"),  # below the memory /a
            BatchDelete("mem_nosuch", None),
            BatchCreate("/c", "4"),
        ],
        A,
        max_memories=100,
    )
    errs = [type(o.error) if o.error else None for o in res.outcomes]
    assert errs == [None, PathConflict, PreconditionFailed, PathConflict, NotFound, None]
    assert res.outcomes[1].error.conflicting_memory_id == res.outcomes[0].memory.id
    assert storage.get_memory(sid, m.id).content == "m"
    # the counter stepped for the two creates only, nothing skipped
    assert counter(storage, sid) == 3
    assert sorted(v.path for v in versions(storage, sid)) == ["/a", "/c", "/m"]


def test_items_see_the_items_before_them(storage):
    sid = new_store(storage)
    a = storage.create_memory(sid, "/a", "a", A, max_memories=100)
    res = storage.write_batch(
        sid,
        [BatchDelete(a.id, None), BatchCreate("/a/b", "ab"), BatchUpdate(a.id, "again", None, None)],
        A,
        max_memories=100,
    )
    assert res.outcomes[0].error is None and res.outcomes[1].memory.path == "/a/b"
    assert isinstance(res.outcomes[2].error, NotFound)  # deleted by the first item


def test_a_no_op_update_is_no_step_and_a_landed_retry_is_200(storage):
    sid = new_store(storage)
    m = storage.create_memory(sid, "/m", "same", A, max_memories=100)
    res = storage.write_batch(
        sid,
        [BatchUpdate(m.id, "same", None, None), BatchUpdate(m.id, "same", None, sha256_hex("other"))],
        A,
        max_memories=100,
    )
    assert [o.error for o in res.outcomes] == [None, None]
    assert counter(storage, sid) == 1


def test_max_memories_counts_the_batch_own_creates(storage):
    sid = new_store(storage)
    res = storage.write_batch(sid, [BatchCreate(f"/f{i}", "x") for i in range(5)], A, max_memories=3)
    errs = [type(o.error) if o.error else None for o in res.outcomes]
    assert errs == [None, None, None, LimitExceeded, LimitExceeded]
    assert counter(storage, sid) == 3


def test_an_archived_store_refuses_creates_and_updates_not_deletes(storage):
    sid = new_store(storage)
    m = storage.create_memory(sid, "/m", "m", A, max_memories=100)
    n = storage.create_memory(sid, "/n", "n", A, max_memories=100)
    storage.archive_store(sid)
    res = storage.write_batch(
        sid,
        [BatchCreate("/x", "x"), BatchUpdate(m.id, "m2", None, None), BatchDelete(n.id, None)],
        A,
        max_memories=100,
    )
    errs = [type(o.error) if o.error else None for o in res.outcomes]
    assert errs == [StoreArchived, StoreArchived, None]


def test_an_unknown_store_fails_the_whole_batch(storage):
    with pytest.raises(NotFound):
        storage.write_batch("memstore_nosuch", [BatchCreate("/x", "x")], A, max_memories=100)


def test_a_database_failure_keeps_nothing_of_the_batch(storage, monkeypatch):
    """Not a rule's refusal: the batch fails whole and none of its items is kept."""
    sid = new_store(storage)
    from memfs.service import rules

    real = rules.StoreService._apply_item
    calls = []

    def failing(self, tx, store_id, item, actor, max_memories):
        calls.append(item)
        if len(calls) == 3:
            raise RuntimeError("the database went away (simulated)")
        return real(self, tx, store_id, item, actor, max_memories)

    monkeypatch.setattr(rules.StoreService, "_apply_item", failing)
    with pytest.raises(RuntimeError):
        storage.write_batch(sid, [BatchCreate(f"/f{i}", "x") for i in range(4)], A, max_memories=100)
    monkeypatch.undo()
    assert counter(storage, sid) == 0 and versions(storage, sid) == []
    assert storage.create_memory(sid, "/after", "x", A, max_memories=100).path == "/after"
