"""A daemon started before the session (memfs/session/standby.py, docs/SEMANTICS.md#d-standby).

`memfs mount --prestart --root R` leaves a standby daemon that has imported everything and waits
on an owner-only socket in the registry dir; a later `memfs mount --root R` with the session
hands it over and returns when every store is readable. Real `memfs serve`, real mounts.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from memfs.session import standby
from tests.support.sandbox import Sandbox, is_mounted
from tests.support.world import RO_SEED, RW_SEED

pytestmark = pytest.mark.timeout(150)

RW, RO = "work-notes", "team-handbook"


def _prestart(box: Sandbox, *extra: str) -> int:
    proc = box.memfs("mount", "--prestart", "--root", str(box.root), *extra, check=True, timeout=60)
    assert "standby daemon" in proc.stdout, proc.stdout
    return int(proc.stdout.split("(pid ")[1].split(")")[0])


def _socket_path(box: Sandbox) -> str:
    """The standby socket's path, as the box's commands find it (its MEMFS_RUNTIME_DIR)."""
    return standby.socket_path(str(box.root), box.env["MEMFS_RUNTIME_DIR"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of ours (the test process did not fork it, but be sure)
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _wait_ready(path: str, timeout: float = 60) -> dict:
    """The standby's answer to a ping once its imports are done."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = standby.ping(path, timeout=5)
        if answer is not None and answer["warm"]:
            return answer
        time.sleep(0.05)
    raise AssertionError(f"no standby answers at {path}")


@pytest.fixture
def standbys():
    pids: list[int] = []
    yield pids
    for pid in pids:  # never leave a standby behind, whatever the test did
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_standby_then_a_mount_serves_the_stores_and_unmounts_cleanly(world, standbys):
    box = world.sandbox("a")
    pid = _prestart(box)
    standbys.append(pid)
    path = _socket_path(box)
    assert os.stat(path).st_mode & 0o777 == 0o600  # owner-only, like the control socket
    assert _wait_ready(path)["pid"] == pid
    # the token is in the mount's environment only: the standby's command line never held one
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        assert world.session["work_secret"].encode() not in f.read()
    proc = box.mount()
    assert "mounted 2 store(s)" in proc.stdout, proc.stdout
    assert box.daemon_pid() == pid  # the standby is the mount's daemon
    assert not os.path.exists(path)  # a standby serves one mount
    for rel, content in RW_SEED.items():
        assert (box.root / RW / rel.lstrip("/")).read_text() == content
    for rel, content in RO_SEED.items():
        assert (box.root / RO / rel.lstrip("/")).read_text() == content
    (box.root / RW / "from-standby.md").write_text("written through the standby's mount\n")
    assert box.status()["live"] is True
    # a second mount on the same root is refused as without a standby
    again = box.mount(check=False, timeout=60)
    assert again.returncode != 0 and "already a mounted memfs filesystem" in again.stderr, again.stderr
    proc = box.unmount()
    assert "every change is on the store service" in proc.stdout, proc.stdout
    assert not is_mounted(box.root)
    assert _wait_gone(pid, 30)
    assert world.api.contents(world.rw)["/from-standby.md"] == "written through the standby's mount\n"
    assert "Traceback" not in (box.state_dir / "memfs.log").read_text()


def test_a_killed_standby_falls_back_to_the_forked_daemon(world, standbys):
    box = world.sandbox("a")
    pid = _prestart(box)
    standbys.append(pid)
    path = _socket_path(box)
    _wait_ready(path)
    os.kill(pid, signal.SIGKILL)
    assert _wait_gone(pid, 10)
    assert os.path.exists(path)  # a killed standby leaves its socket
    proc = box.mount()
    assert "mounted 2 store(s)" in proc.stdout, proc.stdout
    assert box.daemon_pid() not in (None, pid)
    assert (box.root / RW / "profile.md").read_text() == RW_SEED["/profile.md"]
    assert not os.path.exists(path)  # the dead standby's socket was removed
    box.unmount()
    assert not is_mounted(box.root)


def test_an_unused_standby_exits_after_its_timeout_and_removes_its_socket(world, standbys):
    box = world.sandbox("a")
    pid = _prestart(box, "--standby-timeout", "3")
    standbys.append(pid)
    path = _socket_path(box)
    assert _wait_gone(pid, 60)
    assert not os.path.exists(path)
    proc = box.mount()  # today's path
    assert "mounted 2 store(s)" in proc.stdout and box.daemon_pid() != pid
    box.unmount()


def test_a_second_prestart_on_the_same_root_is_refused(world, standbys):
    box = world.sandbox("a")
    standbys.append(_prestart(box))
    _wait_ready(_socket_path(box))
    again = box.memfs("mount", "--prestart", "--root", str(box.root), timeout=60)
    assert again.returncode == 1 and "already waits for a session" in again.stderr, again.stderr


def test_the_standby_answers_no_other_user(world, standbys, tmp_path):
    # Another uid must not hand a session over (nor ping): the standby asks the kernel who connected.
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as another uid")
    box = world.sandbox("a")
    # The socket is 0600 in a 0700 dir: here both are opened to the other user (a runtime dir
    # it can reach, under /tmp), so that the standby's own check is what refuses it.
    top = tempfile.mkdtemp(prefix="memfs-standby-")
    os.chmod(top, 0o711)
    box.env["MEMFS_RUNTIME_DIR"] = os.path.join(top, "run")
    pid = _prestart(box)
    standbys.append(pid)
    path = _socket_path(box)
    _wait_ready(path)
    os.chmod(os.path.dirname(path), 0o711)
    os.chmod(path, 0o666)
    try:
        _other_user_is_refused(path, pid)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _other_user_is_refused(path: str, pid: int) -> None:
    code = textwrap.dedent(
        """
        import socket, sys
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(sys.argv[1])
        try:
            s.sendall(b'{"op": "ping"}' + bytes([10]))
            print(repr(s.recv(100)))
        except (BrokenPipeError, ConnectionResetError):  # closed at once
            print(repr(b""))
        """
    )
    out = subprocess.run(
        [
            "setpriv",
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            sys.executable,
            "-c",
            code,
            path,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "b''", out.stdout  # closed without a word
    assert standby.ping(path)["pid"] == pid  # and it still waits for its own user


def test_a_mount_request_from_the_owner_is_accepted_only_with_go(world, standbys):
    # A mount that gives up after sending its request (no "go") does not start the standby: it
    # waits on, and serves the next mount.
    box = world.sandbox("a")
    pid = _prestart(box)
    standbys.append(pid)
    path = _socket_path(box)
    _wait_ready(path)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(path)
    request = {
        "op": "mount",
        "root": str(box.root),
        "state_dir": str(box.state_dir),
        "session_id": world.session["id"],
        "base_url": world.service.base_url,
        "token": "not-used",
        "args": {},
        "env": {},
        "umask": 0o022,
    }
    s.sendall(json.dumps(request).encode() + b"\n")
    assert s.recv(100) == b"accepted\n"
    s.close()  # gone before "go"
    assert standby.ping(path)["pid"] == pid
    proc = box.mount()
    assert box.daemon_pid() == pid, proc.stdout
    box.unmount()


def test_a_mount_right_after_the_prestart_is_taken_while_the_standby_warms_up(world, standbys):
    # The image's entrypoint: prestart, then at once the mount (the session is known at boot).
    box = world.sandbox("a")
    pid = _prestart(box)
    standbys.append(pid)
    proc = box.mount()
    assert "mounted 2 store(s)" in proc.stdout, proc.stdout
    assert box.daemon_pid() == pid
    assert (box.root / RW / "notes" / "todo.md").read_text() == RW_SEED["/notes/todo.md"]
    box.unmount()
    assert not is_mounted(box.root)
