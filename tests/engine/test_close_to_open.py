"""Close-to-open (SEMANTICS.md#d-when), in process: a busy live mount applies what another writer
changed as soon as its watch tells, except to a file a process has open, which keeps the content
it was opened with until it is closed, or one with a staged change, settled between commands;
`memfs sync` applies everything. A mount that polls (the hosted API) runs its due poll while busy
the same way, at the pace it polls anyway. The engine's timer runs in the test's nursery against
the real service app (tests/engine/test_engine_live.py)."""

from __future__ import annotations

import math
import os
import time

import pytest
import trio

from tests.engine.test_engine_live import busy, hold, live_mount, sent_updates, store_counter, until
from tests.support.inprocess import EngineWorld, InProcessService

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
        await _no_pull_while_held(m, world, settle=0.3)
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


async def test_a_file_opened_while_the_pull_fetched_waits_and_the_rest_lands_at_the_next_look(
    world, changes_fetched
):
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


async def test_a_busy_mount_with_a_staged_change_applies_the_rest_of_its_store(world):
    """A store with a staged change that met someone else's (the store changed /a.md while a
    reader held it open, then the agent wrote its own): a busy mount's pull leaves the staged
    file as it is (no push of it meets the same 409 again) and applies every other change of the
    store; the conflict is settled between commands, as before (`memfs sync` merges the two)."""
    lines = [f"line {i}\n" for i in range(8)]
    async with trio.open_nursery() as nursery:
        m = await live_mount(world, nursery, {"/a.md": "".join(lines), "/b.md": "beta"})
        [reader] = hold(m, "/notes/a.md")
        theirs = "".join(["theirs\n", *lines[1:]])
        await world.svc.update(world.rw, world.ids["/a.md"], content=theirs)
        moved = await store_counter(world)
        assert await until(lambda: m.store_status("notes")["counter_seen"] == moved)
        sent = sent_updates(m)
        mine = "".join([*lines[:-1], "mine\n"])
        m.write_file("/notes/a.md", mine.encode())  # staged: its base is what the reader holds
        m.fs.release(reader)
        await world.svc.update(world.rw, world.ids["/b.md"], content="beta 2")
        await world.svc.create(world.rw, "/new.md", "new")
        # busy, with a change staged: what the agent did not change arrives all the same
        assert await until(lambda: m.read_file("/notes/b.md") == b"beta 2" and m.exists("/notes/new.md")), (
            m.store_status("notes")
        )
        assert m.read_file("/notes/a.md") == mine.encode()
        s = m.store_status("notes")
        final = await store_counter(world)
        assert s["pull_pending"] and s["counter"] < final, s
        # no pull again while the held file stays staged and the store does not move
        await _no_pull_while_held(m, world, settle=0.5)
        assert sent.count(world.ids["/a.md"]) <= 1, sent  # the 409 is not met again and again
        result = await m.sync(force=False)  # between commands: the conflict is settled (merged)
        assert (
            result["ran"]
            and m.read_file("/notes/a.md") == "".join(["theirs\n", *lines[1:-1], "mine\n"]).encode()
        )
        assert await until(lambda: _on_store(world, "/a.md", "mine\n"))
        world.svc.app.watch_hub.close()
        nursery.cancel_scope.cancel()


async def test_a_mount_that_writes_all_the_time_pulls_busy_and_pushes_once_it_stops(world):
    """A command appends to a file every 0.05 s (never pushed: the debounce never passes) while
    another writer's changes arrive: each is pulled at once, the staged file left as it is, and no
    pull pushes the half-done burst (its own push would move the store and pull again, a loop);
    the burst is one push after it ends."""
    async with trio.open_nursery() as nursery:
        m = await live_mount(world, nursery, {"/log.md": "", "/b.md": "beta"})
        sent = sent_updates(m)
        log = b""
        for i in range(40):
            log += f"entry {i}\n".encode()
            m.write_file("/notes/log.md", log)
            if i % 10 == 5:
                want = f"beta {i}"
                await world.svc.update(world.rw, world.ids["/b.md"], content=want)
                assert await until(lambda w=want.encode(): m.read_file("/notes/b.md") == w, timeout=2)
            await trio.sleep(0.05)
        assert sent == [], sent  # nothing pushed mid-burst
        assert await until(lambda: _on_store(world, "/log.md", "entry 39\n"))
        assert sent == [world.ids["/log.md"]], sent
        world.svc.app.watch_hub.close()
        nursery.cancel_scope.cancel()


async def test_a_pull_that_holds_a_file_back_fetches_what_it_applies_and_takes_no_snapshot(world):
    """A busy pull that lacks most of the store would take a snapshot, but a snapshot is the whole
    store, the held file's change included: its plan would touch the open file and its apply
    wait, and the next look take the snapshot again. It fetches what it applies instead."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(world.svc.app.watch_hub.run)
        m = await world.setup({f"/d/f{i:02}.md": f"memory {i}" for i in range(40)}, interval=300.0)
        busy(m)
        [reader] = hold(m, "/notes/d/f00.md")
        for i in range(30):  # before the mount watches: one pull finds them all
            await world.svc.update(world.rw, world.ids[f"/d/f{i:02}.md"], content=f"memory {i}, again")
        m.transport.clear()
        nursery.start_soon(m.engine.timer)
        assert await until(
            lambda: all(
                m.read_file(f"/notes/d/f{i:02}.md") == f"memory {i}, again".encode() for i in range(1, 30)
            )
        ), m.store_status("notes")
        assert m.fs.read(reader, 0, 100) == b"memory 0"
        assert m.transport.count("GET", "/snapshot$") == 0, m.transport.requests
        m.fs.release(reader)
        assert await until(lambda: m.read_file("/notes/d/f00.md") == b"memory 0, again")
        world.svc.app.watch_hub.close()
        nursery.cancel_scope.cancel()


async def _no_pull_while_held(m, world, *, settle: float) -> None:
    """Once the watch has told the store's last move and the mount is idle (after `settle` s),
    half a second goes by without a changes read: nothing a pull could apply is asked again."""
    final = await store_counter(world)
    assert await until(lambda: m.store_status("notes")["counter_seen"] == final)
    assert await until(lambda: not m.engine.busy)
    await trio.sleep(settle)
    m.transport.clear()
    await trio.sleep(0.5)
    assert not [r for r in m.transport.requests if "/changes" in r[1]], m.transport.requests


async def _on_store(world, path: str, tail: str) -> bool:
    return (await world.svc.contents(world.rw))[path].endswith(tail)


@pytest.fixture
async def hosted(tmp_path):
    """The service without its extensions (no counter, no watch: SEMANTICS.md#d-no-counter)."""
    s = InProcessService(tmp_path / "hosted", extensions=False)
    try:
        yield s
    finally:
        await s.aclose()


async def test_a_busy_mount_polling_the_hosted_api_runs_its_due_poll_close_to_open(hosted, tmp_path):
    """No watch: a due poll runs while the mount is busy, as a live pull does (an open file and a
    staged one keep their content, the rest arrives), one per interval as while the mount is used
    (each reads the store's version feed once; no extra poll), and the file held open gets its
    change at the first poll after its close."""
    world = EngineWorld(hosted, tmp_path)
    lines = [f"line {i}\n" for i in range(8)]
    try:
        async with trio.open_nursery() as nursery:
            m = await world.setup({"/a.md": "alpha", "/b.md": "beta", "/c.md": "".join(lines)}, interval=1.0)
            assert m.engine.has_counter is False
            busy(m)
            nursery.start_soon(m.engine.timer)
            notes, ids = world.rw, world.ids
            reader, c_reader = hold(m, "/notes/a.md", "/notes/c.md")
            await hosted.update(notes, ids["/a.md"], content="alpha 2")
            await hosted.update(notes, ids["/c.md"], content="".join(["theirs\n", *lines[1:]]))
            assert await until(lambda: notes in m.engine.store_pull.held)  # a busy poll held both
            mine = "".join([*lines[:-1], "mine\n"])
            m.write_file("/notes/c.md", mine.encode())  # staged, and the store changed it meanwhile
            m.fs.release(c_reader)
            m.transport.clear()
            start = trio.current_time()
            await hosted.update(notes, ids["/b.md"], content="beta 2")
            assert await until(lambda: m.read_file("/notes/b.md") == b"beta 2", timeout=5)
            assert m.read_file("/notes/a.md") == b"alpha" and m.read_file("/notes/c.md") == mine.encode()
            await trio.sleep(3.0)
            elapsed = trio.current_time() - start
            polls = m.transport.count("GET", notes + "/memory_versions$")
            assert 2 <= polls <= elapsed / 1.0 + 1, m.transport.requests
            assert not m.transport.count("POST", ids["/c.md"]), m.transport.requests  # no 409 again
            m.fs.release(reader)  # closed: the next poll brings its change
            assert await until(lambda: m.read_file("/notes/a.md") == b"alpha 2", timeout=5)
            assert m.read_file("/notes/c.md") == mine.encode()
            result = await m.sync()  # between commands: the conflict is settled (merged)
            assert (
                result["ok"]
                and m.read_file("/notes/c.md") == "".join(["theirs\n", *lines[1:-1], "mine\n"]).encode()
            )
            nursery.cancel_scope.cancel()
    finally:
        await world.close()


async def test_a_quiet_mount_pushes_its_staged_change_while_a_held_file_stays_open(world):
    """Quiet, a store with staged changes is pulled whole (its conflicts settled), holding
    nothing back: with the file a remote change waits for still open, that pull's whole apply
    would wait, and its pushes with it, at every look. It waits for the close instead, and the
    staged change goes out after the debounce meanwhile."""
    async with trio.open_nursery() as nursery:
        m = await live_mount(world, nursery, {"/a.md": "alpha", "/b.md": "beta"})
        [reader] = hold(m, "/notes/a.md")
        await world.svc.update(world.rw, world.ids["/a.md"], content="alpha 2")
        moved = await store_counter(world)
        assert await until(lambda: m.store_status("notes")["pull_pending"])
        assert await until(lambda: m.store_status("notes")["counter_seen"] == moved)
        m.fs.last_activity = -math.inf  # quiet from now on
        m.write_file("/notes/b.md", b"beta, mine")
        m.fs.last_activity = -math.inf
        assert await until(lambda: _on_store(world, "/b.md", "beta, mine")), m.store_status("notes")
        assert m.fs.read(reader, 0, 100) == b"alpha"
        m.fs.release(reader)
        assert await until(lambda: m.read_file("/notes/a.md") == b"alpha 2"), m.store_status("notes")
        world.svc.app.watch_hub.close()
        nursery.cancel_scope.cancel()


async def test_a_quiet_pull_deferred_by_a_file_opened_during_its_fetch_still_pushes_the_staged_change(
    world, changes_fetched
):
    """Quiet, with a change staged, a remote change's pull fetches its content and a reader opens
    that file meanwhile: the apply waits (nothing half applied). The staged change must not wait
    with it for as long as the reader keeps the file open: it goes out without another change.
    With another staged change that the store changed too (/c.md: it waits for the pull that
    settles it), the store is not pulled again until that file is closed: each pull would wait
    the same way."""
    async with trio.open_nursery() as nursery:
        m = await live_mount(world, nursery, {"/a.md": "alpha", "/b.md": "beta", "/c.md": "gamma\n"})
        opened: list[int] = []

        async def a_reader_opens_a(_request) -> None:  # while the pull fetches /a.md's content
            if not opened:
                opened.extend(hold(m, "/notes/a.md"))

        m.transport.add("GET", "/memories/" + world.ids["/a.md"] + "$", before=a_reader_opens_a)
        m.fs.last_activity = -math.inf  # quiet from now on
        m.write_file("/notes/b.md", b"beta, mine")
        m.write_file("/notes/c.md", b"gamma\nmine\n")
        m.fs.last_activity = -math.inf
        await world.svc.update(world.rw, world.ids["/c.md"], content="theirs\ngamma\n")
        await world.svc.update(world.rw, world.ids["/a.md"], content="alpha 2")
        assert await until(lambda: bool(opened)), m.store_status("notes")
        assert await until(lambda: _on_store(world, "/b.md", "beta, mine")), m.store_status("notes")
        # not pulled again while that file stays open and the store does not move (once the
        # pull after our own push has waited too; before, one a second)
        final = await store_counter(world)
        assert await until(lambda: m.store_status("notes")["counter_seen"] == final)
        await trio.sleep(1.5)
        m.transport.clear()
        await trio.sleep(2.5)
        assert not [r for r in m.transport.requests if "/changes" in r[1]], m.transport.requests
        assert m.fs.read(opened[0], 0, 100) == b"alpha"
        m.fs.release(opened[0])
        assert await until(lambda: m.read_file("/notes/a.md") == b"alpha 2"), m.store_status("notes")
        assert await until(lambda: _on_store(world, "/c.md", "theirs\ngamma\nmine\n")), m.store_status(
            "notes"
        )
        world.svc.app.watch_hub.close()
        nursery.cancel_scope.cancel()


async def test_a_polling_mount_pushes_its_staged_change_while_a_file_the_store_changed_is_being_written(
    hosted, tmp_path
):
    """A polling tick (the hosted API) whose apply waits for a file some process is writing (the
    store changed it: nothing half applied, nothing of the store's change in the view) still
    pushes the store's other staged changes: the writer may hold its file for hours, and until
    the close they would be only in this sandbox. The store's change is settled after the close."""
    world = EngineWorld(hosted, tmp_path)
    try:
        async with trio.open_nursery() as nursery:
            m = await world.setup({"/a.md": "alpha", "/b.md": "beta"}, interval=1.0)
            nursery.start_soon(m.engine.timer)
            notes, ids = world.rw, world.ids
            fh = m.fs.open(m.ino("/notes/a.md"), os.O_WRONLY).fh
            m.fs.write(fh, 0, b"alpha, being written")
            m.write_file("/notes/b.md", b"beta, mine")
            m.fs.last_activity = time.monotonic() - 1.5  # used since the last poll, quiet now
            await hosted.update(notes, ids["/a.md"], content="alpha 2")

            async def b_landed() -> bool:
                return (await hosted.contents(notes))["/b.md"] == "beta, mine"

            assert await until(b_landed, timeout=8), m.store_status("notes")
            assert m.read_file("/notes/a.md") == b"alpha, being written"  # the store's waits
            assert (await hosted.contents(notes))["/a.md"] == "alpha 2"
            m.fs.release(fh)
            assert (await m.sync())["ok"]  # between commands: the store's change and the writer's

            async def both_kept() -> bool:  # the same line changed on both sides: a conflict copy
                got = await hosted.contents(notes)
                return got["/a.md"] == "alpha 2" and "alpha, being written" in got.values()

            assert await both_kept(), await hosted.contents(notes)
            nursery.cancel_scope.cancel()
    finally:
        await world.close()
