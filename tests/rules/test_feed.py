"""The version feed's position (memfs/sync/feed.py, SEMANTICS.md#d-no-counter): what a read asks,
what it records, and which versions count as new. A stand-in for the client answers the pages
(the e2e tests run the real thing: tests/e2e/test_hosted_feed.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import trio

from memfs.client.errors import ApiError
from memfs.records import FeedPosition
from memfs.sync.feed import VersionFeed, listed_position


class Pages:
    """Answers list_versions with the given pages in turn and records the params asked."""

    def __init__(self, *answers: tuple[list[dict[str, Any]], str | None, str | None]):
        self.answers = list(answers)
        self.asked: list[dict[str, Any]] = []

    async def list_versions(self, store_id: str, params: dict[str, Any]):
        self.asked.append(dict(params))
        answer = self.answers.pop(0)
        if isinstance(answer, ApiError):
            raise answer
        data, next_page, date = answer
        return {"data": data, "next_page": next_page}, date


def v(vid: str, mid: str, at: str, op: str = "modified", path: str | None = "/a.md") -> dict[str, Any]:
    return {"id": vid, "memory_id": mid, "created_at": at, "operation": op, "path": path,
            "content_sha256": "0" * 64, "content_size_bytes": 1}  # fmt: skip


def read(feed: VersionFeed, at: FeedPosition | None):
    async def go():
        return await feed.read("memstore_x", at, most=1000)

    return trio.run(go)


def test_nothing_new_moves_the_position_on_with_the_services_clock():
    """A burst of writes long ago is not read again at every tick: the window starts two minutes
    before the service's time of the last read, not before the last version."""
    burst = [v(f"memver_{i}", f"mem_{i}", "2026-12-03T10:00:00.000000Z") for i in range(3)]
    pages = Pages((burst, None, "Thu, 03 Dec 2026 10:30:00 GMT"), ([], None, "Thu, 03 Dec 2026 10:30:15 GMT"))
    feed = VersionFeed(pages)  # type: ignore[arg-type]
    at = FeedPosition("2026-12-03T10:00:00.000000Z", frozenset(x["id"] for x in burst))
    first = read(feed, at)
    assert pages.asked[0]["created_at[gte]"] == "2026-12-03T09:58:00.000000Z"
    assert not first.fresh and first.position == FeedPosition("2026-12-03T10:30:00.000000Z", frozenset())
    second = read(feed, first.position)
    assert pages.asked[1]["created_at[gte]"] == "2026-12-03T10:28:00.000000Z"
    assert second.position is not None and second.position.position == "2026-12-03T10:30:15.000000Z"


def test_a_memory_takes_its_newest_version_and_only_memories_with_a_new_one_count():
    seen = v("memver_old", "mem_b", "2026-12-03T10:29:00.000000Z")
    late = v("memver_late", "mem_a", "2026-12-03T10:28:30.000000Z")  # visible late, within the overlap
    newer = v("memver_new", "mem_a", "2026-12-03T10:29:30.000000Z", path="/moved.md")
    pages = Pages(([newer, seen, late], None, "Thu, 03 Dec 2026 10:30:00 GMT"))
    feed = VersionFeed(pages)  # type: ignore[arg-type]
    got = read(feed, FeedPosition("2026-12-03T10:29:00.000000Z", frozenset({"memver_old", "memver_new"})))
    assert got.fresh == {"mem_a"}  # the late version is new; mem_b's only version was seen
    assert got.newest_by_memory() == {"mem_a": newer}  # not the late one: it is older
    assert got.position is not None and got.position.seen == {"memver_old", "memver_late", "memver_new"}


def test_full_pages_are_paged_and_more_versions_than_memories_ask_for_a_listing():
    page = [v(f"memver_{i:03d}", f"mem_{i}", "2026-12-03T10:29:00.000000Z") for i in range(100)]
    pages = Pages((page, "cursor-1", "Thu, 03 Dec 2026 10:30:00 GMT"), (page, "cursor-2", None))
    feed = VersionFeed(pages)  # type: ignore[arg-type]

    async def go():
        return await feed.read(
            "memstore_x", FeedPosition("2026-12-03T10:29:00.000000Z", frozenset()), most=150
        )

    got = trio.run(go)
    assert [a.get("page") for a in pages.asked] == [None, "cursor-1"]
    assert got.versions is None and got.requests == 2  # a listing is cheaper than more pages


def test_a_refused_feed_is_not_asked_again_soon():
    pages = Pages(ApiError(403, "permission_error", "no"))  # type: ignore[arg-type]
    feed = VersionFeed(pages)  # type: ignore[arg-type]
    at = FeedPosition("2026-12-03T10:29:00.000000Z", frozenset())
    assert read(feed, at).versions is None and len(pages.asked) == 1
    assert read(feed, at).versions is None and len(pages.asked) == 1  # remembered: not asked


def test_a_feed_with_content_asks_full_pages_but_the_wide_window_basic_ones():
    """`full`: the versions' content comes with the read that finds them (20 a page, the API's
    maximum with view=full); the safety net's wide window (an hour of versions) stays at 100 a page
    without content, and so does the probe before a listing."""
    at = FeedPosition("2026-12-03T10:29:00.000000Z", frozenset())
    pages = Pages(*[([], None, "Thu, 03 Dec 2026 10:30:00 GMT")] * 3)
    feed = VersionFeed(pages, full=True)  # type: ignore[arg-type]

    async def go():
        await feed.read("memstore_x", at, most=1000)
        await feed.read("memstore_x", at, most=1000, wide=3600.0)
        await feed.probe("memstore_x")

    trio.run(go)
    assert [(p.get("view"), p["limit"]) for p in pages.asked] == [("full", 20), (None, 100), (None, 100)]


def test_a_first_downloads_listing_says_where_the_feed_stands():
    """`listed_position` (SEMANTICS.md#d-first-download): the service's clock at the listing's
    earliest page, and seen: the versions the listing showed, within the overlap behind it."""
    served = datetime(2026, 12, 3, 10, 30, tzinfo=UTC).timestamp()

    def memory(mid: str, version: str | None, updated: str | None) -> dict:
        return {"id": mid, "memory_version_id": version, "updated_at": updated}

    items = [
        memory("mem_a", "memver_a3", "2026-12-03T10:29:59.5Z"),  # written a moment before
        memory("mem_b", "memver_b1", "2026-12-03T10:28:00.000000Z"),  # at the overlap's edge
        memory("mem_c", "memver_c7", "2026-12-03T10:27:59.999999Z"),  # behind it: never read again
        memory("mem_d", None, "2026-12-03T10:29:00Z"),  # no version id said: nothing to see
        memory("mem_e", "memver_e1", None),
        memory("mem_f", "memver_f1", "not a time"),
    ]
    assert listed_position(items, served) == FeedPosition(
        "2026-12-03T10:30:00.000000Z", frozenset({"memver_a3", "memver_b1"})
    )
    assert listed_position([], served) == FeedPosition("2026-12-03T10:30:00.000000Z", frozenset())
    assert listed_position(items, None) is None  # no clock said: the next pull probes and lists
