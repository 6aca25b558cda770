"""The daemon's sync-only socket (docs/SEMANTICS.md#d-worker): sync and status for anyone, nothing else."""

from __future__ import annotations

import json
import os
import socket
import stat

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
