"""The TypeScript worker package (workers/typescript): the official `EnvironmentWorker.handleItem()` of
`@anthropic-ai/sdk` with `memfsTools()`, run by node against the fake platform, a real `memfs serve`
and a real mount: the same scenario as the Python worker's end-to-end tests (test_worker_e2e.py).

npm is on the machine (scripts/_env.sh installs Debian's node and npm when missing, and the
package's dependencies with `npm ci` from its package-lock.json); the fixture builds the package
once. The worker runs on Node 22, the package's dev dependency `node` (the SDK's agent toolset needs
Node 22's `fs.glob`; Debian's node may be older)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from memfs import limits
from tests.support.fake_platform import Step
from tests.support.worker_world import RO, RW

pytestmark = pytest.mark.timeout(180)

# scripts/sdk-check points this at a copy of the package with the newest @anthropic-ai/sdk
PACKAGE = Path(
    os.environ.get("MEMFS_TS_PACKAGE") or Path(__file__).resolve().parents[2] / "workers" / "typescript"
)


@pytest.fixture(scope="module")
def ts_package() -> Path:
    npm = shutil.which("npm")
    assert npm and shutil.which("node"), "node and npm are needed (scripts/test installs them)"
    if not (PACKAGE / "node_modules" / "@anthropic-ai" / "sdk").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=PACKAGE, check=True, timeout=300)
    subprocess.run([npm, "run", "build"], cwd=PACKAGE, check=True, timeout=120)
    return PACKAGE


def run_ts_item(
    wworld, package: Path, script: list[Step], timeout: float = 90, max_concurrent_calls: int = 2
) -> tuple:
    """One scripted session served by node; (ItemRun-like work, the process's output). The worker runs
    calls of different threads `max_concurrent_calls` at a time (test/run-item.js)."""
    from tests.support.worker_world import ItemRun

    work = wworld.item(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(
        {
            "ANTHROPIC_BASE_URL": wworld.server.base_url,
            "ANTHROPIC_WORK_ID": work.id,
            "ANTHROPIC_ENVIRONMENT_ID": work.environment_id,
            "ANTHROPIC_SESSION_ID": work.session_id,
            "ANTHROPIC_WORK_SECRET": work.secret,
            "MEMFS_RUNTIME_DIR": wworld.box.env["MEMFS_RUNTIME_DIR"],
            "MEMFS_TEST_ROOT": str(wworld.root),
            "MEMFS_TEST_WORKDIR": str(wworld.workdir),
            "MEMFS_TEST_MAX_CONCURRENT_CALLS": str(max_concurrent_calls),
        }
    )
    proc = subprocess.run(
        [str(package / "node_modules" / ".bin" / "node"), str(package / "test" / "run-item.js")],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return ItemRun(work, work.session_id, wworld.platform), proc


def test_the_package_keeps_memfs_limits(ts_package):
    text = (ts_package / "src" / "index.ts").read_text()
    assert "MAX_CONTENT_BYTES = 100 * 1024" in text and limits.MAX_CONTENT_BYTES == 100 * 1024
    assert "FINAL_SYNC_TIMEOUT_MS = 30_000" in text and limits.FLUSH_TIMEOUT == 30


def test_every_tool_lands_in_the_store_before_the_item_stops(wworld, spy, ts_package):
    wworld.mount()
    m = wworld.memory
    at_stop: dict = {}
    wworld.platform.on_stop = lambda work: at_stop.update(wworld.api.contents(wworld.rw))
    run, proc = run_ts_item(
        wworld,
        ts_package,
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
        ],
    )
    assert proc.returncode == 0, proc.stderr
    texts = run.texts()
    assert [r["is_error"] for r in run.results()] == [False] * 6, [r.get("content") for r in run.results()]
    assert "buy milk" in texts[0] and "buy milk" in texts[1]
    assert "written.md" in texts[4] and "bash.md" in texts[4]
    assert "todo.md" in texts[5]
    assert run.work.stop_requests and run.work.stop_requests[0].get("force") is True
    assert at_stop["/bash.md"] == "from bash\n"
    assert at_stop["/new/written.md"] == "written by the write tool\n"
    assert at_stop["/profile.md"] == "name: agent\nlikes: memfs\n"
    # One non-forced, non-waiting sync before each call, then the final one, forced and waiting.
    assert spy.syncs() == [(False, False)] * 6 + [(True, True)]
    assert "final sync done" in proc.stdout + proc.stderr
    assert wworld.platform.errors == []


def test_concurrent_calls_of_two_threads_each_sync_first_and_land(wworld, spy, ts_package):
    """maxConcurrentCalls: 2 runs calls of two session threads at once (@anthropic-ai/sdk >= 1.16):
    each call's pre-call sync gets its own answer on the one held connection, both calls run, the
    final sync comes after both."""
    wworld.mount()
    m = wworld.memory
    marks = wworld.tmp / "marks"
    marks.mkdir()
    n = 2

    def call(k: int) -> Step:
        # Each call waits (20 s at most) until both have started: only calls that run at once both
        # get past it and write their file.
        both_started = f"[ $(ls {marks} | wc -l) -ge {n} ]"
        command = (
            f"touch {marks}/{k}; for i in $(seq 200); do {both_started} && break; sleep 0.1; done; "
            f"{both_started} && mkdir -p {m(RW, 'threads')} && echo 'thread {k}' > {m(RW, f'threads/t{k}.md')}"
        )
        return Step("bash", {"command": command}, thread=f"sthr_{k}")

    run, proc = run_ts_item(wworld, ts_package, [call(k) for k in range(n)], max_concurrent_calls=n)
    assert proc.returncode == 0, proc.stderr
    assert [r["is_error"] for r in run.results()] == [False] * n, run.texts()
    contents = wworld.api.contents(wworld.rw)
    assert [contents.get(f"/threads/t{k}.md") for k in range(n)] == [f"thread {k}\n" for k in range(n)]
    assert spy.syncs() == [(False, False)] * n + [(True, True)]
    assert run.work.stop_requests and run.work.stop_requests[0].get("force") is True
    assert wworld.platform.errors == []


def test_a_read_only_store_refuses_writes_through_every_tool(wworld, ts_package):
    wworld.mount()
    m = wworld.memory
    style = m(RO, "handbook/style.md")
    run, proc = run_ts_item(
        wworld,
        ts_package,
        [
            Step("write", {"file_path": style, "content": "overwritten\n"}),
            Step("write", {"file_path": m(RO, "handbook/new.md"), "content": "new\n"}),
            Step("edit", {"file_path": style, "old_string": "short", "new_string": "long"}),
            Step("bash", {"command": f"echo more >> {style}"}),
            Step("bash", {"command": f"rm {style}"}),
            Step("read", {"file_path": style}),
        ],
    )
    assert proc.returncode == 0, proc.stderr
    results, texts = run.results(), run.texts()
    assert [r["is_error"] for r in results] == [True] * 5 + [False], texts
    for text in texts[:3]:
        assert "read-only directory" in text, text
    for text in texts[3:5]:
        assert "Read-only file system" in text, text  # EROFS from the mount itself
    assert "Write short sentences." in texts[5]
    assert wworld.api.contents(wworld.ro) == {"/handbook/style.md": "Write short sentences.\n"}


def test_an_oversized_write_or_edit_is_refused_and_a_remote_edit_is_seen(wworld, ts_package):
    wworld.mount()
    m = wworld.memory
    profile = m(RW, "profile.md")
    memory_id = wworld.api.memories(wworld.rw)["/profile.md"]["id"]

    def edit_remotely(_result):
        wworld.api.update(wworld.rw, memory_id, content="name: agent\nlikes: remote edits\n")
        time.sleep(wworld.box.status()["next_tick_in"] + 0.2)  # until the mount's next tick is due

    run, proc = run_ts_item(
        wworld,
        ts_package,
        [
            Step("write", {"file_path": profile, "content": "x" * 102_401}),
            Step("edit", {"file_path": profile, "old_string": "grep", "new_string": "y" * 102_400}),
            Step("read", {"file_path": profile}, after=edit_remotely),
            Step("read", {"file_path": profile}),
            Step("write", {"file_path": m(RW, "fits.md"), "content": "é" * 51_200}),  # exactly 102,400 bytes
        ],
    )
    assert proc.returncode == 0, proc.stderr
    results, texts = run.results(), run.texts()
    assert [r["is_error"] for r in results] == [True, True, False, False, False], texts
    assert (
        "102,401 bytes" in texts[0]
        and "at most 102,400 bytes" in texts[0]
        and "Nothing was written" in texts[0]
    )
    assert "the edited file would be" in texts[1]
    assert "likes: grep" in texts[2]
    assert "likes: remote edits" in texts[3]
    contents = wworld.api.contents(wworld.rw)
    assert contents["/profile.md"] == "name: agent\nlikes: remote edits\n"
    assert contents["/fits.md"] == "é" * 51_200


def test_a_stopped_daemon_makes_the_pre_call_sync_give_up_and_the_tool_still_runs(wworld, ts_package):
    # As the Python link (tests/session/test_daemon_link.py): a ping on a second connection finds
    # the stopped daemon within 2 s (5 s for the final sync). Without it the pre-call sync would wait
    # its whole 20 s and the final sync its 35 s: more than this item's 40 s.
    wworld.mount()
    plain = wworld.workdir / "plain.txt"
    plain.write_text("outside the memory\n")
    pid = wworld.box.daemon_pid()
    assert pid
    try:
        run, proc = run_ts_item(
            wworld,
            ts_package,
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
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    results, texts = run.results(), run.texts()
    assert [r["is_error"] for r in results] == [False, False], texts
    assert "outside the memory" in texts[1]
    assert "pre-call sync before read failed" in out and "did not answer a ping within 2s" in out, out
    assert "final sync failed" in out and "did not answer a ping within 5s" in out, out
    assert run.work.stop_requests and run.work.stop_requests[0].get("force") is True


@pytest.mark.timeout(60)
def test_a_busy_daemon_that_answers_its_ping_gets_the_whole_timeout(tmp_path, ts_package):
    from tests.session.test_daemon_link import SlowDaemon

    path = tmp_path / "slow.sock"
    daemon = SlowDaemon(path, delay=0.8)  # longer than the ping deadline given below
    script = (
        "const { DaemonLink } = require(process.argv[1]);"
        "new DaemonLink('/nowhere').sync(false, false, 10000, 300).then("
        "(a) => { console.log(JSON.stringify(a)); process.exit(0); },"
        "(e) => { console.error(String(e)); process.exit(1); });"
    )
    env = {**os.environ, "MEMFS_SYNC_SOCKET": str(path)}
    try:
        proc = subprocess.run(
            [str(ts_package / "node_modules" / ".bin" / "node"), "-e", script, str(ts_package / "dist")],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        daemon.close()
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"ok": True, "ran": True}


@pytest.mark.timeout(60)
def test_a_call_stopped_during_its_pre_call_sync_does_not_run(tmp_path, ts_package):
    """The runner aborts a stopped call's signal (@anthropic-ai/sdk >= 1.16: then restoreMissing, and
    "was stopped" as its result); a wrapped tool whose pre-call sync was still waiting must not run
    once the sync answers (the official write/edit do not look at the signal themselves)."""
    from tests.session.test_daemon_link import SlowDaemon

    path = tmp_path / "slow.sock"
    daemon = SlowDaemon(path, delay=1.0)  # status answers at once (no stores), a sync after 1 s
    script = (
        "const { memfsTools } = require(process.argv[1]);"
        "let ran = false;"
        "const tool = { name: 'write', run: async () => { ran = true; return 'written'; } };"
        "const [wrapped] = memfsTools({ root: '/nowhere', base: [tool], log: () => {} })("
        "{ workdir: process.argv[2], session: { id: 'sesn_x', resources: [] } });"
        "const stop = new AbortController();"
        "setTimeout(() => stop.abort(new Error('stopped by the runner')), 200);"
        "wrapped.run({ file_path: 'x.md', content: 'x' }, { signal: stop.signal }).then("
        "(r) => console.log(JSON.stringify({ ran, result: String(r) })),"
        "(e) => console.log(JSON.stringify({ ran, error: String(e) })));"
    )
    env = {**os.environ, "MEMFS_SYNC_SOCKET": str(path)}
    try:
        proc = subprocess.run(
            [
                str(ts_package / "node_modules" / ".bin" / "node"),
                "-e",
                script,
                str(ts_package / "dist"),
                str(tmp_path),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        daemon.close()
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"ran": False, "error": "Error: stopped by the runner"}


def test_a_lost_lease_stops_the_item_without_a_final_push(wworld, spy, ts_package):
    wworld.mount()
    m = wworld.memory
    holder: dict = {}

    def another_worker_claims_it(_result):
        wworld.server.call(lambda: wworld.platform.lose_lease(holder["work"].id))
        time.sleep(3)  # heartbeats come every second (TTL 2 s): the worker meets the 412 meanwhile

    original = wworld.item
    wworld.item = lambda s, **kw: holder.setdefault("work", original(s, **kw))
    run, proc = run_ts_item(
        wworld,
        ts_package,
        [
            Step(
                "write",
                {"file_path": m(RW, "mine.md"), "content": "written before the lease was lost\n"},
                after=another_worker_claims_it,
            ),
            Step("write", {"file_path": m(RW, "late.md"), "content": "must not run\n"}),
        ],
    )
    out = proc.stdout + proc.stderr
    assert len(run.results()) == 1, out
    assert run.work.stop_requests == [], "a worker that lost the lease must not stop the item"
    assert (True, True) not in spy.syncs(), "no final forced sync after a lost lease"
    assert "lease was lost; no final sync" in out, out
    assert not (wworld.root / RW / "late.md").exists()


def test_a_mount_of_other_stores_fails_the_item_clearly(wworld, api, ts_package):
    other = api.create_session([(wworld.rw, "read_write")])  # the handbook is missing
    wworld.box.env["ANTHROPIC_SESSION_ID"] = other["id"]
    wworld.box.env["ANTHROPIC_WORK_SECRET"] = other["work_secret"]
    wworld.mount()
    run, proc = run_ts_item(wworld, ts_package, [Step("bash", {"command": "true"})])
    assert proc.returncode == 1
    assert "not this session's" in proc.stderr and wworld.ro in proc.stderr and "memfs mount" in proc.stderr
    assert run.results() == []
    assert run.work.stop_requests and run.work.stop_requests[0].get("force") is True
