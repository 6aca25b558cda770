"""The state dir's upkeep (memfs/mount/upkeep.py) wired to the engine as the session wires it
(memfs/session/daemon.py): no sweep of the blobs while a tick fetches or a push sends, a sweep
after them that keeps everything the mount shows. In process (tests/support/inprocess.py)."""

from __future__ import annotations

import pytest

from memfs.mount.upkeep import StateUpkeep
from tests.support.inprocess import MEMORY_BY_ID, EngineWorld, single_requests

pytestmark = [pytest.mark.trio, pytest.mark.timeout(20)]


async def test_no_sweep_while_a_tick_fetches_or_a_push_sends_and_one_after(
    world: EngineWorld, changes_fetched
):
    m = await world.setup({"/a.md": "alpha"})
    single_requests(m)
    upkeep = StateUpkeep(m.state, m.fs.live_shas, lambda: m.engine.busy)
    await world.svc.update(world.rw, world.ids["/a.md"], content="alpha, edited elsewhere")
    m.write_file("/notes/b.md", b"written here")
    swept_in_flight: list[bool] = []

    async def sweep(_request) -> None:  # the upkeep's sweep falls due mid-tick
        swept_in_flight.append(upkeep.sweep())

    m.transport.add("GET", MEMORY_BY_ID, before=sweep)  # the tick's fetch of the edited memory
    m.transport.add("POST", r"/memories$", before=sweep)  # the push of the new file
    assert not m.engine.busy
    result = await m.sync()
    assert result["ok"] and result["pulled"] == 1 and result["pushed"] == 1
    assert swept_in_flight == [False, False]
    assert not m.engine.busy and upkeep.sweep()
    assert m.read_file("/notes/a.md") == b"alpha, edited elsewhere"
    assert m.read_file("/notes/b.md") == b"written here"
