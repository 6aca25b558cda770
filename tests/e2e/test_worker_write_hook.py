"""anthropic 2.17's write-through hook with memfs as the memory (docs/SEMANTICS.md#d-worker).

2.17's `write`/`edit` offer a memory file to `AgentToolContext._write_memory_file` first (the worker
sets it to its `SessionMemoryStores.write_file`: save to the store, then write the file). With
memfs the worker's own memory is off, and memfs takes its folders out of that hook
(memfs/worker/_sdk.py, keep_memory_writes_in_mount): the tools write into the mount and the mount
alone uploads, once per change."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfs.worker import memfs_tools
from tests.support.fake_platform import Step
from tests.support.worker_world import RW

pytestmark = pytest.mark.timeout(120)

NEW, EDITED = "new/written.md", "profile.md"


def _write_and_edit(m) -> list[Step]:
    return [
        Step("write", {"file_path": m(RW, NEW), "content": "written by the write tool\n"}),
        Step("edit", {"file_path": m(RW, EDITED), "old_string": "likes: grep", "new_string": "likes: memfs"}),
        Step("read", {"file_path": m(RW, EDITED)}),
    ]


def _assert_landed_once(wworld, run) -> None:
    assert [r["is_error"] for r in run.results()] == [False] * 3, run.texts()
    memories = wworld.api.memories(wworld.rw)
    assert memories["/" + NEW]["content"] == "written by the write tool\n"
    assert memories["/" + EDITED]["content"] == "name: agent\nlikes: memfs\n"
    # One version per change: the seed and the edit, the write's create. A second writer would add
    # a version (or a 409 and a conflict copy).
    assert len(wworld.api.versions(wworld.rw, memories["/" + EDITED]["id"])) == 2
    assert len(wworld.api.versions(wworld.rw, memories["/" + NEW]["id"])) == 1
    assert sorted(memories) == ["/" + NEW, "/notes/todo.md", "/" + EDITED]
    files = sorted(p.name for p in (wworld.root / RW).iterdir() if not p.name.startswith("."))
    assert files == ["new", "notes", "profile.md"]  # no conflict copy
    assert sum(s["staged"] for s in wworld.box.status()["stores"]) == 0
    assert not [r for r in wworld.platform.requests if "/memory_stores" in r[1]], wworld.platform.requests
    assert run.work.stop_requests == [{"force": True}]
    assert wworld.platform.errors == []


def test_the_workers_own_hook_declines_and_the_mount_uploads_each_change_once(wworld):
    """The unchanged worker and its hook: write/edit land through the mount only."""
    wworld.mount()
    seen: dict = {}
    tools = memfs_tools(root=wworld.root)

    def factory(ctx):
        seen["hook"] = getattr(ctx, "_write_memory_file", "absent")  # the worker's, before memfs
        return tools(ctx)

    run = wworld.run_item(_write_and_edit(wworld.memory), tools=factory)
    import anthropic

    if tuple(int(x) for x in anthropic.__version__.split(".")[:2]) >= (2, 17):
        assert callable(seen["hook"]), "2.17's worker sets AgentToolContext._write_memory_file"
    _assert_landed_once(wworld, run)


def test_a_hook_that_would_save_memory_files_is_never_asked_for_the_mounts(wworld):
    """A hook that saves to the store and then writes the file (what 2.17's does when the worker's own
    memory holds the folder) is kept out of the mount's folders: no second writer, no conflict."""
    wworld.mount()
    if not hasattr(_context_class(), "_write_memory_file"):
        pytest.skip("anthropic < 2.17: the file tools have no write hook")
    asked: list[Path] = []
    tools = memfs_tools(root=wworld.root)
    api, store, root = wworld.api, wworld.rw, (wworld.root / RW).resolve()

    async def save_then_write(path: Path, text: str, replacing: str | None) -> bool:
        asked.append(path)
        if not path.is_relative_to(root):
            return False
        rel = "/" + path.relative_to(root).as_posix()
        listed = api.memories(store).get(rel)
        if listed is None:
            api.create(store, rel, text)
        else:
            api.update(store, listed["id"], content=text)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return True

    def factory(ctx):
        ctx._write_memory_file = save_then_write
        return tools(ctx)

    run = wworld.run_item(_write_and_edit(wworld.memory), tools=factory)
    assert asked == []
    _assert_landed_once(wworld, run)


def _context_class():
    from memfs.worker._sdk import AgentToolContext

    return AgentToolContext(workdir=Path("/"))
