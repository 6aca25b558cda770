"""memory_versions as the hosted API documents it, on every backend (no HTTP: `rules.StoreService`).

The order is `created_at` descending with `id` as the tie-break (not commit order): a version
recorded in the past (`backdate_s`, the emulator's --test-late-versions) is listed behind versions
committed before it, its memory's `updated_at` moves with it, and `created_at[gte]`/`[lte]` are
inclusive bounds on that time. Cursors walk that order without a gap or a repeat.
"""

from __future__ import annotations

import pytest

from memfs.service.storage import Actor, VersionFilter

pytestmark = pytest.mark.timeout(60)
A = Actor("api_actor", "apikey_test")


def versions(storage, sid: str, limit: int = 2, **filters) -> list:
    out, after = [], None
    while True:
        page = storage.list_versions(sid, filters=VersionFilter(**filters), limit=limit, after=after,
                                     with_content=False)  # fmt: skip
        out += page.items
        if page.next_after is None:
            return out
        after = page.next_after


def test_a_backdated_version_is_listed_by_its_time_behind_later_ones(storage):
    sid = storage.create_store("s", "", {}).id
    a = storage.create_memory(sid, "/a", "1", A, max_memories=100)
    b = storage.create_memory(sid, "/b", "1", A, max_memories=100)
    # committed last, recorded an hour ago: a commit that lands behind the readers' window
    late = storage.update_memory(
        sid, a.id, content="2", path=None, expected_sha256=None, actor=A, backdate_s=3600
    )
    c = storage.create_memory(sid, "/c", "1", A, max_memories=100)
    listed = versions(storage, sid, limit=1)
    assert [(v.memory_id, v.operation) for v in listed] == [
        (c.id, "created"), (b.id, "created"), (a.id, "created"), (a.id, "modified")
    ]  # fmt: skip
    v_late = listed[-1]
    assert v_late.id == late.memory_version_id
    assert late.updated_at == v_late.created_at < a.created_at  # the memory's updated_at moved too
    assert storage.get_memory(sid, a.id).updated_at == v_late.created_at
    # inclusive bounds on created_at find it exactly
    at = v_late.created_at
    assert [v.id for v in versions(storage, sid, created_gte=at, created_lte=at)] == [v_late.id]
    assert v_late.id not in [v.id for v in versions(storage, sid, created_gte=a.created_at)]
    assert [v.id for v in versions(storage, sid, created_lte=a.created_at)] == [
        a.memory_version_id, v_late.id
    ]  # fmt: skip
    # a backdated create and delete: their times (and the memory's) are in the past too
    d = storage.create_memory(sid, "/d", "x", A, max_memories=100, backdate_s=60)
    assert d.created_at == d.updated_at < c.created_at
    storage.delete_memory(sid, b.id, expected_sha256=None, actor=A, backdate_s=120)
    ops = [(v.memory_id, v.operation) for v in versions(storage, sid, limit=3)]
    assert ops.index((c.id, "created")) < ops.index((d.id, "created")) < ops.index((b.id, "deleted"))
    assert ops[-1] == (a.id, "modified")


def test_equal_times_are_ordered_by_id_descending_and_paged_without_gaps(storage, backend):
    sid = storage.create_store("s", "", {}).id
    mems = [storage.create_memory(sid, f"/m{i}", "x", A, max_memories=100) for i in range(7)]
    # Seven versions at one instant (the tie-break decides everything): set their time directly.
    with backend.write(sid) as tx:
        tx._x("UPDATE versions SET created_at = ? WHERE store_id = ?", ("2026-01-01T00:00:00.000000Z", sid))
    want = sorted((m.memory_version_id for m in mems), reverse=True)  # byte order, on both backends
    for limit in (1, 2, 3, 100):
        assert [v.id for v in versions(storage, sid, limit=limit)] == want


def test_rename_delete_and_redaction_records(storage):
    sid = storage.create_store("s", "", {}).id
    m = storage.create_memory(sid, "/old", "body", A, max_memories=100)
    storage.update_memory(sid, m.id, content=None, path="/new", expected_sha256=None, actor=A)
    storage.delete_memory(sid, m.id, expected_sha256=None, actor=A)
    deleted, renamed, created = versions(storage, sid, memory_id=m.id)
    # a rename is a `modified` version at the new path, content unchanged
    assert (renamed.operation, renamed.path, renamed.content_sha256) == (
        "modified",
        "/new",
        created.content_sha256,
    )
    # a delete keeps the path; content, sha and size are null
    assert (deleted.operation, deleted.path) == ("deleted", "/new")
    assert (deleted.content, deleted.content_sha256, deleted.content_size_bytes) == (None, None, None)
    # the memory_id filter still finds them after the delete; a redacted version keeps memory_id
    r = storage.redact_version(sid, created.id, A)
    assert r.memory_id == m.id and r.path is None and r.content is None and r.redacted_at
    assert [v.id for v in versions(storage, sid, memory_id=m.id)] == [deleted.id, renamed.id, created.id]
    assert [v.id for v in versions(storage, sid, operation="modified")] == [renamed.id]
