"""A push whose answer is the hosted API's 503 `change_outcome_unknown` (its change saved): the
client sends the same request again, meets the 409 of its own write and takes that write as the
answer, so the engine books the push in the same tick - one memory, one version, the baseline
moved, no conflict notice, nothing sent again at the next tick. Against the emulator's app in
process (`memfs serve --hosted-api --test-unavailable`: memfs/service/hosted.py)."""

from __future__ import annotations

import httpx
import pytest

from memfs.service.hosted import UNAVAILABLE_HEADER
from tests.support.inprocess import EngineWorld

pytestmark = [pytest.mark.trio, pytest.mark.timeout(30)]


def saved_but_unknown(label: str):
    """A FaultTransport hook: the request carries the emulator's test header (the same value on
    every attempt: the emulator answers it once, then lets the same request through)."""

    async def hook(request: httpx.Request) -> None:
        request.headers[UNAVAILABLE_HEADER] = f"change_outcome_unknown#{label}"

    return hook


async def test_a_create_and_a_rename_answered_change_outcome_unknown_are_booked_in_one_tick(
    emulator, tmp_path
):
    world = EngineWorld(emulator, tmp_path)
    try:
        m = await world.setup({"/a.md": "alpha"})
        m.write_file("/notes/new.md", b"brand new")
        m.rename("/notes/a.md", "/notes/b.md")
        m.transport.add("POST", r"/memories$", before=saved_but_unknown("create"), times=None)
        m.transport.add("POST", r"/memories/mem_", before=saved_but_unknown("rename"), times=None)
        result = await m.sync()
        assert result["ok"] and result["pushed"] == 2, result
        assert m.transport.count("POST", r"/memories$") == 2  # the create, the same create again
        assert m.transport.count("POST", r"/memories/mem_") == 2  # the rename, the same rename again
        assert await emulator.contents(world.rw) == {"/b.md": "alpha", "/new.md": "brand new"}
        assert not m.notices("notes"), m.notices("notes")
        assert m.store_status("notes")["staged"] == 0
        m.transport.clear()
        again = await m.sync()
        assert again["ok"] and again["pushed"] == 0, again
        assert not [r for r in m.transport.requests if r[0] in ("POST", "DELETE")]
        for memory in (await emulator.memories(world.rw)).values():
            r = await emulator.admin.get(
                f"/v1/memory_stores/{world.rw}/memory_versions", params={"memory_id": memory["id"]}
            )
            assert len(r.json()["data"]) == (2 if memory["path"] == "/b.md" else 1)  # each write once
    finally:
        await world.close()
