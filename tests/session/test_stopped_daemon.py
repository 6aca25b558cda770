"""No command hangs on a stopped daemon (docs/SEMANTICS.md#d-commands), and the
daemon's socket client for per-call hooks (docs/OPERATIONS.md, section 4)."""

from __future__ import annotations

import os
import signal

import pytest

from memfs.session import control

pytestmark = pytest.mark.timeout(150)

RW = "work-notes"
BOUND = 20  # seconds a command may take against a stopped daemon before the test fails


def test_status_sync_unmount_on_a_stopped_daemon_answer_non_zero_with_the_fix(world, mounted):
    pid = mounted.daemon_pid()
    assert pid
    os.kill(pid, signal.SIGSTOP)
    try:
        for args in (["status"], ["status", "--json"], ["sync"], ["sync", "--force", "--wait"], ["unmount"]):
            proc = mounted.memfs(*args, "--root", str(mounted.root), timeout=BOUND)
            assert proc.returncode != 0, (args, proc.stdout)
            assert "does not answer (stopped?)" in proc.stderr, (args, proc.stderr)
            assert f"kill -CONT {pid}" in proc.stderr and str(mounted.root) in proc.stderr
        proc = mounted.mount(check=False, timeout=BOUND)  # a second mount on that root
        assert proc.returncode != 0 and "does not answer (stopped?)" in proc.stderr, proc.stderr
    finally:
        os.kill(pid, signal.SIGCONT)
    # resumed, the daemon is intact: it answers and unmounts cleanly
    assert mounted.status()["live"] is True
    (mounted.root / RW / "after.md").write_text("after SIGCONT\n")
    proc = mounted.unmount(check=False)
    assert proc.returncode == 0, proc.stderr
    assert world.api.contents(world.rw)["/after.md"] == "after SIGCONT\n"


@pytest.fixture
def registry(mounted, monkeypatch):
    """This process finds the sandbox's daemons where its `memfs` commands do."""
    monkeypatch.setenv("MEMFS_RUNTIME_DIR", mounted.env["MEMFS_RUNTIME_DIR"])


def test_daemon_client_keeps_its_connection_and_survives_a_remount(world, mounted, registry):
    with control.DaemonClient(str(mounted.root)) as client:
        assert client.state_dir == mounted.state_dir
        first = client.sync()
        assert first["ok"] and first["ran"] is False  # mounted just now: no tick due
        for _ in range(50):
            assert client.sync()["ok"]
        assert {s["slug"] for s in client.status()["stores"]} == {RW, "team-handbook"}
        (mounted.root / RW / "hook.md").write_text("pushed through the client\n")
        forced = client.sync(force=True, wait=True)
        assert forced["ran"] and forced["ok"]
        assert world.api.contents(world.rw)["/hook.md"] == "pushed through the client\n"
        mounted.unmount()
        with pytest.raises(control.NoDaemon):
            client.sync()
        mounted.mount()
        assert client.sync()["ok"]  # re-opens the connection to the new daemon
    with control.DaemonClient(state_dir=mounted.state_dir) as client:
        assert client.status()["stores"]
    # the registry is keyed without stat'ing the root: a symlinked parent and `..` still find it
    alias = mounted.dir / "alias"
    alias.symlink_to(mounted.dir)
    assert control.lookup_state_dir(str(alias / "root")) == mounted.state_dir
    assert control.lookup_state_dir(str(mounted.root / ".." / "root")) == mounted.state_dir


def test_a_stopped_daemon_is_reported_by_the_client_too(world, mounted, registry):
    pid = mounted.daemon_pid()
    client = control.DaemonClient(str(mounted.root))
    assert client.sync()["ok"]
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(control.DaemonNotAnswering) as info:
            client.sync()
        assert f"pid {pid}" in str(info.value)
        with pytest.raises(control.DaemonNotAnswering):
            control.call(mounted.state_dir, {"op": "status"}, timeout=60)
        with pytest.raises(control.DaemonNotAnswering) as info:  # a shorter bound than the ping's
            control.call(mounted.state_dir, {"op": "sync"}, timeout=0.5)
        assert "within 0.5s" in str(info.value)
    finally:
        os.kill(pid, signal.SIGCONT)
        client.close()
    assert control.call(mounted.state_dir, {"op": "status"})["ok"]
