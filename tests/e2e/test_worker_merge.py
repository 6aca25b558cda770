"""The worker's `write` and `edit` are told, in band, what became of a memory file another writer
changed meanwhile (SEMANTICS.md#d-merge): each scenario once, run by both official workers
unchanged — Python's EnvironmentWorker.handle_item() + memfs_tools() and the TypeScript
EnvironmentWorker + memfsTools() (workers/typescript) — against the fake platform, a real
`memfs serve` and a real mount whose view is stale (a 300 s interval, no live mode: the pre-call
sync pulls nothing)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.test_typescript_worker import run_ts_item, ts_package  # noqa: F401  (fixture)
from tests.support.fake_platform import Step
from tests.support.worker_world import RW

pytestmark = pytest.mark.timeout(180)

STALE = ("--sync-interval", "300", "--live", "off")


@pytest.fixture(params=["python", "typescript"])
def run_item(request, wworld) -> Callable:
    """Runs a script with one worker; returns the ItemRun (its results and texts)."""
    if request.param == "python":
        return wworld.run_item
    package = request.getfixturevalue("ts_package")

    def run(script: list[Step]):
        item, proc = run_ts_item(wworld, package, script)
        assert proc.returncode == 0, proc.stderr
        return item

    return run


def test_an_edit_beside_another_writers_change_is_merged_and_says_so(wworld, run_item):
    wworld.mount(*STALE)
    m = wworld.memory
    memory_id = wworld.api.memories(wworld.rw)["/profile.md"]["id"]
    wworld.api.update(wworld.rw, memory_id, content="name: agent, renamed elsewhere\nlikes: grep\n")
    run = run_item(
        [
            Step(
                "edit",
                {"file_path": m(RW, "profile.md"), "old_string": "likes: grep", "new_string": "likes: memfs"},
            ),
            Step("read", {"file_path": m(RW, "profile.md")}),
        ]
    )
    results, texts = run.results(), run.texts()
    assert [r["is_error"] for r in results] == [False, False], texts
    assert "merged" in texts[0] and "profile.md" in texts[0], texts[0]
    merged = "name: agent, renamed elsewhere\nlikes: memfs\n"
    assert texts[1] == merged
    assert wworld.api.contents(wworld.rw)["/profile.md"] == merged


def test_an_edit_of_the_lines_another_writer_changed_fails_in_band_with_the_stores_version_in_the_file(
    wworld, run_item
):
    wworld.mount(*STALE)
    m = wworld.memory
    memory_id = wworld.api.memories(wworld.rw)["/profile.md"]["id"]
    wworld.api.update(wworld.rw, memory_id, content="name: agent\nlikes: sed\n")
    run = run_item(
        [
            Step(
                "edit",
                {"file_path": m(RW, "profile.md"), "old_string": "likes: grep", "new_string": "likes: awk"},
            ),
            Step("read", {"file_path": m(RW, "profile.md")}),
        ]
    )
    results, texts = run.results(), run.texts()
    assert [r["is_error"] for r in results] == [True, False], texts
    assert "profile.md" in texts[0] and "Read the file again before you retry" in texts[0], texts[0]
    assert texts[1] == "name: agent\nlikes: sed\n"  # the agent reads again and sees the store's version
    contents = wworld.api.contents(wworld.rw)
    assert contents["/profile.md"] == "name: agent\nlikes: sed\n"
    [copy] = [p for p in contents if p.startswith("/profile.conflict-")]
    assert copy in texts[0] and contents[copy] == "name: agent\nlikes: awk\n"  # named, and on the store


def test_a_write_nobody_else_touched_is_on_the_store_when_the_tool_returns(wworld, run_item):
    wworld.mount(*STALE)
    m = wworld.memory
    seen: dict = {}
    run = run_item(
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


def test_a_shell_append_after_another_writers_append_keeps_both_lines(wworld, run_item):
    wworld.mount(*STALE)
    m = wworld.memory
    memory_id = wworld.api.memories(wworld.rw)["/notes/todo.md"]["id"]
    todo = wworld.api.contents(wworld.rw)["/notes/todo.md"]
    wworld.api.update(wworld.rw, memory_id, content=todo + "- theirs\n")
    run = run_item([Step("bash", {"command": f"echo '- mine' >> {m(RW, 'notes/todo.md')}"})])
    assert [r["is_error"] for r in run.results()] == [False], run.texts()
    assert (
        wworld.api.contents(wworld.rw)["/notes/todo.md"] == todo + "- theirs\n- mine\n"
    )  # after the final sync
