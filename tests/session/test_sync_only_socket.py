"""The daemon's sync-only socket (docs/SEMANTICS.md#d-worker): sync and status for anyone, nothing else."""

from __future__ import annotations

import json
import os
import socket
import stat
import time

import pytest

from tests.support.mounts import mounted_at
from tests.support.worker_world import RW

pytestmark = pytest.mark.timeout(90)


def ask(path, request) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(path))
        s.sendall((request if isinstance(request, bytes) else json.dumps(request).encode()) + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


@pytest.fixture
def sync_socket(wworld):
    path = wworld.tmp / "sync" / "sync.sock"
    wworld.box.env["MEMFS_SYNC_SOCKET"] = str(path)
    wworld.mount()
    return path


def test_it_answers_sync_and_status_and_refuses_everything_else(wworld, sync_socket):
    assert stat.S_IMODE(os.stat(sync_socket).st_mode) == 0o666
    status = ask(sync_socket, {"op": "status"})
    assert status["ok"] and {s["slug"] for s in status["stores"]} == {RW, "team-handbook"}
    (wworld.root / RW / "via-sync-socket.md").write_text("pushed by a forced sync\n")
    answer = ask(sync_socket, {"op": "sync", "force": True, "wait": True})
    assert answer["ok"] and answer["ran"], answer
    assert wworld.api.contents(wworld.rw)["/via-sync-socket.md"] == "pushed by a forced sync\n"
    for request in ({"op": "unmount"}, {"op": "flush"}, b"not json", {"no": "op"}):
        refused = ask(sync_socket, request)
        assert refused["ok"] is False and "only" in refused["error"], refused
    assert mounted_at(wworld.root), "an unmount request on the sync-only socket must do nothing"


def test_forced_ticks_are_spaced_out_and_never_dropped(wworld, sync_socket):
    first = ask(sync_socket, {"op": "sync", "force": True})
    (wworld.root / RW / "late.md").write_text("written just after a forced tick\n")
    second = ask(sync_socket, {"op": "sync", "force": True, "wait": True})
    assert "rate_limited_for" not in first
    assert second["ran"] and second.get("rate_limited_for", 0) > 0, second
    assert wworld.api.contents(wworld.rw)["/late.md"] == "written just after a forced tick\n"


def test_the_worker_syncs_through_it(wworld, sync_socket, monkeypatch):
    from tests.support.fake_platform import Step

    monkeypatch.setenv("MEMFS_SYNC_SOCKET", str(sync_socket))
    monkeypatch.setenv(
        "MEMFS_RUNTIME_DIR", str(wworld.tmp / "no-registry")
    )  # the full socket is out of reach
    run = wworld.run_item(
        [Step("write", {"file_path": wworld.memory(RW, "w.md"), "content": "via the worker\n"})]
    )
    assert [r["is_error"] for r in run.results()] == [False], run.texts()
    assert wworld.api.contents(wworld.rw)["/w.md"] == "via the worker\n"


def _held(path, n: int) -> list[socket.socket]:
    """n connections that each asked once and now sit open, as an agent's would."""
    held = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(str(path))
        s.sendall(b'{"op":"ping"}\n')
        assert b"pong" in s.recv(4096)
        held.append(s)
    return held


def test_connections_an_agent_holds_do_not_lock_the_worker_out(wworld, sync_socket, monkeypatch):
    # Before: 4 held connections answered every other one "busy": the worker's pre-call and final
    # syncs failed and its write stayed staged. Now a new connection takes the slot of the one idle
    # longest.
    from tests.support.fake_platform import Step

    held = _held(sync_socket, 4)
    try:
        monkeypatch.setenv("MEMFS_SYNC_SOCKET", str(sync_socket))
        monkeypatch.setenv("MEMFS_RUNTIME_DIR", str(wworld.tmp / "no-registry"))
        run = wworld.run_item(
            [Step("write", {"file_path": wworld.memory(RW, "held.md"), "content": "past held connections\n"})]
        )
        assert [r["is_error"] for r in run.results()] == [False], run.texts()
        assert wworld.api.contents(wworld.rw)["/held.md"] == "past held connections\n"
        closed = 0
        for s in held:
            s.settimeout(0.5)
            try:
                closed += s.recv(4096) == b""
            except TimeoutError:
                pass
        assert closed >= 1, "the worker's connection took the slot of an idle one"
    finally:
        for s in held:
            s.close()


def test_a_new_connection_closes_the_one_idle_longest_never_one_in_a_request(wworld, sync_socket):
    held = _held(sync_socket, 4)
    try:
        assert ask(sync_socket, {"op": "status"})["ok"]  # the oldest idle one made room
        assert held[0].recv(4096) == b"", "the connection idle longest was closed"
        for s in held[1:]:  # the others still answer
            s.sendall(b'{"op":"ping"}\n')
            assert b"pong" in s.recv(4096)
        time.sleep(0.2)  # the daemon has seen the asking connection close: a free slot
        held[0] = _held(sync_socket, 1)[0]
        held[0].sendall(b'{"op":"sync","force":true}\n')
        assert json.loads(held[0].recv(65536))["ran"]  # the next forced tick waits 5 s
        for s in held:  # four forced requests waiting for it: four connections in a request
            s.sendall(b'{"op":"sync","force":true}\n')
        time.sleep(0.3)
        busy = ask(sync_socket, {"op": "status"})
        assert busy["ok"] is False and "busy" in busy["error"], busy
        answers = [json.loads(s.recv(65536)) for s in held]
        assert all(a["ran"] for a in answers) and sum(bool(a.get("coalesced")) for a in answers) == 3, answers
    finally:
        for s in held:
            s.close()


def _counter_reads(wworld) -> int:
    return int(wworld.box.status()["requests"]["last_minute"].get("counter", 0))


def test_forced_ticks_in_a_loop_share_one_tick_per_interval(wworld, sync_socket):
    # Before: 4 clients forcing in a loop got a tick (a counters read) every second. Now at most one
    # forced tick per sync interval (5 s here), shared by every forced request that waits for it.
    import threading

    before = _counter_reads(wworld)
    answers: list[dict] = []
    deadline = time.monotonic() + 8

    def force_in_a_loop() -> None:
        while time.monotonic() < deadline:
            try:
                answers.append(ask(sync_socket, {"op": "sync", "force": True}))
            except ValueError as exc:  # an empty answer: the connection was closed as idle
                answers.append({"ok": False, "error": repr(exc)})

    threads = [threading.Thread(target=force_in_a_loop) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    reads = _counter_reads(wworld) - before
    assert reads <= 3, f"{reads} counter reads for {len(answers)} forced syncs in 8 s"
    assert all(a["ok"] and a["ran"] for a in answers), answers
    assert sum(1 for a in answers if a.get("coalesced")) >= 3, answers


@pytest.mark.expected_log(r"the sync-only socket's directory .* is not opened there")
@pytest.mark.parametrize("how", ["world-writable", "other-owner", "symlink"])
def test_a_socket_directory_another_user_controls_is_refused(wworld, how):
    # Before: any directory was used (made with the umask's mode), and the socket's chmod followed
    # a symlink put at its path: whoever could write there could swap the socket for their own.
    directory = wworld.tmp / "sync"
    if how == "symlink":
        (wworld.tmp / "elsewhere").mkdir()
        directory.symlink_to(wworld.tmp / "elsewhere")
    else:
        directory.mkdir()
        if how == "world-writable":
            os.chmod(directory, 0o777)
        else:
            os.chown(directory, 65534, 65534)
    wworld.box.env["MEMFS_SYNC_SOCKET"] = str(directory / "sync.sock")
    proc = wworld.box.mount(check=False)
    why = {
        "world-writable": "writable by other users",
        "other-owner": "belongs to uid 65534",
        "symlink": "not a directory",
    }
    assert proc.returncode != 0, proc.stdout
    assert f"the sync-only socket's directory {directory} " in proc.stderr and why[how] in proc.stderr, (
        proc.stderr
    )
    assert not mounted_at(wworld.root)
    assert not os.path.lexists(directory / "sync.sock")


def test_a_missing_socket_directory_is_made_reachable_under_any_umask(wworld):
    path = wworld.tmp / "made" / "sync.sock"
    wworld.box.env["MEMFS_SYNC_SOCKET"] = str(path)
    old = os.umask(0o077)
    try:
        wworld.mount()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o666
    assert ask(path, {"op": "status"})["ok"]


def test_the_socket_mode_is_never_set_through_a_link(tmp_path):
    from memfs.session.preflight import MountError
    from memfs.session.sync_only import _set_socket_mode

    target = tmp_path / "target"
    target.write_text("someone else's file\n")
    os.chmod(target, 0o600)
    (tmp_path / "sync.sock").symlink_to(target)
    with pytest.raises(MountError, match="not the socket just bound there"):
        _set_socket_mode(tmp_path / "sync.sock", 0o666)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
