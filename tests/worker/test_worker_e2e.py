"""The unchanged EnvironmentWorker.handle_item() + memfs_tools() against the fake platform, a real
`memfs serve` and a real mount (SPEC §8, issue 14)."""

from __future__ import annotations

import pytest

from tests.worker.conftest import RW
from tests.worker.fake_platform import Step

pytestmark = pytest.mark.timeout(120)


def test_every_tool_lands_in_the_store_before_the_item_stops(wworld):
    wworld.mount()
    m = wworld.memory
    at_stop: dict = {}
    wworld.platform.on_stop = lambda work: at_stop.update(wworld.api.contents(wworld.rw))
    run = wworld.run_item([
        Step("bash", {"command": f"echo 'from bash' > {m(RW, 'bash.md')} && cat {m(RW, 'notes/todo.md')}"}),
        Step("read", {"file_path": m(RW, "notes/todo.md")}),
        Step("write", {"file_path": m(RW, "new/written.md"), "content": "written by the write tool\n"}),
        Step("edit", {"file_path": m(RW, "profile.md"), "old_string": "likes: grep", "new_string": "likes: memfs"}),
        Step("glob", {"pattern": "**/*.md", "path": m(RW, "")}),
        Step("grep", {"pattern": "buy milk", "path": m(RW, "")}),
    ])
    results = run.results()
    assert [r["is_error"] for r in results] == [False] * 6, run.texts()
    texts = run.texts()
    assert "buy milk" in texts[0] and "buy milk" in texts[1]
    assert "written.md" in texts[4] and "bash.md" in texts[4]
    assert "todo.md" in texts[5]
    assert run.work.stop_requests == [{"force": True}]
    assert at_stop["/bash.md"] == "from bash\n"
    assert at_stop["/new/written.md"] == "written by the write tool\n"
    assert at_stop["/profile.md"] == "name: agent\nlikes: memfs\n"
    assert wworld.platform.errors == []
