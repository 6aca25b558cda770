"""The relay's cache writes (memfs/service/mirror.py) on every backend: what an upstream state does to
the cache, read back through the service's own rules (the counter, the changes feed, a listing)."""

from __future__ import annotations

import hashlib

import pytest

from memfs.service.mirror import Gone, Mirror
from memfs.service.storage import MemoryRecord, StoreRecord

SID = "memstore_upstream0000000000001"
AT = "2026-12-01T00:00:00.000000Z"


def mem(mid: str, path: str, content: str, version: str, updated: str = AT) -> MemoryRecord:
    data = content.encode()
    return MemoryRecord(
        mid, SID, path, content, hashlib.sha256(data).hexdigest(), len(data), version, AT, updated
    )


@pytest.fixture
def mirror(storage, backend) -> Mirror:
    m = Mirror(backend)
    m.put_store(StoreRecord(SID, SID, "", {}, AT, AT, None))
    return m


def paths(storage) -> dict[str, str]:
    page = storage.list_memories(SID, path_prefix="/", depth=0, limit=100, after=None, with_content=True)
    return {m.path: m.content for m in page.items}


def test_a_memory_keeps_the_upstreams_ids_and_moves_the_counter(storage, mirror):
    base = mirror.counter(SID)
    assert mirror.apply(SID, [mem("mem_a", "/a.md", "one\n", "memver_1")]) == 1
    got = storage.get_memory(SID, "mem_a")
    assert (got.memory_version_id, got.content, got.updated_at) == ("memver_1", "one\n", AT)
    assert storage.get_counters([SID]) == {SID: base + 1}
    changes = storage.changes_since(SID, base)
    assert [(c.memory_id, c.operation, c.path) for c in changes.changes] == [("mem_a", "upserted", "/a.md")]


def test_applying_what_the_cache_holds_moves_nothing(storage, mirror):
    mirror.apply(SID, [mem("mem_a", "/a.md", "one\n", "memver_1")])
    after = mirror.counter(SID)
    assert mirror.apply(SID, [mem("mem_a", "/a.md", "one\n", "memver_1")]) == 0
    assert storage.get_counters([SID]) == {SID: after}


def test_an_older_state_does_not_take_a_newer_one_back(storage, mirror):
    mirror.apply(SID, [mem("mem_a", "/a.md", "new\n", "memver_2", "2026-12-01T00:00:02.000000Z")])
    assert mirror.apply(SID, [mem("mem_a", "/a.md", "old\n", "memver_1", "2026-12-01T00:00:01.000000Z")]) == 0
    assert paths(storage) == {"/a.md": "new\n"}


def test_a_deleted_memory_is_not_brought_back_by_a_late_fetch(storage, mirror):
    mirror.apply(SID, [mem("mem_a", "/a.md", "one\n", "memver_1")])
    assert mirror.apply(SID, [Gone("mem_a")]) == 1
    later = mem("mem_a", "/a.md", "one\n", "memver_1", "2026-12-01T00:00:05.000000Z")
    assert mirror.apply(SID, [later]) == 0
    assert paths(storage) == {}
    assert [c.operation for c in storage.changes_since(SID, mirror.counter(SID) - 1).changes] == ["deleted"]


def test_a_rename_is_one_change_with_its_previous_path(storage, mirror):
    mirror.apply(SID, [mem("mem_a", "/a.md", "one\n", "memver_1")])
    renamed = mem("mem_a", "/b/a.md", "one\n", "memver_2", "2026-12-01T00:00:01.000000Z")
    assert mirror.apply(SID, [renamed]) == 1
    (change,) = storage.changes_since(SID, mirror.counter(SID) - 1).changes
    assert (change.path, change.previous_path) == ("/b/a.md", "/a.md")


def test_a_rename_answer_without_content_keeps_the_cached_content(storage, mirror):
    mirror.apply(SID, [mem("mem_a", "/a.md", "one\n", "memver_1")])
    m = mem("mem_a", "/c.md", "one\n", "memver_2", "2026-12-01T00:00:01.000000Z")
    m.content = None
    assert mirror.apply(SID, [m]) == 1
    assert paths(storage) == {"/c.md": "one\n"}


def test_a_state_whose_content_does_not_match_its_sha_is_not_applied(storage, mirror):
    m = mem("mem_a", "/a.md", "one\n", "memver_1")
    m.content = "something else\n"
    assert mirror.apply(SID, [m]) == 0
    assert paths(storage) == {}


def test_the_newest_state_clears_what_the_cache_holds_at_its_path_above_or_below(storage, mirror):
    mirror.apply(
        SID,
        [mem("mem_a", "/x.md", "a\n", "memver_1"), mem("mem_b", "/d/e.md", "b\n", "memver_2")],
    )
    # upstream: /x.md was deleted and /x.md created again as another memory; /d/e.md moved and /d became a memory
    mirror.apply(SID, [mem("mem_c", "/x.md", "c\n", "memver_3"), mem("mem_d", "/d", "d\n", "memver_4")])
    assert paths(storage) == {"/x.md": "c\n", "/d": "d\n"}


def test_replace_drops_what_the_listing_did_not_hold_unless_written_after_it_began(storage, mirror):
    mirror.apply(SID, [mem("mem_a", "/a.md", "a\n", "memver_1"), mem("mem_b", "/b.md", "b\n", "memver_2")])
    listed_from = mirror.counter(SID)
    mirror.apply(SID, [mem("mem_w", "/w.md", "written meanwhile\n", "memver_9")])  # a write-through
    changed = mirror.replace(SID, [mem("mem_a", "/a.md", "a\n", "memver_1")], listed_from=listed_from)
    assert changed == 1  # mem_b gone; mem_a unchanged; mem_w kept
    assert paths(storage) == {"/a.md": "a\n", "/w.md": "written meanwhile\n"}


def test_replace_with_listed_ids_keeps_unfetched_memories(storage, mirror):
    mirror.apply(SID, [mem("mem_a", "/a.md", "a\n", "memver_1"), mem("mem_b", "/b.md", "b\n", "memver_2")])
    c = mirror.counter(SID)
    mirror.replace(SID, [], listed_from=c, listed_ids={"mem_a"})
    assert paths(storage) == {"/a.md": "a\n"}


def test_a_listing_that_holds_a_memory_twice_keeps_its_newest_state(storage, mirror):
    old = mem("mem_a", "/a.md", "a\n", "memver_1", "2026-12-01T00:00:01.000000Z")
    new = mem("mem_a", "/z.md", "a\n", "memver_2", "2026-12-01T00:00:02.000000Z")
    mirror.replace(SID, [new, old], listed_from=0)
    assert paths(storage) == {"/z.md": "a\n"}


def test_a_new_caches_counters_start_above_what_an_older_cache_served(storage, mirror):
    # a mount that applied an older cache's counter (numbered from its own start, lower) is "too
    # old" for this one, and reads the store again instead of taking nothing for no change
    base = mirror.counter(SID)
    assert base > 1_700_000_000_000  # the time in milliseconds when the store entered the cache
    mirror.apply(SID, [mem("mem_a", "/a.md", "one\n", "memver_1")])
    assert storage.changes_since(SID, base - 5).too_old
    assert not storage.changes_since(SID, base).too_old


def test_a_store_not_cached_takes_nothing(storage, backend):
    m = Mirror(backend)
    assert m.apply("memstore_absent", [mem("mem_a", "/a.md", "a\n", "memver_1")]) == 0


def test_one_poll_claim_per_interval_between_replicas(mirror):
    assert mirror.claim_poll(SID, 10_000, 1_000)
    assert not mirror.claim_poll(SID, 10_500, 1_000)  # another replica, within the interval
    assert mirror.claim_poll(SID, 11_000, 1_000)


def test_a_database_with_a_services_stores_is_not_made_a_cache(storage, backend):
    storage.create_store("a real store", "", {})
    assert "not a relay's cache" in (Mirror(backend).claim_database() or "")


def test_an_empty_database_becomes_a_cache_and_stays_one(storage, backend):
    from memfs.service.mirror import is_relay_cache

    assert not is_relay_cache(backend)
    assert Mirror(backend).claim_database() is None
    Mirror(backend).put_store(StoreRecord(SID, SID, "", {}, AT, AT, None))
    assert Mirror(backend).claim_database() is None and is_relay_cache(backend)


def test_a_dropped_store_keeps_its_counter_moving_and_a_mount_behind_it_reads_it_again(storage, mirror):
    mirror.apply(
        SID,
        [mem("mem_a", "/a.md", "a\n", "memver_1")],
    )
    mirror.replace(SID, [mem("mem_a", "/a.md", "a\n", "memver_1")], listed_from=0, download=True)
    held = mirror.counter(SID)  # what a mount applied
    assert mirror.downloaded([SID]) == [SID]
    mirror.drop(SID)
    assert mirror.downloaded([SID]) == [] and paths(storage) == {}
    assert mirror.counter(SID) > held  # never back
    mirror.replace(
        SID, [mem("mem_b", "/b.md", "b\n", "memver_2")], listed_from=mirror.counter(SID), download=True
    )
    assert paths(storage) == {"/b.md": "b\n"}
    assert storage.changes_since(SID, held).too_old  # /a.md's deletion is in no feed: read it again


def test_the_feed_position_is_recorded_with_what_it_brought_only_forward_and_dropped_with_the_store(
    storage, mirror
):
    assert mirror.feed_at(SID) == 0  # none: a relay lists the store
    mirror.replace(
        SID, [mem("mem_a", "/a.md", "a\n", "memver_1")], listed_from=0, download=True, feed_at_ms=1_000
    )
    assert mirror.feed_at(SID) == 1_000
    after = mirror.counter(SID)
    assert mirror.apply(SID, [], feed_at_ms=5_000) == 0  # a quiet poll: the position alone
    assert mirror.feed_at(SID) == 5_000 and mirror.counter(SID) == after  # no change for the mounts
    mirror.apply(SID, [mem("mem_b", "/b.md", "b\n", "memver_2")], feed_at_ms=3_000)  # an older replica's
    assert mirror.feed_at(SID) == 5_000  # never back: the cache holds everything before 5,000 still
    assert paths(storage) == {"/a.md": "a\n", "/b.md": "b\n"}
    mirror.drop(SID)
    assert mirror.feed_at(SID) == 0  # the memories left: the next download lists it
    assert Mirror(mirror.backend).feed_at("memstore_absent") == 0
