"""`memfs worker`: one work item from the environment `ant beta:worker poll --on-work` sets."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from memfs.session import control
from tests.support.fake_platform import Step
from tests.support.mounts import mounted_at
from tests.support.worker_world import RW

pytestmark = pytest.mark.timeout(120)


def start_worker(wworld, work, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "MEMFS_"))}
    env.update(
        {
            "ANTHROPIC_BASE_URL": wworld.server.base_url,  # the platform: not the store service
            "ANTHROPIC_WORK_ID": work.id,
            "ANTHROPIC_ENVIRONMENT_ID": work.environment_id,
            "ANTHROPIC_SESSION_ID": work.session_id,
            "ANTHROPIC_WORK_SECRET": work.secret,
            "MEMFS_RUNTIME_DIR": wworld.box.env["MEMFS_RUNTIME_DIR"],
        }
    )
    log = open(wworld.tmp / "worker.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memfs",
            "worker",
            "--root",
            str(wworld.root),
            "--workdir",
            str(wworld.workdir),
            *args,
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    return proc


def worker_log(wworld) -> str:
    return (wworld.tmp / "worker.log").read_text(errors="replace")


def test_memfs_worker_mounts_from_its_own_store_url_runs_the_item_and_unmounts(wworld):
    m = wworld.memory
    work = wworld.item(
        [
            Step("write", {"file_path": m(RW, "from-cli.md"), "content": "via memfs worker\n"}),
            Step("read", {"file_path": m(RW, "notes/todo.md")}),
        ]
    )
    proc = start_worker(
        wworld,
        work,
        "--mount",
        "--store-url",
        wworld.service.base_url,
        "--state-dir",
        str(wworld.box.state_dir),
        "--max-concurrent-calls",
        "4",  # anthropic 2.16's EnvironmentWorker(max_concurrent_calls=...)
    )
    try:
        assert proc.wait(90) == 0, worker_log(wworld)
    finally:
        if proc.poll() is None:
            proc.kill()
    session = wworld.platform.sessions[work.session_id]
    assert [r["is_error"] for r in session.results] == [False, False], session.results
    assert wworld.api.contents(wworld.rw)["/from-cli.md"] == "via memfs worker\n"
    assert work.stop_requests == [{"force": True}]
    assert not mounted_at(wworld.root), "memfs worker --mount leaves nothing mounted"


def test_sigterm_cancels_the_item_cleanly_with_the_final_sync_and_the_stop(wworld):
    wworld.mount()
    m = wworld.memory
    work = wworld.item(
        [Step("write", {"file_path": m(RW, "before-sigterm.md"), "content": "kept\n"})],
        terminate_at_end=False,
    )  # the session stays open: only SIGTERM ends the item
    proc = start_worker(wworld, work)
    try:
        session = wworld.platform.sessions[work.session_id]
        deadline = time.monotonic() + 60
        while not session.results and time.monotonic() < deadline:
            assert proc.poll() is None, worker_log(wworld)
            time.sleep(0.1)
        assert session.results, worker_log(wworld)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(40) == 0, worker_log(wworld)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = worker_log(wworld)
    assert "SIGTERM: cancelling the work item" in log and "final sync done" in log, log
    assert work.stop_requests == [{"force": True}]
    assert wworld.api.contents(wworld.rw)["/before-sigterm.md"] == "kept\n"


def test_a_failed_mount_force_stops_the_item(wworld, tmp_path):
    work = wworld.item([Step("bash", {"command": "true"})])
    (wworld.root / "in-the-way").write_text("the root is not empty")
    # The worker mounts with the default state dir (/var/lib/memfs/<root> as root), where the
    # failed mount leaves its log for whoever looks: this test removes it, or every run of the
    # suite would leave one behind on the machine.
    state_dir = control.default_state_dir(wworld.root)
    try:
        proc = start_worker(wworld, work, "--mount", "--store-url", wworld.service.base_url)
        assert proc.wait(60) != 0
        assert "something already exists" in worker_log(wworld)
        assert work.stop_requests == [{"force": True}]
        assert wworld.platform.sessions[work.session_id].results == []
        assert "something already exists" in (state_dir / "memfs.log").read_text()
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def test_the_cli_works_without_the_worker_extra_imported():
    code = "import sys, memfs.cli; memfs.cli.build_parser(); print('anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "False", out.stderr
