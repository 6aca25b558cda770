"""Close-to-open (SEMANTICS.md#d-when), in process: a busy live mount applies what another writer
changed as soon as its watch tells, except to a file a process has open, which keeps the content
it was opened with until it is closed; `memfs sync` applies everything. The engine's timer runs
in the test's nursery against the real service app (tests/engine/test_engine_live.py)."""

from __future__ import annotations

import pytest
import trio

from tests.engine.test_engine_live import busy, hold, live_mount, store_counter, until

pytestmark = [pytest.mark.trio, pytest.mark.timeout(30)]


async def test_a_busy_mount_applies_a_remote_change_at_once_but_not_under_an_open_file(world):
    async with trio.open_nursery() as nursery:
        m = await live_mount(world, nursery, {"/a.md": "alpha", "/b.md": "beta", "/gone.md": "x"})
        busy(m)  # a command runs, for ever: never quiet
        [reader] = hold(m, "/notes/a.md")
        await world.svc.update(world.rw, world.ids["/a.md"], content="alpha 2")
        await world.svc.update(world.rw, world.ids["/b.md"], content="beta 2")
        await world.svc.create(world.rw, "/new.md", "new")
        await world.svc.delete(world.rw, world.ids["/gone.md"])
        # what nobody has open changes at once, directory entries included
        assert await until(
            lambda: (
                m.read_file("/notes/b.md") == b"beta 2"
                and m.exists("/notes/new.md")
                and m.read_file("/notes/new.md") == b"new"
                and not m.exists("/notes/gone.md")
            )
        ), m.store_status("notes")
        # the open file keeps its content, for that reader and for a new open while it is held
        assert m.fs.read(reader, 0, 100) == b"alpha" and m.read_file("/notes/a.md") == b"alpha"
        s = m.store_status("notes")
        assert s["pull_pending"] and s["counter"] < await store_counter(world), s
        # no pull again while the held file stays open and the store does not move: nothing a
        # pull could apply (once the watch has told the last move and its pull has run)
        final = await store_counter(world)
        assert await until(lambda: m.store_status("notes")["counter_seen"] == final)
        assert await until(lambda: not m.engine.busy)
        await trio.sleep(0.3)
        m.transport.clear()
        await trio.sleep(0.5)
        assert not [r for r in m.transport.requests if "/changes" in r[1]], m.transport.requests
        m.fs.release(reader)  # closed: the next open sees the new content
        assert await until(lambda: m.read_file("/notes/a.md") == b"alpha 2"), m.store_status("notes")
        assert await until(lambda: not m.store_status("notes")["pull_pending"])
        assert m.store_status("notes")["counter"] == await store_counter(world)
        world.svc.app.watch_hub.close()
        nursery.cancel_scope.cancel()


async def test_memfs_sync_applies_everything_though_a_file_is_open(world):
    async with trio.open_nursery() as nursery:
        m = await live_mount(world, nursery, {"/a.md": "alpha"})
        busy(m)
        [reader] = hold(m, "/notes/a.md")
        await world.svc.update(world.rw, world.ids["/a.md"], content="alpha 2")
        moved = await store_counter(world)
        assert await until(lambda: m.store_status("notes")["counter_seen"] == moved)
        result = await m.sync(force=False)  # the next tool call starts from the store's state
        assert result["ran"] and m.read_file("/notes/a.md") == b"alpha 2"
        assert m.store_status("notes")["counter"] == moved
        m.fs.release(reader)
        world.svc.app.watch_hub.close()
        nursery.cancel_scope.cancel()


async def test_a_file_opened_while_the_pull_fetched_waits_and_the_rest_lands_at_the_next_look(world):
    """The pull planned before the file was opened, so its apply waits (nothing half applied);
    the next look (0.1 s later, not the second a deferred pull waits) holds that file back and
    applies the rest."""
    async with trio.open_nursery() as nursery:
        m = await live_mount(world, nursery, {"/a.md": "alpha", "/b.md": "beta"})
        busy(m)
        opened: list[int] = []
        deferred_at: list[float] = []

        async def a_reader_opens_a(_request) -> None:  # while the pull fetches /a.md's content
            opened.extend(hold(m, "/notes/a.md"))
            deferred_at.append(trio.current_time())

        m.transport.add("GET", "/memories/" + world.ids["/a.md"] + "$", before=a_reader_opens_a)
        await world.svc.update(world.rw, world.ids["/a.md"], content="alpha 2")
        await world.svc.update(world.rw, world.ids["/b.md"], content="beta 2")
        assert await until(lambda: m.read_file("/notes/b.md") == b"beta 2"), m.store_status("notes")
        assert deferred_at and trio.current_time() - deferred_at[0] < 0.8
        assert m.fs.read(opened[0], 0, 100) == b"alpha" and m.read_file("/notes/a.md") == b"alpha"
        m.fs.release(opened[0])
        assert await until(lambda: m.read_file("/notes/a.md") == b"alpha 2"), m.store_status("notes")
        world.svc.app.watch_hub.close()
        nursery.cancel_scope.cancel()
