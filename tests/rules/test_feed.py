"""The version feed's position (memfs/sync/feed.py, SEMANTICS.md#d-no-counter): what a read asks,
what it records, and which versions count as new. A stand-in for the client answers the pages
(the e2e tests run the real thing: tests/e2e/test_hosted_feed.py)."""

from __future__ import annotations

from typing import Any

import trio

from memfs.client.errors import ApiError
from memfs.records import FeedPosition, FeedProbe
from memfs.sync.feed import VersionFeed, beside_listing


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


def test_a_probe_beside_the_listing_keeps_seen_only_what_the_listing_shows():
    """`beside_listing` (SEMANTICS.md#d-first-download): the probe of a first download may be
    answered after some listing pages, so a version of its page stays seen only where the listing
    shows its memory as that memory's newest version in the page left it."""
    at = "2026-12-03T10:30:00.000000Z"
    versions = (
        ("memver_a2", "mem_a", "modified"),  # newest first: written after the listing read mem_a
        ("memver_b1", "mem_b", "created"),  # listed at this version
        ("memver_c2", "mem_c", "deleted"),  # deleted, and not listed
        ("memver_d1", "mem_d", "created"),  # created after its prefix was listed: not listed
        ("memver_e3", "mem_e", "modified"),  # listed at a newer version than the probe's
        ("memver_a1", "mem_a", "created"),
        ("memver_c1", "mem_c", "created"),
    )
    probe = FeedProbe(FeedPosition(at, frozenset(v[0] for v in versions)), versions)
    listed = {"mem_a": "memver_a1", "mem_b": "memver_b1", "mem_e": "memver_e4", "mem_f": None}
    assert beside_listing(probe, listed) == FeedPosition(at, frozenset({"memver_b1", "memver_c2", "memver_c1"}))
    # A listing without version ids (a service that leaves them out) keeps only the deletes seen.
    bare = {mid: None for mid in listed}
    assert beside_listing(probe, bare) == FeedPosition(at, frozenset({"memver_c2", "memver_c1"}))
    # What the probe did not take for seen (outside its overlap) stays unseen.
    narrow = FeedProbe(FeedPosition(at, frozenset({"memver_b1"})), versions)
    assert beside_listing(narrow, listed) == FeedPosition(at, frozenset({"memver_b1"}))


def test_a_probe_says_its_pages_versions_for_the_listing_beside_it():
    at = "2026-12-03T10:29:00.000000Z"
    page = [v("memver_2", "mem_a", at), v("memver_1", "mem_b", "2026-12-03T10:00:00.000000Z", op="created")]
    feed = VersionFeed(Pages((page, None, "Thu, 03 Dec 2026 10:30:00 GMT")))  # type: ignore[arg-type]

    async def go():
        return await feed.probe("memstore_x")

    got = trio.run(go)
    assert got.probed is not None and got.probed.position == got.position
    assert got.probed.versions == (("memver_2", "mem_a", "modified"), ("memver_1", "mem_b", "created"))
    assert got.position == FeedPosition("2026-12-03T10:30:00.000000Z", frozenset({"memver_2"}))
