"""What every backend must honour under the service's rules, run in-process on SQLite and PostgreSQL.

No HTTP here: `storage` is `rules.StoreService` over a fresh database. The HTTP suite around this
directory checks the wire; this one checks the storage promises of docs/SEMANTICS.md#d-api to #d-storage that a new
backend could break: the counter in the writing transaction, byte-order paths, conflicts, the
changes feed, the snapshot at one counter, versions, redaction, sessions, per-store writers.
"""

from __future__ import annotations

import threading

import pytest

from memfs.service.rules import sha256_hex
from memfs.service.storage import (
    Actor,
    Invalid,
    LimitExceeded,
    NotFound,
    PathConflict,
    PreconditionFailed,
    PrefixRecord,
    ResourceSpec,
    StoreArchived,
    VersionFilter,
)

pytestmark = pytest.mark.timeout(60)
A = Actor("api_actor", "apikey_test")
S = Actor("session_actor", "sesn_test")


def new_store(storage, name: str = "s"):
    return storage.create_store(name, "", {}).id


def create(storage, sid: str, path: str, content: str = "x", actor: Actor = A, max_memories: int = 1000):
    return storage.create_memory(sid, path, content, actor, max_memories=max_memories)


def counter(storage, sid: str) -> int:
    return storage.get_counters([sid])[sid]


def all_versions(storage, sid: str, **filters) -> list:
    out, after = [], None
    while True:
        page = storage.list_versions(
            sid, filters=VersionFilter(**filters), limit=7, after=after, with_content=True
        )
        out += page.items
        if page.next_after is None:
            return out
        after = page.next_after


def listing(storage, sid: str, *, prefix: str = "/", depth: int = 0, limit: int = 3) -> list:
    out, after = [], None
    while True:
        page = storage.list_memories(
            sid, path_prefix=prefix, depth=depth, limit=limit, after=after, with_content=False
        )
        out += [("prefix", i.path) if isinstance(i, PrefixRecord) else i.path for i in page.items]
        if page.next_after is None:
            return out
        after = page.next_after


# --- the counter -----------------------------------------------------------------------------------


def test_counter_moves_once_per_versioned_write_and_never_otherwise(storage):
    sid = new_store(storage)
    other = new_store(storage, "other")
    assert counter(storage, sid) == 0  # a store never written reads 0
    m = create(storage, sid, "/a", "one")
    assert (counter(storage, sid), m.content) == (1, "one")
    storage.update_memory(sid, m.id, content="two", path=None, expected_sha256=None, actor=A)
    storage.update_memory(sid, m.id, content=None, path="/b", expected_sha256=None, actor=A)
    assert counter(storage, sid) == 3
    # a no-op (same content, same path) and a redaction write nothing the mount sees
    storage.update_memory(sid, m.id, content="two", path="/b", expected_sha256=None, actor=A)
    storage.redact_version(sid, all_versions(storage, sid)[-1].id, A)
    assert counter(storage, sid) == 3
    # refused writes leave the counter alone: their transaction rolled back
    create(storage, sid, "/c")
    for bad in (
        lambda: create(storage, sid, "/c"),
        lambda: create(storage, sid, "/c/d"),
        lambda: storage.update_memory(sid, m.id, content="z", path=None, expected_sha256="0" * 64, actor=A),
        lambda: storage.delete_memory(sid, m.id, expected_sha256="0" * 64, actor=A),
    ):
        with pytest.raises((PathConflict, PreconditionFailed)):
            bad()
    assert counter(storage, sid) == 4
    storage.delete_memory(sid, m.id, expected_sha256=None, actor=A)
    assert counter(storage, sid) == 5
    assert counter(storage, other) == 0  # per store
    # every version carries the counter of its write: one per write, in order
    assert [v.operation for v in reversed(all_versions(storage, sid))] == [
        "created", "modified", "modified", "created", "deleted"
    ]  # fmt: skip


def test_a_transaction_that_fails_after_the_bump_leaves_no_trace(storage, backend):
    sid = new_store(storage)
    create(storage, sid, "/a")
    with pytest.raises(RuntimeError):
        with backend.write(sid) as tx:
            assert tx.bump(sid) == 2
            raise RuntimeError("crash between the bump and the commit")
    assert counter(storage, sid) == 1
    assert create(storage, sid, "/b") and counter(storage, sid) == 2  # 2 is used once, not skipped


def test_concurrent_writers_never_skip_or_repeat_a_counter_value(storage):
    stores = [new_store(storage, f"s{i}") for i in range(2)]
    errors: list[BaseException] = []

    def writer(sid: str, n: int, tag: str) -> None:
        try:
            for i in range(n):
                m = create(storage, sid, f"/{tag}/{i}")
                storage.update_memory(sid, m.id, content=f"v{i}", path=None, expected_sha256=None, actor=A)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(sid, 15, f"w{k}")) for sid in stores for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(50)
    assert not errors, errors
    for sid in stores:
        assert counter(storage, sid) == 4 * 15 * 2
        ch = storage.changes_since(sid, 0)
        assert len(ch.changes) == 60
        # the feed from every point in between holds exactly the memories written after it
        for since in (0, 1, 59, 60, 119):
            got = storage.changes_since(sid, since)
            assert got.counter == 120 and not got.too_old
        assert len(storage.changes_since(sid, 120).changes) == 0


# --- paths -----------------------------------------------------------------------------------------


PATHS = ["/B", "/A", "/a-b", "/a/b", "/a/c/d", "/a0", "/b", "/z", "/é", "/ä/x", "/Z", "/a b", "/~"]


def test_paths_sort_in_byte_order_in_listings_pages_and_roll_ups(storage):
    sid = new_store(storage)
    for p in PATHS:
        create(storage, sid, p)
    expected = sorted(PATHS, key=lambda p: p.encode())
    assert listing(storage, sid) == expected
    assert listing(storage, sid, limit=1) == expected
    assert listing(storage, sid, depth=1, limit=2) == [
        "/A", "/B", "/Z", "/a b", "/a-b", ("prefix", "/a/"), "/a0", "/b", "/z", "/~", ("prefix", "/ä/"), "/é"
    ]  # fmt: skip
    assert listing(storage, sid, prefix="/a/") == ["/a/b", "/a/c/d"]
    assert listing(storage, sid, prefix="/a/", depth=1) == ["/a/b", ("prefix", "/a/c/")]
    page = storage.list_memories(sid, path_prefix="/", depth=0, limit=100, after=None, with_content=False)
    assert page.counter == len(PATHS)
    snap = storage.open_snapshot(sid)
    try:
        assert [m.path for m in snap.read(100)] == expected
    finally:
        snap.close()
    assert [c.path for c in storage.changes_since(sid, 0).changes] == expected


def test_a_depth_1_page_skips_large_subtrees_and_carries_each_childs_own_content(storage):
    """The depth=1 walk reads rows in chunks (listing._WALK_ROWS) without content: subtrees larger
    than a chunk, runs of direct children longer than one, and the full view's content, which
    must be each direct child's own, on every page."""
    sid = new_store(storage)
    paths = [f"/a/{i:03d}" for i in range(40)] + [f"/m{i:02d}" for i in range(30)]
    paths += [f"/n/{i:02d}/x" for i in range(20)] + ["/o", "/p/q"]
    for p in paths:
        create(storage, sid, p, content="content of " + p)
    tops = sorted({"/" + p.split("/")[1] + ("/" if p.count("/") > 1 else "") for p in paths})
    expected = [("prefix", t) if t.endswith("/") else t for t in tops]
    for limit in (1, 3, 7, 100):
        assert listing(storage, sid, depth=1, limit=limit) == expected
    got, after = [], None
    while True:
        page = storage.list_memories(sid, path_prefix="/", depth=1, limit=7, after=after, with_content=True)
        got += page.items
        if page.next_after is None:
            break
        after = page.next_after
    memories = [i for i in got if not isinstance(i, PrefixRecord)]
    assert [m.path for m in memories] == [t for t in tops if not t.endswith("/")]
    assert all(m.content == "content of " + m.path for m in memories)
    assert listing(storage, sid, prefix="/n/", depth=1, limit=6) == [
        ("prefix", f"/n/{i:02d}/") for i in range(20)
    ]


def test_path_conflicts_name_the_memory_in_the_documented_order(storage):
    sid = new_store(storage)
    a = create(storage, sid, "/a")
    deep = create(storage, sid, "/d/e/f")
    create(storage, sid, "/d/e/g")
    for path, named in (("/a", a), ("/a/b", a), ("/a/b/c", a), ("/d", deep), ("/d/e", deep)):
        with pytest.raises(PathConflict) as e:
            create(storage, sid, path)
        assert (e.value.conflicting_memory_id, e.value.conflicting_path) == (named.id, named.path), path
    # "/a-b" and "/a0" sort between "/a" and "/a/…": not below "/a"
    create(storage, sid, "/a-b")
    create(storage, sid, "/a0")
    # renames: never over another memory, but below the memory's own old path is fine
    with pytest.raises(PathConflict):
        storage.update_memory(sid, a.id, content=None, path="/d/e/f", expected_sha256=None, actor=A)
    moved = storage.update_memory(sid, a.id, content=None, path="/a/inner", expected_sha256=None, actor=A)
    assert moved.path == "/a/inner"
    # a deleted memory's path is free at once
    storage.delete_memory(sid, deep.id, expected_sha256=None, actor=A)
    assert create(storage, sid, "/d/e/f", "again").content == "again"


def test_preconditions_and_the_no_op_rule(storage):
    sid = new_store(storage)
    m = create(storage, sid, "/a", "one")
    one, two = sha256_hex("one"), sha256_hex("two")
    with pytest.raises(PreconditionFailed, match="not the expected"):
        storage.update_memory(sid, m.id, content="three", path=None, expected_sha256=two, actor=A)
    done = storage.update_memory(sid, m.id, content="two", path=None, expected_sha256=one, actor=A)
    # the same request again (a retry whose answer was lost): the store already holds it, 200
    again = storage.update_memory(sid, m.id, content="two", path=None, expected_sha256=one, actor=A)
    assert again.memory_version_id == done.memory_version_id and counter(storage, sid) == 2
    with pytest.raises(PreconditionFailed, match="nothing was deleted"):
        storage.delete_memory(sid, m.id, expected_sha256=one, actor=A)
    storage.delete_memory(sid, m.id, expected_sha256=two, actor=A)
    with pytest.raises(NotFound):
        storage.get_memory(sid, m.id)


def test_content_round_trips_byte_for_byte(storage):
    sid = new_store(storage)
    text = "nul \x00, tab \t, crlf \r\n, emoji 🧠, combining e\u0301, " + "x" * 100_000
    m = create(storage, sid, "/a", text)
    assert storage.get_memory(sid, m.id).content == text
    assert m.content_sha256 == sha256_hex(text) and m.content_size_bytes == len(text.encode())
    assert all_versions(storage, sid)[0].content == text


def test_max_memories_counts_live_memories_only(storage):
    sid = new_store(storage)
    a = create(storage, sid, "/a", max_memories=2)
    create(storage, sid, "/b", max_memories=2)
    with pytest.raises(LimitExceeded, match="--max-memories 2"):
        create(storage, sid, "/c", max_memories=2)
    storage.update_memory(sid, a.id, content="still editable", path=None, expected_sha256=None, actor=A)
    storage.delete_memory(sid, a.id, expected_sha256=None, actor=A)
    create(storage, sid, "/c", max_memories=2)


# --- changes feed and snapshot --------------------------------------------------------------------


def test_changes_feed_reports_current_state_renames_and_deletions(storage):
    sid = new_store(storage)
    keep = create(storage, sid, "/keep")
    moved = create(storage, sid, "/old")
    gone = create(storage, sid, "/gone")
    since = counter(storage, sid)  # 3
    storage.update_memory(sid, moved.id, content="new", path="/new", expected_sha256=None, actor=A)
    storage.delete_memory(sid, gone.id, expected_sha256=None, actor=A)
    reborn = create(storage, sid, "/gone", "reborn")
    born = create(storage, sid, "/born")
    storage.update_memory(sid, born.id, content=None, path="/born2", expected_sha256=None, actor=A)
    ch = storage.changes_since(sid, since)
    assert (ch.since, ch.counter, ch.too_old) == (3, 8, False)
    got = [(c.memory_id, c.operation, c.path, c.previous_path) for c in ch.changes]
    assert got == [
        (born.id, "upserted", "/born2", None),  # did not exist at `since`: no previous path
        (gone.id, "deleted", "/gone", None),  # a tombstone before the live memory at its path
        (reborn.id, "upserted", "/gone", None),
        (moved.id, "upserted", "/new", "/old"),
    ]
    assert keep.id not in {c.memory_id for c in ch.changes}
    new = next(c for c in ch.changes if c.memory_id == moved.id)
    assert (new.content_sha256, new.content_size_bytes) == (sha256_hex("new"), 3)
    dead = next(c for c in ch.changes if c.memory_id == gone.id)
    assert (dead.content_sha256, dead.content_size_bytes) == (None, None)
    # redacting the history does not lose the deletion or the rename from the feed
    for v in all_versions(storage, sid):
        storage.redact_version(sid, v.id, A)
    assert [(c.memory_id, c.operation, c.path) for c in storage.changes_since(sid, since).changes] == [
        (m, op, p) for m, op, p, _ in got
    ]
    for bad in (-1, 9):
        with pytest.raises(Invalid, match="between 0 and"):
            storage.changes_since(sid, bad)


def test_changes_in_full_view_carry_content_in_order_until_the_budget(storage):
    sid = new_store(storage)
    a = create(storage, sid, "/a", "aaaa")  # 4 bytes
    b = create(storage, sid, "/b", "é" * 3)  # 6 bytes: the budget counts bytes, not characters
    gone = create(storage, sid, "/c")
    d = create(storage, sid, "/d", "d")
    since = counter(storage, sid)
    for m, text in ((a, "AAAA"), (b, "ééé!"), (d, "DD")):
        storage.update_memory(sid, m.id, content=text, path=None, expected_sha256=None, actor=A)
    storage.delete_memory(sid, gone.id, expected_sha256=None, actor=A)
    # basic (the default): no content at all
    assert [c.content for c in storage.changes_since(sid, since).changes] == [None] * 4
    # full: every live memory's content, read with the sha it names
    ch = storage.changes_since(sid, since, full=True).changes
    assert [(c.path, c.content) for c in ch] == [("/a", "AAAA"), ("/b", "ééé!"), ("/c", None), ("/d", "DD")]
    assert all(c.content_sha256 == sha256_hex(c.content) for c in ch if c.content is not None)
    # in path order until the next would pass the budget (4 + 7 = 11 bytes; /d's 2 more would be
    # 13): the one past it and every one after carry none, the deleted one none anyway
    ch = storage.changes_since(sid, since, full=True, content_budget=12).changes
    assert [(c.path, c.content) for c in ch] == [("/a", "AAAA"), ("/b", "ééé!"), ("/c", None), ("/d", None)]
    ch = storage.changes_since(sid, since, full=True, content_budget=3).changes
    assert [c.content for c in ch] == [None] * 4
    # what the reader itself wrote last carries none (a mount has its own writes) and takes none
    # of the budget: another writer's edit of /b.md after it is carried
    other = Actor("session_actor", "sesn_other")
    storage.update_memory(sid, b.id, content="B", path=None, expected_sha256=None, actor=other)
    ch = storage.changes_since(sid, since, full=True, content_budget=1, reader=A).changes
    assert [(c.path, c.content) for c in ch] == [("/a", None), ("/b", "B"), ("/c", None), ("/d", None)]
    ch = storage.changes_since(sid, since, full=True, reader=other).changes
    assert [(c.path, c.content) for c in ch] == [("/a", "AAAA"), ("/b", None), ("/c", None), ("/d", "DD")]


def test_snapshot_is_the_store_at_one_counter(storage):
    sid = new_store(storage)
    mems = [create(storage, sid, f"/m{i:03}", f"c{i}") for i in range(25)]
    snap = storage.open_snapshot(sid)
    try:
        assert snap.counter == 25
        first = snap.read(10)
        # writes committed while it streams are not in it
        storage.update_memory(sid, mems[20].id, content="changed", path=None, expected_sha256=None, actor=A)
        storage.delete_memory(sid, mems[24].id, expected_sha256=None, actor=A)
        create(storage, sid, "/m999")
        rest = []
        while batch := snap.read(10):
            rest += batch
    finally:
        snap.close()
    got = first + rest
    assert [m.path for m in got] == [f"/m{i:03}" for i in range(25)]
    assert [m.content for m in got] == [f"c{i}" for i in range(25)]
    assert counter(storage, sid) == 28
    with pytest.raises(NotFound):
        storage.open_snapshot("memstore_missing")


# --- versions and redaction -----------------------------------------------------------------------


def test_versions_newest_first_with_filters_and_positions(storage):
    sid = new_store(storage)
    m = create(storage, sid, "/a", "1")
    storage.update_memory(sid, m.id, content="2", path=None, expected_sha256=None, actor=S)
    n = create(storage, sid, "/b", "b", actor=S)
    storage.delete_memory(sid, m.id, expected_sha256=None, actor=A)
    vs = all_versions(storage, sid)
    assert [(v.memory_id, v.operation, v.content) for v in vs] == [
        (m.id, "deleted", None), (n.id, "created", "b"), (m.id, "modified", "2"), (m.id, "created", "1")
    ]  # fmt: skip
    assert vs[0].path == "/a" and vs[0].content_sha256 is None
    assert [v.operation for v in all_versions(storage, sid, memory_id=m.id)] == [
        "deleted",
        "modified",
        "created",
    ]
    assert [v.memory_id for v in all_versions(storage, sid, session_id="sesn_test")] == [n.id, m.id]
    assert [v.operation for v in all_versions(storage, sid, api_key_id="apikey_test")] == [
        "deleted",
        "created",
    ]
    assert [v.operation for v in all_versions(storage, sid, operation="modified")] == ["modified"]
    first = storage.list_versions(sid, filters=VersionFilter(), limit=1, after=None, with_content=False)
    assert first.items[0].content is None and first.next_after is not None
    assert storage.get_version(sid, vs[1].id).content == "b"
    with pytest.raises(NotFound):
        storage.get_version(new_store(storage, "other"), vs[1].id)  # versions belong to their store


def test_redaction_nulls_content_and_path_once(storage):
    sid = new_store(storage)
    m = create(storage, sid, "/secret", "password")
    v = all_versions(storage, sid)[0]
    r1 = storage.redact_version(sid, v.id, S)
    assert (r1.content, r1.path, r1.content_sha256, r1.content_size_bytes) == (None, None, None, None)
    assert r1.redacted_by == S and r1.redacted_at
    r2 = storage.redact_version(sid, v.id, A)
    assert (r2.redacted_at, r2.redacted_by) == (r1.redacted_at, S)  # idempotent: the first one stays
    assert storage.get_memory(sid, m.id).content == "password"  # the memory itself is not changed


# --- stores and sessions --------------------------------------------------------------------------


def test_store_rules(storage):
    s = storage.create_store("n", "d", {"b": "1", "a": "2"})
    assert list(storage.get_store(s.id).metadata) == ["b", "a"]  # key order kept
    u = storage.update_store(s.id, name=None, description=None, metadata_patch={"b": None, "c": "3"})
    assert u.metadata == {"a": "2", "c": "3"}
    with pytest.raises(Invalid, match="at most 16"):
        storage.update_store(
            s.id, name=None, description=None, metadata_patch={f"k{i}": "v" for i in range(15)}
        )
    m = create(storage, s.id, "/a")
    storage.archive_store(s.id)
    with pytest.raises(StoreArchived):
        create(storage, s.id, "/b")
    with pytest.raises(StoreArchived):
        storage.update_memory(s.id, m.id, content="y", path=None, expected_sha256=None, actor=A)
    storage.delete_memory(s.id, m.id, expected_sha256=None, actor=A)  # archived: still deletable
    ids = [storage.create_store(f"s{i}", "", {}).id for i in range(5)]
    page = storage.list_stores(
        limit=2, after=None, include_archived=False, created_gte=None, created_lte=None
    )
    assert [x.id for x in page.items] == ids[::-1][:2]
    page2 = storage.list_stores(limit=10, after=page.next_after, include_archived=True, created_gte=None,
                                created_lte=None)  # fmt: skip
    assert [x.id for x in page2.items] == ids[::-1][2:] + [s.id]
    only = storage.list_stores(limit=10, after=None, include_archived=False, created_gte=None, created_lte=None,
                               only_ids=[ids[1], s.id])  # fmt: skip
    assert [x.id for x in only.items] == [ids[1]]
    storage.delete_store(s.id)
    with pytest.raises(NotFound):
        storage.get_memory(s.id, m.id)
    with pytest.raises(NotFound):
        storage.changes_since(s.id, 0)


def test_sessions_mount_paths_tokens_and_archive(storage):
    a = storage.create_store("Work Notes", "notes", {}).id
    b = storage.create_store("work  notes!", "", {}).id
    c = storage.create_store("Ünïcode", "", {}).id
    specs = [
        ResourceSpec(a, "read_write", None),
        ResourceSpec(b, "read_only", "be nice"),
        ResourceSpec(c, "read_write", None),
    ]
    s = storage.create_session(specs, token_hash="h1", title="t", metadata={"k": "v"})
    assert [r.mount_path for r in s.resources] == ["/mnt/memory/work-notes", "/mnt/memory/work-notes-2",
                                                   "/mnt/memory/n-code"]  # fmt: skip
    assert [(r.access, r.name, r.description, r.instructions) for r in s.resources][:2] == [
        ("read_write", "Work Notes", "notes", None), ("read_only", "work  notes!", "", "be nice")
    ]  # fmt: skip
    assert storage.session_for_token("h1").id == s.id
    assert storage.session_for_token("nope") is None
    storage.update_store(a, name="Renamed", description=None, metadata_patch=None)
    assert storage.get_session(s.id).resources[0].name == "Work Notes"  # copied at attach time
    archived = storage.archive_session(s.id)
    assert archived.archived_at and storage.session_for_token("h1") is None
    assert storage.archive_session(s.id).archived_at == archived.archived_at
    storage.archive_store(c)
    with pytest.raises(StoreArchived):
        storage.create_session(
            [ResourceSpec(c, "read_write", None)], token_hash="h2", title=None, metadata={}
        )
    with pytest.raises(NotFound):
        storage.create_session([ResourceSpec("memstore_x", "read_write", None)], token_hash="h3", title=None,
                               metadata={})  # fmt: skip
    with pytest.raises(NotFound):
        storage.get_session("sesn_missing")


def test_store_totals_count_live_memories_and_their_bytes_at_one_counter(storage):
    sid, other = new_store(storage), new_store(storage, "other")
    t = storage.store_totals(sid)
    assert (t.counter, t.memories, t.bytes) == (0, 0, 0)
    a = create(storage, sid, "/a", "aaa")
    b = create(storage, sid, "/d/b", "bbbbb")
    create(storage, other, "/x", "x" * 50)  # another store's memories never count
    storage.update_memory(sid, a.id, content="a" * 10, path=None, expected_sha256=None, actor=A)
    storage.update_memory(sid, b.id, content=None, path="/e/b", expected_sha256=None, actor=A)  # same size
    storage.delete_memory(sid, a.id, expected_sha256=None, actor=A)  # its tombstone is not counted
    create(storage, sid, "/a", "né")  # a new memory at a deleted path: 3 bytes of UTF-8
    first_b = all_versions(storage, sid, memory_id=b.id)[-1]
    storage.redact_version(sid, first_b.id, A)  # history only: the memory keeps its size
    t = storage.store_totals(sid)
    assert (
        (t.counter, t.memories, t.bytes)
        == (6, 2, 8)
        == (counter(storage, sid), len(listing(storage, sid)), 8)
    )
    storage.archive_store(sid)  # an archived store still has an overview
    assert storage.store_totals(sid).memories == 2
    with pytest.raises(NotFound):
        storage.store_totals("memstore_missing")


def test_store_totals_are_read_from_the_covering_index(storage, backend, backend_kind):
    sid = new_store(storage)
    for i in range(20):
        create(storage, sid, f"/m{i}", "x" * i)
    with backend.read() as tx:
        if backend_kind == "sqlite":
            plan = " ".join(str(r[-1]) for r in tx._x("EXPLAIN QUERY PLAN " + tx.live_totals_sql(), (sid,)))
            assert "COVERING INDEX memories_live_size" in plan, plan
        else:  # a tiny table would be scanned; what matters is that the index can answer alone
            tx._x("SET LOCAL enable_seqscan = off")
            plan = " ".join(r["QUERY PLAN"] for r in tx._x("EXPLAIN " + tx.live_totals_sql(), (sid,)))
            assert "Index Only Scan using memories_live_size" in plan, plan
        assert tx.live_totals(sid) == (20, sum(range(20)))


def test_sessions_for_store_lists_every_attaching_session_newest_first(storage):
    a, b, lonely = new_store(storage, "a"), new_store(storage, "b"), new_store(storage, "lonely")

    def attach(*sids, token):
        return storage.create_session([ResourceSpec(s, "read_write", None) for s in sids], token_hash=token,
                                      title=None, metadata={}).id  # fmt: skip

    first = attach(a, token="t1")
    both = attach(b, a, token="t2")  # a is its second resource: listed once, with its own mount path
    only_b = attach(b, token="t3")
    storage.archive_session(first)  # archived sessions are listed too, marked archived
    got = storage.sessions_for_store(a)
    assert [s.id for s in got] == [both, first]
    assert got[0].resource_for(a).mount_path == "/mnt/memory/a" and got[1].archived_at is not None
    assert [s.id for s in storage.sessions_for_store(b)] == [only_b, both]
    assert storage.sessions_for_store(lonely) == []
    with pytest.raises(NotFound):
        storage.sessions_for_store("memstore_missing")
    storage.delete_store(b)
    with pytest.raises(NotFound):
        storage.sessions_for_store(b)


# --- writers on different stores ------------------------------------------------------------------


def _held_write(backend, sid: str):
    """A thread holding the store's write transaction open until `release` is set."""
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with backend.write(sid) as tx:
            tx.bump(sid)
            entered.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    assert entered.wait(10)
    return t, release


def test_writers_to_one_store_wait_for_each_other(storage, backend):
    sid = new_store(storage)
    holder, release = _held_write(backend, sid)
    done = threading.Event()
    t = threading.Thread(target=lambda: (create(storage, sid, "/after"), done.set()))
    t.start()
    try:
        assert not done.wait(0.5)  # queued behind the open transaction
    finally:
        release.set()
        holder.join(10)
    t.join(30)
    assert done.is_set()
    assert counter(storage, sid) == 2 and storage.changes_since(sid, 1).changes[0].path == "/after"


def test_writers_to_different_stores_never_wait_on_each_other(storage, backend, backend_kind):
    if backend_kind == "sqlite":
        pytest.skip("SQLite has one write lock per file: writers to all stores queue on it")
    s1, s2 = new_store(storage, "one"), new_store(storage, "two")
    holder, release = _held_write(backend, s1)
    try:
        done = threading.Event()
        t = threading.Thread(target=lambda: (create(storage, s2, "/free"), done.set()))
        t.start()
        assert done.wait(20), "a write to another store waited for s1's open transaction"
        t.join(5)
    finally:
        release.set()
        holder.join(10)
    assert counter(storage, s1) == 1 and counter(storage, s2) == 1


def test_attaching_a_store_waits_for_its_writers(storage, backend):
    """A session's stores are checked (not archived) under their write locks: an archive
    committing meanwhile is seen, never raced past."""
    sid = new_store(storage)
    holder, release = _held_write(backend, sid)
    result: list = []
    t = threading.Thread(target=lambda: result.append(
        storage.create_session([ResourceSpec(sid, "read_write", None)], token_hash="h", title=None, metadata={})
    ))  # fmt: skip
    t.start()
    try:
        t.join(0.5)
        assert t.is_alive()  # queued behind the store's open write
    finally:
        release.set()
        holder.join(10)
    t.join(30)
    assert result and result[0].resources[0].memory_store_id == sid
