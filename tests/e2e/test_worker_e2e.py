"""Both official workers, unchanged, against the fake platform, a real `memfs serve` and a real
mount (docs/SEMANTICS.md#d-worker): each scenario written once and run by Python's
EnvironmentWorker.handle_item() + memfs_tools() and by the TypeScript EnvironmentWorker +
memfsTools() under node (workers/typescript), through the `worker` fixture
(tests/support/worker_world.py); then what only the Python worker has. What only the TypeScript
package has is in test_typescript_worker.py."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from memfs.worker import MemfsSessionError
from memfs.worker._sdk import LEASE_RULES
from tests.support.fake_platform import Step
from tests.support.worker_world import RO, RW

pytestmark = pytest.mark.timeout(180)


def test_every_tool_lands_in_the_store_before_the_item_stops_each_call_syncing_first(wworld, spy, worker):
    wworld.mount()
    m = wworld.memory
    at_stop: dict = {}
    wworld.platform.on_stop = lambda work: at_stop.update(wworld.api.contents(wworld.rw))
    run = worker.run(
        [
            Step(
                "bash", {"command": f"echo 'from bash' > {m(RW, 'bash.md')} && cat {m(RW, 'notes/todo.md')}"}
            ),
            Step("read", {"file_path": m(RW, "notes/todo.md")}),
            Step("write", {"file_path": m(RW, "new/written.md"), "content": "written by the write tool\n"}),
            Step(
                "edit",
                {"file_path": m(RW, "profile.md"), "old_string": "likes: grep", "new_string": "likes: memfs"},
            ),
            Step("glob", {"pattern": "**/*.md", "path": m(RW, "")}),
            Step("grep", {"pattern": "buy milk", "path": m(RW, "")}),
        ]
    )
    texts = run.texts()
    assert [r["is_error"] for r in run.results()] == [False] * 6, texts
    assert "buy milk" in texts[0] and "buy milk" in texts[1]
    assert "written.md" in texts[4] and "bash.md" in texts[4]
    assert "todo.md" in texts[5]
    assert run.work.stop_requests == [{"force": True}]
    assert at_stop["/bash.md"] == "from bash\n"
    assert at_stop["/new/written.md"] == "written by the write tool\n"
    assert at_stop["/profile.md"] == "name: agent\nlikes: memfs\n"
    # One non-forced, non-waiting sync before each call, then the final one, forced and waiting.
    assert spy.syncs() == [(False, False)] * 6 + [(True, True)]
    assert "final sync done" in run.output, run.output
    assert wworld.platform.errors == []


def test_a_read_only_store_refuses_writes_through_every_tool(wworld, worker):
    wworld.mount()
    m = wworld.memory
    style = m(RO, "handbook/style.md")
    run = worker.run(
        [
            Step("write", {"file_path": style, "content": "overwritten\n"}),
            Step("write", {"file_path": m(RO, "handbook/new.md"), "content": "new\n"}),
            Step("edit", {"file_path": style, "old_string": "short", "new_string": "long"}),
            Step("bash", {"command": f"echo more >> {style}"}),
            Step("bash", {"command": f"rm {style}"}),
            Step("read", {"file_path": style}),
        ]
    )
    results, texts = run.results(), run.texts()
    assert [r["is_error"] for r in results] == [True] * 5 + [False], texts
    for text in texts[:3]:
        assert "read-only directory" in text, text
    for text in texts[3:5]:
        assert "Read-only file system" in text, text  # EROFS from the mount itself
    assert texts[5] == "Write short sentences.\n"
    assert wworld.api.contents(wworld.ro) == {"/handbook/style.md": "Write short sentences.\n"}


def test_an_oversized_write_or_edit_is_refused_and_the_memory_keeps_its_content(wworld, worker):
    wworld.mount()
    m = wworld.memory
    profile = m(RW, "profile.md")
    big = "x" * 102_401
    run = worker.run(
        [
            Step("write", {"file_path": profile, "content": big}),
            Step("read", {"file_path": profile}),
            Step("edit", {"file_path": profile, "old_string": "grep", "new_string": "y" * 102_400}),
            Step("read", {"file_path": profile}),
            Step("write", {"file_path": m(RW, "fits.md"), "content": "é" * 51_200}),  # exactly 102,400 bytes
        ]
    )
    results, texts = run.results(), run.texts()
    assert [r["is_error"] for r in results] == [True, False, True, False, False], texts
    assert (
        "102,401 bytes" in texts[0]
        and "at most 102,400 bytes" in texts[0]
        and "Nothing was written" in texts[0]
    )
    assert "the edited file would be" in texts[2]
    assert texts[1] == texts[3] == "name: agent\nlikes: grep\n"
    contents = wworld.api.contents(wworld.rw)
    assert contents["/profile.md"] == "name: agent\nlikes: grep\n"
    assert contents["/fits.md"] == "é" * 51_200


def test_concurrent_calls_of_several_threads_each_sync_first_and_land(wworld, spy, worker):
    """anthropic 2.16 and @anthropic-ai/sdk 1.16 run calls of different session threads at once
    (max_concurrent_calls, maxConcurrentCalls): each call's pre-call sync gets its own answer, every
    call runs, the final sync comes after all."""
    wworld.mount()
    m = wworld.memory
    marks = wworld.tmp / "marks"
    marks.mkdir()
    n = 4

    def call(k: int) -> Step:
        # Each call waits (20 s at most) until every call has started: only calls that run at once
        # all get past it and write their file.
        all_started = f"[ $(ls {marks} | wc -l) -ge {n} ]"
        command = (
            f"touch {marks}/{k}; for i in $(seq 200); do {all_started} && break; sleep 0.1; done; "
            f"{all_started} && mkdir -p {m(RW, 'threads')} && echo 'thread {k}' > {m(RW, f'threads/t{k}.md')}"
        )
        return Step("bash", {"command": command}, thread=f"sthr_{k}")

    run = worker.run([call(k) for k in range(n)], max_concurrent_calls=n)
    assert [r["is_error"] for r in run.results()] == [False] * n, run.texts()
    contents = wworld.api.contents(wworld.rw)
    assert [contents.get(f"/threads/t{k}.md") for k in range(n)] == [f"thread {k}\n" for k in range(n)]
    assert spy.syncs() == [(False, False)] * n + [(True, True)]
    assert run.work.stop_requests == [{"force": True}]
    assert wworld.platform.errors == []


def test_a_remote_edit_between_two_calls_is_seen_by_the_later_read(wworld, worker):
    wworld.mount()
    m = wworld.memory
    memory_id = wworld.api.memories(wworld.rw)["/profile.md"]["id"]

    def edit_remotely(_result):
        wworld.api.update(wworld.rw, memory_id, content="name: agent\nlikes: remote edits\n")
        # The model thinks until the mount's next tick is due (this service has no watch, so a
        # change is pulled by the first sync once the interval has passed: docs/SEMANTICS.md#d-when).
        time.sleep(wworld.box.status()["next_tick_in"] + 0.2)

    run = worker.run(
        [
            Step("read", {"file_path": m(RW, "profile.md")}, after=edit_remotely),
            Step("read", {"file_path": m(RW, "profile.md")}),
        ]
    )
    assert run.texts() == ["name: agent\nlikes: grep\n", "name: agent\nlikes: remote edits\n"]


@pytest.mark.expected_log(rf"ERROR {re.escape(LEASE_RULES.logger)}: lease lost")
def test_a_lost_lease_stops_the_item_without_a_final_push(wworld, spy, worker):
    wworld.mount()
    m = wworld.memory
    holder: dict = {}

    def another_worker_claims_it(_result):
        wworld.server.call(lambda: wworld.platform.lose_lease(holder["work"].id))
        time.sleep(3)  # heartbeats come every second (TTL 2 s): the worker meets the 412 meanwhile

    script = [
        Step(
            "write",
            {"file_path": m(RW, "mine.md"), "content": "written before the lease was lost\n"},
            after=another_worker_claims_it,
        ),
        Step("write", {"file_path": m(RW, "late.md"), "content": "must not run\n"}),
    ]
    original = wworld.item
    wworld.item = lambda s, **kw: holder.setdefault("work", original(s, **kw))
    run = worker.run(script)
    assert len(run.results()) == 1, run.output
    assert run.work.stop_requests == [], "a worker that lost the lease must not stop the item"
    assert (True, True) not in spy.syncs(), "no final forced sync after a lost lease"
    assert "lease was lost; no final sync" in run.output, run.output
    assert not (wworld.root / RW / "late.md").exists()


def test_a_mount_of_other_stores_fails_the_item_clearly(wworld, api, worker):
    other = api.create_session([(wworld.rw, "read_write")])  # the handbook is missing
    wworld.box.env["ANTHROPIC_SESSION_ID"] = other["id"]
    wworld.box.env["ANTHROPIC_WORK_SECRET"] = other["work_secret"]
    wworld.mount()
    run = worker.run([Step("bash", {"command": "true"})], fails=MemfsSessionError)
    message = run.error or ""
    assert "not this session's" in message and wworld.ro in message and "memfs mount" in message
    assert run.work.stop_requests == [{"force": True}]  # failed, not left until its lease expires
    assert run.results() == []


@pytest.mark.expected_log(
    r"ERROR memfs.worker: session \S+: final sync failed: the memfs daemon .* did not answer"
)
def test_a_stopped_daemon_makes_the_pre_call_sync_give_up_and_the_tool_still_runs(wworld, via, worker):
    # Through the daemon's control socket or its sync-only one (`via` mounts): a ping on a second
    # connection finds the stopped daemon within 2 s (5 s for the final sync). Without it the
    # pre-call sync would wait its whole 20 s and the final sync its 35 s: more than this item's 40 s.
    plain = wworld.workdir / "plain.txt"
    plain.write_text("outside the memory\n")
    pid = wworld.box.daemon_pid()
    assert pid
    try:
        run = worker.run(
            [
                Step(
                    "read",
                    {"file_path": wworld.memory(RW, "profile.md")},
                    after=lambda _r: os.kill(pid, signal.SIGSTOP),
                ),
                Step("read", {"file_path": str(plain)}),
            ],
            timeout=40,
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    results, texts = run.results(), run.texts()
    assert [r["is_error"] for r in results] == [False, False], texts
    assert "outside the memory" in texts[1]
    out = run.output
    assert "pre-call sync before read failed" in out and "did not answer a ping within 2s" in out, out
    assert "final sync failed" in out and "did not answer a ping within 5s" in out, out
    assert run.work.stop_requests == [{"force": True}]


# ---- the Python worker alone ----------------------------------------------------------------------


@pytest.mark.expected_log(
    r"ERROR memfs.worker: session \S+: final sync failed: the memfs daemon .* did not answer"
)
def test_a_dead_daemon_is_logged_and_the_tool_fails_on_its_own_io(wworld, caplog):
    wworld.mount()
    m = wworld.memory
    run = wworld.run_item(
        [
            Step("read", {"file_path": m(RW, "profile.md")}, after=lambda _r: wworld.box.kill9()),
            Step("read", {"file_path": m(RW, "profile.md")}),
        ]
    )
    results, texts = run.results(), run.texts()
    assert [r["is_error"] for r in results] == [False, True], texts
    assert "transport endpoint is not connected" in texts[1].lower(), texts[1]
    messages = [r.getMessage() for r in caplog.records]
    assert any("pre-call sync before read failed" in msg for msg in messages), messages
    assert any("final sync failed" in msg for msg in messages), messages
    assert run.work.stop_requests == [{"force": True}]


def test_the_polling_worker_run_serves_a_claimed_item_the_same_way(wworld):
    """EnvironmentWorker.run(): poll, ack, the item with memfs_tools(), stop; then cancelled."""
    import asyncio

    from anthropic.lib.environments import EnvironmentWorker

    from memfs.worker import memfs_tools

    wworld.mount()
    work = wworld.item(
        [Step("write", {"file_path": wworld.memory(RW, "polled.md"), "content": "via run()\n"})]
    )

    async def main():
        async with wworld.client() as client:  # closed in this loop (see WorkerWorld.run_item)
            worker = EnvironmentWorker(
                client,
                environment_id=work.environment_id,
                environment_key=wworld.platform.environment_key,
                memory_sync_interval=None,
                workdir=wworld.workdir,
                max_idle=2,
                tools=memfs_tools(root=wworld.root),
            )
            task = asyncio.ensure_future(worker.run())
            deadline = time.monotonic() + 60
            while not work.stop_requests and time.monotonic() < deadline and not task.done():
                await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    assert work.acked and work.stop_requests == [{"force": True}]
    assert wworld.api.contents(wworld.rw)["/polled.md"] == "via run()\n"
    assert wworld.platform.errors == []
