"""What the agent wrote leaves the sandbox while another file is held (SEMANTICS.md#d-when): in
every mode a mount syncs in (live, polling a service with the counter, polling the hosted API),
busy or quiet, a closed change to /b.md reaches the store within a few seconds, with no further
use of the mount, while a process holds /a.md, which the store changed meanwhile: open for
reading from before, open with unflushed writes, or opened by the first request the mount sends
after it. (A quiet polling pull that waited for the writer held the staged change until the
writer's close: the written-quiet cases. A live pull that met a file opened during its fetch did
too: tests/engine/test_close_to_open.py.) In process, the engine's own timer against the real
service app."""

from __future__ import annotations

import math
import os
import time

import pytest
import trio

from tests.engine.test_engine_live import hold, until
from tests.support.inprocess import EngineWorld, InProcessService

pytestmark = [pytest.mark.trio, pytest.mark.timeout(60)]


@pytest.mark.parametrize("mode", ["live", "polling", "hosted"])
@pytest.mark.parametrize("busy", [True, False], ids=["busy", "quiet"])
@pytest.mark.parametrize("held_as", ["read", "written", "opened-during-fetch"])
async def test_a_closed_change_reaches_the_store_while_a_file_the_store_changed_is_held(
    tmp_path, mode, busy, held_as
):
    svc = InProcessService(tmp_path / "service", extensions=mode != "hosted")
    world = EngineWorld(svc, tmp_path)
    try:
        async with trio.open_nursery() as nursery:
            if mode == "live":  # the watch's change source (a served app runs it for its lifespan)
                nursery.start_soon(svc.app.watch_hub.run)
            m = await world.setup({"/a.md": "alpha\n", "/b.md": "beta\n"}, interval=1.0)
            if mode == "polling":
                m.engine.live.wanted = False  # `--live off`
            nursery.start_soon(m.engine.timer)
            notes, ids = world.rw, world.ids
            held: list[int] = []

            async def a_reader_opens_a(_request) -> None:  # the first request the mount sends
                if not held:
                    held.extend(hold(m, "/notes/a.md"))

            if held_as == "read":
                held.extend(hold(m, "/notes/a.md"))
            elif held_as == "written":
                fh = m.fs.open(m.ino("/notes/a.md"), os.O_WRONLY).fh
                m.fs.write(fh, 0, b"alpha, being written\n")
                held.append(fh)
            else:
                m.transport.add("GET", r".", before=a_reader_opens_a)
            m.write_file("/notes/b.md", b"beta, mine\n")
            # a command that goes on for ever, or the write was the last use (quiet a second later)
            m.fs.last_activity = math.inf if busy else time.monotonic()
            await svc.update(notes, ids["/a.md"], content="alpha 2\n")

            async def landed() -> bool:
                return (await svc.contents(notes))["/b.md"] == "beta, mine\n"

            assert await until(landed, timeout=8), m.store_status("notes")
            assert held, "nothing held /a.md: nothing was tested"
            for fh in held:
                m.fs.release(fh)
            if mode == "live":
                svc.app.watch_hub.close()
            nursery.cancel_scope.cancel()
    finally:
        await world.close()
        await svc.aclose()
