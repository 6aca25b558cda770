"""What the engine does with a failure its store raises, in process, with the fault put at the
`StoreApi` port (tests/support/stores.py `FailingStore`): the real client over the real service app,
and the call a test names answered with what the client raises once it has given up on a request
(its own retries of a short retry-after are tested in test_engine_rules.py, through HTTP).
"""

from __future__ import annotations

import pytest

from memfs.client import ApiError, StoreClient
from tests.support.inprocess import ADMIN_KEY, BASE_URL, EngineWorld, single_requests
from tests.support.stores import FailingStore, rate_limited, unreachable

pytestmark = [pytest.mark.trio, pytest.mark.timeout(20)]


async def test_a_429_on_one_stores_feed_read_holds_every_store(hosted, tmp_path):
    """A refusal that says how long to wait is the organisation's, not the store's: the tick fails
    for every store, and no tick, of any store, is due before the wait is over (SEMANTICS.md#d-unreachable).
    A store whose feed answered is not marked synced by a tick that failed."""
    world = EngineWorld(hosted, tmp_path)
    try:
        m = await world.setup({"/a.md": "alpha"}, {"/rules.md": "be kind"}, interval=30)
        assert m.engine.has_counter is False
        await hosted.update(world.rw, world.ids["/a.md"], content="alpha 2")
        # Longer than the interval and than the idle poll (300 s) of a mount against the hosted API.
        m.store.fail("list_versions", rate_limited(420), store_id=world.rw, times=None)
        result = await m.sync()
        assert not result["ok"] and "429" in result["error"], result
        assert m.store_status("notes")["last_result"] == "failed"
        assert m.store_status("handbook")["last_result"] == "failed"
        assert m.read_file("/notes/a.md") == b"alpha"
        assert 415 < m.engine.due_in() <= 420
        asked = len(m.store.calls)
        assert (await m.sync(force=False, wait=False))["ran"] is False
        assert len(m.store.calls) == asked  # nothing asked of either store before the wait is over
        m.store.clear()
        result = await m.sync()  # forced, the fault gone: both stores sync again
        assert result["ok"], result
        assert m.read_file("/notes/a.md") == b"alpha 2"
        assert m.store_status("handbook")["last_result"] == "ok"
    finally:
        await world.close()


async def test_an_unreachable_store_mid_push_leaves_the_change_staged(svc, tmp_path):
    """The update meets an unreachable store while the create beside it goes out: the update's
    change stays staged (the local content kept, nothing taken as landed, `memfs status` names it),
    and the next tick pushes it, with nothing pushed twice."""
    world = EngineWorld(svc, tmp_path)
    try:
        m = await world.setup({"/a.md": "alpha"})
        single_requests(m)
        m.write_file("/notes/a.md", b"alpha 2")
        m.write_file("/notes/new.md", b"fresh")
        m.store.fail("update_memory", unreachable())
        result = await m.sync()
        assert not result["ok"], result
        st = m.store_status("notes")
        assert st["last_result"] == "push failed"
        assert "/a.md" in st["paths"]["staged"]
        assert (await svc.contents(world.rw))["/a.md"] == "alpha"
        assert m.read_file("/notes/a.md") == b"alpha 2"  # the local edit, not the store's older content
        result = await m.sync()
        assert result["ok"], result
        assert (await svc.contents(world.rw)) == {"/a.md": "alpha 2", "/new.md": "fresh"}
        st = m.store_status("notes")
        assert st["paths"]["staged"] == [] and st["not_on_store"] == 0
        assert m.store.count("update_memory") == 2  # the failed one and the one that landed
    finally:
        await world.close()


async def test_the_failure_wrapper_fails_only_what_it_was_told(svc):
    """The wrapper itself: a fault on one call of one store, taken `times` times, every other call
    passed on to the real client; a name that is not a call of the port is refused."""
    store_a = await svc.create_store("A")
    store_b = await svc.create_store("B")
    await svc.create(store_a, "/a.md", "alpha")
    client = StoreClient(BASE_URL, ADMIN_KEY, transport=svc.transport)
    try:
        store = FailingStore(client)
        with pytest.raises(ValueError, match="not a call of the StoreApi port"):
            store.fail("list_memoirs", unreachable())
        fault = store.fail("list_memories", rate_limited(30), store_id=store_a, times=2)
        for _ in range(2):
            with pytest.raises(ApiError) as e:
                await store.list_memories(store_a)
            assert e.value.status == 429 and e.value.retry_after == 30 and e.value.retryable
        assert [m["path"] for m in (await store.list_memories(store_a)).items] == ["/a.md"]
        assert (await store.list_memories(store_b)).items == []
        assert fault.hits == 2 and store.count("list_memories") == 4
        assert store.count("list_memories", store_b) == 1
        assert store.requests_sent == client.requests_sent == 2
    finally:
        await client.aclose()
