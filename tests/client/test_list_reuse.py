"""A store's last basic listing kept for the next (client._LastListing, SEMANTICS.md#d-no-counter):
a page whose answer is byte for byte the one the last listing got is taken as parsed then, and
a listing whose every page is as last time gives the same memories without sorting or comparing
them again (sync/remote.py). That must never hide a change: any page that differs is parsed,
and the listing equals what a client without the last listing reads.

The real service app without its extensions (tests/support/inprocess.py) on an in-memory
transport, or a stdlib HTTP server on a real socket for gzip answers."""

from __future__ import annotations

import gzip
import math

import pytest

from memfs.client import StoreClient
from memfs.client import listing as listing_module
from memfs.sync import remote as remote_module
from memfs.sync.remote import prefix_sizes
from tests.client.test_hosted_listing import _count_plans, _Path, hosted_world
from tests.client.test_list_get import _page
from tests.support.http_stub import answering
from tests.support.inprocess import ADMIN_KEY, BASE_URL, InProcessService

pytestmark = [pytest.mark.trio, pytest.mark.timeout(60)]


def _seen(items) -> list[tuple]:
    return [
        (m["id"], m["path"], m["content_sha256"], m["content_size_bytes"], m["updated_at"]) for m in items
    ]


async def _fresh_listing(hosted: InProcessService, store: str, known: dict[str, int]):
    other = StoreClient(BASE_URL, ADMIN_KEY, transport=hosted.transport)
    try:
        return await other.list_memories(store, known=known)
    finally:
        await other.aclose()


async def test_unchanged_pages_are_not_parsed_again_and_every_change_is_seen(hosted):
    store = await hosted.create_store("Reuse")
    ids = {}
    for i in range(450):  # a split listing: the root's pages, prefixes of one and of several pages
        path = f"/d{i % 3}/n{i:03d}.md" if i % 5 else f"/top{i:03d}.md"
        ids[path] = (await hosted.create(store, path, f"v0 {path}"))["id"]
    client = StoreClient(BASE_URL, ADMIN_KEY, transport=hosted.transport)
    try:
        first = await client.list_memories(store)
        known = prefix_sizes({m["id"]: _Path(m["path"]) for m in first.items})
        warm = await client.list_memories(store, known=known)
        parsed = client.pages_parsed
        again = await client.list_memories(store, known=known)
        assert client.pages_parsed == parsed and again.requests == warm.requests > 3
        assert again.items is warm.items  # the same pages: the same memories, in path order
        assert _seen(again.items) == _seen((await _fresh_listing(hosted, store, known)).items)

        # One edit, one rename across prefixes, one delete, one create: each page that holds one
        # of them answers other bytes and is parsed; the listing is the store as it is now.
        await hosted.update(store, ids["/d1/n004.md"], content="theirs")
        await hosted.update(store, ids["/d2/n002.md"], path="/d0/moved.md")
        await hosted.delete(store, ids["/top010.md"])
        await hosted.create(store, "/d2/new.md", "new")
        changed = await client.list_memories(store, known=known)
        assert 0 < client.pages_parsed - parsed < changed.requests
        assert changed.items is not warm.items
        now = _seen(changed.items)
        assert now == _seen((await _fresh_listing(hosted, store, known)).items)
        paths = [p for _i, p, *_ in now]
        assert "/d0/moved.md" in paths and "/d2/n002.md" not in paths
        assert "/top010.md" not in paths and "/d2/new.md" in paths
        edited = next(m for m in changed.items if m["path"] == "/d1/n004.md")
        assert edited["content_size_bytes"] == len("theirs")
        assert not changed.duplicates
    finally:
        await client.aclose()


async def test_a_listing_beyond_the_bound_is_not_kept_and_still_lists_all(hosted, monkeypatch):
    monkeypatch.setattr(listing_module, "LISTINGS_KEPT", 100)
    small, large = await hosted.create_store("Small"), await hosted.create_store("Large")
    for i in range(40):
        await hosted.create(small, f"/s{i}.md", "s")
    for i in range(150):
        await hosted.create(large, f"/l{i}.md", "l")
    client = StoreClient(BASE_URL, ADMIN_KEY, transport=hosted.transport)
    try:
        for _ in range(2):
            for store, n in ((small, 40), (large, 150)):
                listing = await client.list_memories(store)
                assert len({m["id"] for m in listing.items}) == n
        assert set(client._last_listings) == {small}  # 40 fit under 100; 150 never do
        before = client.pages_parsed
        listing = await client.list_memories(large)
        assert client.pages_parsed - before == listing.requests  # each page parsed anew
    finally:
        await client.aclose()


async def test_a_gzip_page_is_compared_after_decoding():
    body = _page(["/a.md", "/b.md"])
    server = answering(
        [
            (200, {"content-encoding": "gzip"}, gzip.compress(body, mtime=1)),
            (200, {"content-encoding": "gzip"}, gzip.compress(body, mtime=2)),  # other bytes, same page
            (200, {}, _page(["/a.md", "/c.md"])),
        ]
    )
    client = StoreClient(server.url, "tok")
    try:
        first = await client.list_memories("memstore_x")
        second = await client.list_memories("memstore_x")
        assert client.pages_parsed == 1 and second.items is first.items
        third = await client.list_memories("memstore_x")
        assert client.pages_parsed == 2 and [m["path"] for m in third.items] == ["/a.md", "/c.md"]
    finally:
        await client.aclose()
        server.close()


async def test_an_idle_hosted_store_is_found_idle_without_comparing_its_memories_again(
    hosted, tmp_path, monkeypatch
):
    """The tick's reader compares a listing with the baseline once; a listing that is the same
    list again (every page as last time) against the same baseline is idle without it. A remote
    edit is still pulled the tick it is listed."""
    world, m = await hosted_world(hosted, tmp_path, {f"/d{i % 4}/f{i}.md": str(i) for i in range(260)})
    try:
        # The listing path: what a tick does where the version feed is refused (sync/feed.py).
        for s in m.engine.stores:
            m.engine.reader.feed.refused_until[s.store_id] = math.inf
        compared: list[int] = []
        real = remote_module._lists_as

        def counting(items, expect):
            compared.append(len(items))
            return real(items, expect)

        monkeypatch.setattr(remote_module, "_lists_as", counting)
        assert (await m.sync())["ok"]  # lists as the baseline: compared once
        assert 260 in compared
        compared.clear()
        plans = _count_plans(monkeypatch)
        result = await m.sync()
        # (the empty handbook is listed in full view, as a first download, and never kept)
        assert result["ok"] and result["pulled"] == 0 and plans == []
        assert [n for n in compared if n] == []
        await hosted.update(world.rw, world.ids["/d1/f5.md"], content="theirs")
        result = await m.sync()
        assert result["ok"] and result["pulled"] == 1 and m.read_file("/notes/d1/f5.md") == b"theirs"
        assert plans == [world.rw]
    finally:
        await world.close()


async def test_a_store_that_moved_but_little_keeps_the_baselines_entries_for_the_rest(hosted, tmp_path):
    world, m = await hosted_world(hosted, tmp_path, {f"/d{i % 4}/f{i}.md": str(i) for i in range(240)})
    try:
        await hosted.update(world.rw, world.ids["/d1/f5.md"], content="theirs")
        await hosted.update(world.rw, world.ids["/d2/f6.md"], path="/d3/moved.md")
        reader = m.engine.reader
        store = next(s for s in m.engine.stores if s.store_id == world.rw)
        baseline = reader.baseline(world.rw)
        read = await reader.read(
            store,
            None,
            baseline.entries,
            remote_module.Pulled(),
            has_counter=False,
            sizes=baseline.sizes,
            expect=baseline.remote,
        )
        now = await hosted.memories(world.rw)  # by path
        assert {e.memory_id: (e.path, e.sha, e.size) for e in read.entries.values()} == {
            mem["id"]: (path, mem["content_sha256"], mem["content_size_bytes"]) for path, mem in now.items()
        }
        moved = {world.ids["/d1/f5.md"], world.ids["/d2/f6.md"]}
        for mid, e in read.entries.items():
            assert (e is baseline.remote[mid]) == (mid not in moved), mid
    finally:
        await world.close()
