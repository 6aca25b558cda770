"""The worker's `write` and `edit` are told, in band, what became of a memory file another writer
changed meanwhile (SEMANTICS.md#d-merge): each scenario once, run by both official workers
unchanged — Python's EnvironmentWorker.handle_item() + memfs_tools() and the TypeScript
EnvironmentWorker + memfsTools() (workers/typescript) — against the fake platform, a real
`memfs serve` and a real mount whose view is stale (a 300 s interval, no live mode: the pre-call
sync pulls nothing)."""

from __future__ import annotations

import pytest

from tests.support.fake_platform import Step
from tests.support.worker_world import RW

pytestmark = pytest.mark.timeout(180)

STALE = ("--sync-interval", "300", "--live", "off")


def _edit_after_theirs(wworld, worker, theirs: str, mine: str) -> tuple[list[dict], list[str]]:
    """Another writer makes the store's profile.md `theirs` behind the stale mount; the worker then
    edits its `likes: grep` line into `mine` and reads the file again: the two calls' results and
    texts."""
    wworld.mount(*STALE)
    profile = wworld.memory(RW, "profile.md")
    memory_id = wworld.api.memories(wworld.rw)["/profile.md"]["id"]
    wworld.api.update(wworld.rw, memory_id, content=theirs)
    run = worker.run(
        [
            Step("edit", {"file_path": profile, "old_string": "likes: grep", "new_string": mine}),
            Step("read", {"file_path": profile}),
        ]
    )
    return run.results(), run.texts()


def test_an_edit_beside_another_writers_change_is_merged_and_says_so(wworld, worker):
    results, texts = _edit_after_theirs(
        wworld, worker, "name: agent, renamed elsewhere\nlikes: grep\n", "likes: memfs"
    )
    assert [r["is_error"] for r in results] == [False, False], texts
    assert "merged" in texts[0] and "profile.md" in texts[0], texts[0]
    merged = "name: agent, renamed elsewhere\nlikes: memfs\n"
    assert texts[1] == merged
    assert wworld.api.contents(wworld.rw)["/profile.md"] == merged


def test_an_edit_of_the_lines_another_writer_changed_fails_in_band_with_the_stores_version_in_the_file(
    wworld, worker
):
    results, texts = _edit_after_theirs(wworld, worker, "name: agent\nlikes: sed\n", "likes: awk")
    assert [r["is_error"] for r in results] == [True, False], texts
    assert "profile.md" in texts[0] and "Read the file again before you retry" in texts[0], texts[0]
    assert texts[1] == "name: agent\nlikes: sed\n"  # the agent reads again and sees the store's version
    contents = wworld.api.contents(wworld.rw)
    assert contents["/profile.md"] == "name: agent\nlikes: sed\n"
    [copy] = [p for p in contents if p.startswith("/profile.conflict-")]
    assert copy in texts[0] and contents[copy] == "name: agent\nlikes: awk\n"  # named, and on the store


def test_a_write_nobody_else_touched_is_on_the_store_when_the_tool_returns(wworld, worker):
    wworld.mount(*STALE)
    m = wworld.memory
    seen: dict = {}
    run = worker.run(
        [
            Step(
                "write",
                {"file_path": m(RW, "new/now.md"), "content": "on the store at once\n"},
                after=lambda _r: seen.update(wworld.api.contents(wworld.rw)),
            ),
        ]
    )
    assert [r["is_error"] for r in run.results()] == [False], run.texts()
    assert "memfs" not in run.texts()[0]  # nothing to tell
    assert seen.get("/new/now.md") == "on the store at once\n"  # before the next call, not at the end


def test_a_shell_append_after_another_writers_append_keeps_both_lines(wworld, worker):
    wworld.mount(*STALE)
    m = wworld.memory
    memory_id = wworld.api.memories(wworld.rw)["/notes/todo.md"]["id"]
    todo = wworld.api.contents(wworld.rw)["/notes/todo.md"]
    wworld.api.update(wworld.rw, memory_id, content=todo + "- theirs\n")
    run = worker.run([Step("bash", {"command": f"echo '- mine' >> {m(RW, 'notes/todo.md')}"})])
    assert [r["is_error"] for r in run.results()] == [False], run.texts()
    assert (
        wworld.api.contents(wworld.rw)["/notes/todo.md"] == todo + "- theirs\n- mine\n"
    )  # after the final sync
