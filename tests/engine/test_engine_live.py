"""Live mode's rules of *when* (SEMANTICS.md#d-when), in process (tests/support/inprocess.py).

The engine's own timer runs in the test's nursery, with its held watch against the real service
app; the mount is kept "busy" (a filesystem request just now, for ever), and a test that wants a
remote change left unapplied holds its file open (close-to-open: the timer's pulls leave an open
file as it is): what the tests see is what the watch, the debounce and `memfs sync` do. Nothing
is timed: every wait polls with a generous deadline.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

from tests.support.inprocess import EngineMount, EngineWorld

pytestmark = [pytest.mark.trio, pytest.mark.timeout(30)]


def busy(m: EngineMount) -> None:
    """A mount in the middle of a command, for ever: never quiet (the timer's pulls leave its
    open and staged files as they are; the rest of the store arrives)."""
    m.fs.last_activity = math.inf


def hold(m: EngineMount, *paths: str) -> list[int]:
    """A command that has `paths` open (a reader): the timer's live pulls leave them as they are
    (close-to-open), so only `memfs sync` (or their close) brings what the store changed there."""
    return [m.fs.open(m.ino(p), os.O_RDONLY).fh for p in paths]


async def until(pred: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0) -> bool:
    with trio.move_on_after(timeout):
        while True:
            value = pred()
            if not isinstance(value, bool):
                value = await value
            if value:
                return True
            await trio.sleep(0.02)
    return False


async def store_counter(world: EngineWorld) -> int:
    resp = await world.svc.admin.get("/v1/memory_store_counters", params={"ids": world.rw})
    return int(resp.json()["data"][0]["counter"])


async def live_mount(world: EngineWorld, nursery: trio.Nursery, files: dict[str, str], **opts) -> EngineMount:
    # The watch's change source: a served app runs it for its lifespan, which the in-memory
    # transport does not start.
    nursery.start_soon(world.svc.app.watch_hub.run)
    m = await world.setup(files, interval=300.0, **opts)
    busy(m)
    nursery.start_soon(m.engine.timer)
    assert await until(lambda: m.engine.status()["mode"] == "live"), m.engine.status()
    return m


async def test_a_busy_mount_pushes_after_the_debounce_though_its_store_moved(world):
    """A moved store whose pull waits (here: its changed file is open, close-to-open) still
    pushes what the agent closed after the debounce: waiting for the pull would hold every push
    of a busy mount (its own first push moves the counter too) until it is quiet. The remote
    change stays unapplied until the file is closed or `memfs sync`."""
    async with trio.open_nursery() as nursery:
        m = await live_mount(world, nursery, {"/a.md": "alpha", "/b.md": "beta"})
        applied = m.store_status("notes")["counter"]
        [reader] = hold(m, "/notes/a.md")  # a command reads /a.md
        await world.svc.update(world.rw, world.ids["/a.md"], content="alpha from elsewhere")
        moved = await store_counter(world)
        assert await until(lambda: m.store_status("notes")["counter_seen"] == moved)
        m.write_file("/notes/new.md", b"written while busy")
        m.write_file("/notes/b.md", b"beta, edited while busy")
        assert await until(
            lambda: _has(world, {"/new.md": "written while busy", "/b.md": "beta, edited while busy"})
        ), await world.svc.contents(world.rw)
        assert await until(lambda: m.store_status("notes")["staged"] == 0), m.store_status("notes")
        s = m.store_status("notes")
        # the open file keeps its content: the remote edit waits for its close or `memfs sync`
        assert s["counter"] == applied and s["pull_pending"], s
        assert m.fs.read(reader, 0, 100) == b"alpha" and m.read_file("/notes/a.md") == b"alpha"
        result = await m.sync(force=False)
        assert result["ran"] and m.read_file("/notes/a.md") == b"alpha from elsewhere"
        assert m.store_status("notes")["counter"] == await store_counter(world)
        world.svc.app.watch_hub.close()
        nursery.cancel_scope.cancel()


async def _has(world: EngineWorld, want: dict[str, str]) -> bool:
    have = await world.svc.contents(world.rw)
    return all(have.get(p) == c for p, c in want.items())


async def test_a_store_that_moved_again_during_its_pull_is_pulled_at_the_next_sync(world, changes_fetched):
    """A pull that applied something but ended behind the watch (another writer committed while
    it fetched) leaves the store moved: the next `memfs sync` pulls it, with no back-off. Only a
    pull that could not apply (a file open with unflushed writes) waits a second. (Both files are
    held open, so the timer's own pulls change neither.)"""
    async with trio.open_nursery() as nursery:
        m = await live_mount(world, nursery, {"/a.md": "alpha", "/b.md": "beta"})
        hold(m, "/notes/a.md", "/notes/b.md")
        await world.svc.update(world.rw, world.ids["/a.md"], content="alpha 2")
        first = await store_counter(world)
        assert await until(lambda: m.store_status("notes")["counter_seen"] == first)

        async def second_writer(_request) -> None:  # commits while the pull fetches /a.md
            await world.svc.update(world.rw, world.ids["/b.md"], content="beta 2")
            second = await store_counter(world)
            assert await until(lambda: m.store_status("notes")["counter_seen"] == second)

        m.transport.add("GET", "/memories/" + world.ids["/a.md"] + "$", before=second_writer)
        result = await m.sync(force=False)
        assert result["ran"] and m.read_file("/notes/a.md") == b"alpha 2"
        assert m.store_status("notes")["pull_pending"], m.store_status("notes")
        result = await m.sync(force=False)  # the next tool call
        assert result["ran"], result
        assert m.read_file("/notes/b.md") == b"beta 2"
        s = m.store_status("notes")
        assert s["counter"] == await store_counter(world) and not s["pull_pending"], s
        world.svc.app.watch_hub.close()
        nursery.cancel_scope.cancel()


async def test_a_pull_that_lacks_most_of_the_store_takes_one_snapshot_instead_of_a_get_each(
    world, changes_fetched
):
    """After a busy minute a live mount lacks most of what the others wrote: one snapshot (one
    request, content included) instead of a GET per memory. A few changes still cost a GET each."""
    m = await world.setup({f"/d/f{i:02}.md": f"memory {i}" for i in range(40)})
    for i in range(30):
        await world.svc.update(world.rw, world.ids[f"/d/f{i:02}.md"], content=f"memory {i}, again")
    m.transport.clear()
    result = await m.sync()
    assert result["ok"] and result["pulled"] == 30, result
    assert m.transport.count("GET", "/snapshot$") == 1 and m.transport.count("GET", r"/memories/mem_") == 0
    assert all(m.read_file(f"/notes/d/f{i:02}.md") == f"memory {i}, again".encode() for i in range(30))
    assert m.read_file("/notes/d/f39.md") == b"memory 39"
    assert m.store_status("notes")["counter"] == await store_counter(world)
    for i in range(3):
        await world.svc.update(world.rw, world.ids[f"/d/f{i:02}.md"], content=f"memory {i}, third")
    m.transport.clear()
    assert (await m.sync())["pulled"] == 3
    assert m.transport.count("GET", "/snapshot$") == 0 and m.transport.count("GET", r"/memories/mem_") == 3


def sent_updates(m: EngineMount) -> list[str]:
    """Every update the mount sends from now on, by memory id, whether in a batch write or alone."""
    sent: list[str] = []

    async def record(request) -> None:
        if request.url.path.endswith("/memory_batch"):
            ops = json.loads(request.content)["operations"]
            sent.extend(op["memory_id"] for op in ops if op["type"] == "update")
        else:
            sent.append(request.url.path.rsplit("/", 1)[1])

    m.transport.add("POST", r"/memory_batch$", before=record, times=None)
    m.transport.add("POST", r"/memories/mem_[^/]+$", before=record, times=None)
    return sent


@pytest.mark.parametrize("batches", [True, False], ids=["batch-write", "single-requests"])
async def test_a_busy_mounts_update_answered_409_is_sent_once_though_the_rest_of_its_wave_landed(
    world, batches
):
    """A busy mount's push wave: one update meets a 409 (someone else changed that memory), the
    other lands. The landed one is progress, so one more wave looks; the 409 waits for the pull
    (a reader holds /a.md open, so a busy pull holds it back) and must not go out again to meet
    the same 409: nothing changed since it was answered (a busy pull that already knew of the
    other change, its watch having told before the wave, does not send it at all). The pull at the next
    `memfs sync` settles it, the store wins (--on-conflict store-wins; merge mode's outcome of a
    409: tests/engine/test_merge_engine.py)."""
    async with trio.open_nursery() as nursery:
        m = await live_mount(world, nursery, {"/a.md": "alpha", "/b.md": "beta"}, on_conflict="store-wins")
        hold(m, "/notes/a.md")
        if not batches:
            m.engine.pusher.has_batch = False
        a, b = world.ids["/a.md"], world.ids["/b.md"]
        await world.svc.update(world.rw, a, content="alpha from elsewhere")
        moved = await store_counter(world)
        assert await until(lambda: m.store_status("notes")["counter_seen"] == moved)
        sent = sent_updates(m)
        m.write_file("/notes/a.md", b"alpha, mine")
        m.write_file("/notes/b.md", b"beta, mine")
        assert await until(lambda: _has(world, {"/b.md": "beta, mine"})), await world.svc.contents(world.rw)
        # the engine is done with this state: no further live wave for it
        sid = world.rw
        assert await until(
            lambda: (
                m.engine.push_done.is_set()
                and m.engine.live.handled.get(sid) == m.engine.state.generation(sid)
            )
        )
        assert sent.count(b) == 1 and sent.count(a) <= 1, [{a: "a", b: "b"}[x] for x in sent]
        assert (await world.svc.contents(world.rw))["/a.md"] == "alpha from elsewhere"
        before = list(sent)
        result = await m.sync(force=False)  # between commands: the pull settles the conflict
        assert result["ran"] and m.read_file("/notes/a.md") == b"alpha from elsewhere"
        assert sent == before, sent  # the pull settled it: nothing sent again
        [notice] = [n for n in m.notices("notes") if "/a.md" in n]
        assert "store-won-conflict" in notice
        kept = Path(re.search(r"kept at (\S+?)\)", notice).group(1))
        assert kept.read_bytes() == b"alpha, mine"
        world.svc.app.watch_hub.close()
        nursery.cancel_scope.cancel()
