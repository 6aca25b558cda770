"""The hosted-API (no counter) listing path, in process (tests/support/inprocess.py): the client's
listing by path prefix, and what a tick after one remote edit costs the engine.

The real service app without its extensions (SEMANTICS.md#d-no-counter) on an in-memory
transport; the real StoreClient and SyncEngine under trio in the test.
"""

from __future__ import annotations

import pytest

from memfs.client import StoreClient
from memfs.sync import store_pull as engine_module
from memfs.sync.remote import prefix_sizes
from tests.support.inprocess import ADMIN_KEY, BASE_URL, EngineWorld, FaultTransport, InProcessService

pytestmark = [pytest.mark.trio, pytest.mark.timeout(60)]

# Prefixes whose names a query string must carry encoded: "&" and "=" split parameters, "+" is a
# space to a form decoder, "#" ends the URL, "%" starts an escape, "?" starts a query.
ODD = ["/a b/", "/a&b=c/", "/p+q/", "/h#1/", "/pct%41/", "/q?x/", "/ünï/", "/a&b=c/x y+z%/"]


async def test_a_split_listing_pages_prefixes_whatever_characters_they_hold(hosted):
    """Every prefix is asked by `path_prefix` (and the large ones paged by cursor), so a prefix
    name must reach the service as itself: the listing equals the store, each memory once."""
    store = await hosted.create_store("Odd")
    paths = []
    for prefix in ODD:
        n = 130 if prefix == "/a&b=c/x y+z%/" else 12  # one prefix over a page: cursor and split
        paths += [f"{prefix}n{i:03d}.md" for i in range(n)]
    for path in paths:
        await hosted.create(store, path, path)
    transport = FaultTransport(hosted.transport)
    client = StoreClient(BASE_URL, ADMIN_KEY, transport=transport)
    try:
        cold = await client.list_memories(store)  # no sizes known: probed, then split
        assert sorted(m["path"] for m in cold.items) == sorted(paths)
        assert not cold.duplicates
        asked = {p for _m, p in transport.requests}
        assert len(asked) == 1  # one endpoint; the prefixes are in the query
        known = prefix_sizes({m["id"]: _Path(m["path"]) for m in cold.items})
        warm = await client.list_memories(store, known=known)  # known sizes: split at once
        assert [m["path"] for m in warm.items] == sorted(paths)
        full = await client.list_memories(store, view="full", known=known)
        assert {m["path"]: m["content"] for m in full.items} == {p: p for p in paths}
    finally:
        await client.aclose()


class _Path:
    def __init__(self, path: str):
        self.path = path


async def hosted_world(hosted: InProcessService, tmp_path, notes: dict[str, str]):
    """EngineWorld's two stores (notes read-write, an empty read-only handbook), mounted
    against the service without the counter."""
    world = EngineWorld(hosted, tmp_path)
    m = await world.setup(notes)
    assert m.engine.has_counter is False
    return world, m


async def test_one_remote_edit_is_planned_once_when_nothing_moved_while_it_was_fetched(
    hosted, tmp_path, monkeypatch
):
    """The tick after one remote edit fetches that memory and then plans again on the view as it
    is now; when neither the view nor the fetched content moved meanwhile, that plan would be
    the first one again, so it is not computed (a 2,000-file store's plan, on the FUSE thread).
    An edit made while the fetch was in flight still gets its second plan (next test)."""
    world, m = await hosted_world(hosted, tmp_path, {f"/d{i % 4}/f{i}.md": str(i) for i in range(40)})
    try:
        plans = _count_plans(monkeypatch)
        await hosted.update(world.rw, world.ids["/d1/f5.md"], content="theirs")
        result = await m.sync()
        assert result["ok"] and result["pulled"] == 1
        assert m.read_file("/notes/d1/f5.md") == b"theirs"
        assert plans == [world.rw]  # one plan for the store that moved, none for the idle one
        result = await m.sync()
        assert result["ok"] and result["pulled"] == 0 and result["pushed"] == 0
    finally:
        await world.close()


async def test_an_edit_made_while_the_remote_edit_was_fetched_is_planned_again_and_kept(
    hosted, tmp_path, monkeypatch
):
    """The agent writes a file while the tick fetches another memory's new content: the view
    moved, so the plan is made again before applying, and the agent's edit is pushed, not lost."""
    world, m = await hosted_world(hosted, tmp_path, {"/a.md": "alpha", "/b.md": "beta"})
    try:
        # The feed read without content (a service that gives none, a redacted version): the
        # tick fetches the edited memory, and the agent writes meanwhile.
        m.engine.reader.feed.full = False
        plans = _count_plans(monkeypatch)
        await hosted.update(world.rw, world.ids["/a.md"], content="theirs")

        async def agent_writes(_request) -> None:
            m.write_file("/notes/b.md", b"mine")

        m.transport.add("GET", r"/memories/mem_[^/]+$", before=agent_writes)
        result = await m.sync()
        assert (
            result["ok"] and m.read_file("/notes/a.md") == b"theirs" and m.read_file("/notes/b.md") == b"mine"
        )
        assert plans == [world.rw, world.rw]
        await m.sync()
        assert (await hosted.contents(world.rw)) == {"/a.md": "theirs", "/b.md": "mine"}
    finally:
        await world.close()


def _count_plans(monkeypatch) -> list[str]:
    """The store ids the engine made a plan for, whole (plan_pull) or narrowed to what the store
    changed (plan_narrowed, memfs/sync/narrow.py: a narrowed attempt that gives way to the whole
    plan counts once)."""
    plans: list[str] = []

    def counting(real):
        def count(fs, state, store, *a, **kw):
            plan = real(fs, state, store, *a, **kw)
            if plan is not None:
                plans.append(store.store_id)
            return plan

        return count

    for name in ("plan_pull", "plan_narrowed"):
        monkeypatch.setattr(engine_module, name, counting(getattr(engine_module, name)))
    return plans


async def test_a_hosted_first_download_stores_each_pages_content_as_it_arrives(hosted, tmp_path, monkeypatch):
    """Full-view pages are hashed and stored in the state dir from a worker thread as they
    arrive (remote.StoreReader.read), so the apply step places the store in one go
    (apply_stored_many), as a snapshot's: no file is written one by one from listed content,
    and no memory is fetched on its own."""
    from memfs.mount.sync_view import SyncView

    one_by_one: list[str] = []
    real = SyncView.apply_remote

    def counting(self, store_id, path, *a, **kw):
        one_by_one.append(path)
        return real(self, store_id, path, *a, **kw)

    monkeypatch.setattr(SyncView, "apply_remote", counting)
    notes = {f"/t{i % 3}/s{i % 5}/n{i:03d}.md": f"note {i}\n" * (i + 1) for i in range(90)}
    world, m = await hosted_world(hosted, tmp_path, notes)
    try:
        assert one_by_one == []
        assert {p: m.read_file(f"/notes{p}").decode() for p in notes} == notes
        assert m.transport.count("GET", r"/memories/mem_[^/]+$") == 0
        assert all(m.state.has_blob(b.sha) for b in m.state.baseline(world.rw).values())
        await hosted.update(world.rw, world.ids["/t1/s1/n001.md"], content="theirs")
        result = await m.sync()  # a later tick reads the version feed, the content with it
        assert result["ok"] and m.read_file("/notes/t1/s1/n001.md") == b"theirs"
        assert one_by_one == ["/t1/s1/n001.md"]
    finally:
        await world.close()


async def test_a_store_that_lists_as_its_baseline_still_pushes_what_the_agent_changed(hosted, tmp_path):
    """An unchanged listing is the reader's cached view of the baseline (remote.Baseline); a tick
    that has local changes to push plans on it, and the next tick sees the pushed state."""
    world, m = await hosted_world(hosted, tmp_path, {"/a.md": "alpha", "/d/b.md": "beta"})
    try:
        m.write_file("/notes/d/b.md", b"mine")
        m.write_file("/notes/c.md", b"new")
        result = await m.sync()
        assert result["ok"] and result["pulled"] == 0
        assert (await hosted.contents(world.rw)) == {"/a.md": "alpha", "/d/b.md": "mine", "/c.md": "new"}
        await hosted.update(world.rw, world.ids["/a.md"], content="theirs")
        result = await m.sync()
        assert result["ok"] and result["pulled"] == 1 and result["pushed"] == 0
        assert m.read_file("/notes/a.md") == b"theirs" and m.read_file("/notes/d/b.md") == b"mine"
        result = await m.sync()
        assert result["ok"] and result["pulled"] == 0 and result["pushed"] == 0
    finally:
        await world.close()
