"""Everything local that is not on the store is counted and named (docs/SEMANTICS.md#d-end).

Real `memfs serve`, real mounts, real shell tools: a file the store cannot hold (not UTF-8), a file
the service refuses (the store is full), deletes held back by --sync-deletions, and a crash with
three staged changes.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.mounts import sh
from tests.support.sandbox import SandboxWorld
from tests.support.world import RW_SEED

pytestmark = pytest.mark.timeout(180)

RW = "work-notes"
QUIET = ("--sync-interval", "3600")  # no tick of its own: the test decides when one runs


def rw_status(box) -> dict:
    return {s["slug"]: s for s in box.status()["stores"]}[RW]


@pytest.fixture
def full_world(tmp_path):
    """A service whose stores hold at most len(RW_SEED) memories: one more create is refused (400)."""
    world = SandboxWorld.serving(tmp_path, max_memories=len(RW_SEED))
    try:
        yield world
    finally:
        world.close()


@pytest.mark.expected_log(r"ERROR memfs.mount: 2 change\(s\) are not on the store service")
def test_held_back_and_refused_files_are_named_and_fail_the_unmount(full_world):
    world = full_world
    box = world.sandbox("a")
    box.mount(*QUIET)
    top = box.root / RW
    # bash ignores the close() error (EILSEQ): the file exists, only in the state dir
    sh(f"printf '\\xff' > '{top}/bad.txt'")
    assert (top / "bad.txt").read_bytes() == b"\xff"
    (top / "one-too-many.md").write_text("the store is full\n")
    box.sync()  # the create is refused: the store holds --max-memories already

    st = rw_status(box)
    assert (st["staged"], st["refused"], st["held"]) == (0, 1, 1), st
    assert st["paths"]["held"] == ["/bad.txt"] and st["paths"]["refused"] == ["/one-too-many.md"]
    assert "UTF-8" in st["reasons"]["/bad.txt"]
    text = box.memfs("status", "--root", str(box.root), check=True).stdout
    assert "held=1" in text and "/bad.txt" in text and "/one-too-many.md" in text

    proc = box.unmount(check=False)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "every change" not in proc.stdout + proc.stderr
    assert f"{RW}/bad.txt" in proc.stderr and f"{RW}/one-too-many.md" in proc.stderr
    assert str(box.state_dir) in proc.stderr

    offline = box.status()  # no daemon: the same rule, read from the state dir
    assert offline["live"] is False
    st = {s["slug"]: s for s in offline["stores"]}[RW]
    assert (st["refused"], st["held"]) == (1, 1) and offline["pending"] == 2

    # Fix both; with nothing left, unmount says so and exits 0.
    box.mount(*QUIET)
    (top / "bad.txt").unlink()
    (top / "one-too-many.md").unlink()
    box.sync()
    assert rw_status(box)["not_on_store"] == 0
    proc = box.unmount(check=False)
    assert proc.returncode == 0, proc.stderr
    assert "every change is on the store service" in proc.stdout
    assert sorted(world.api.contents(world.rw)) == sorted(RW_SEED)


def test_a_held_delete_is_named_but_loses_nothing(world):
    box = world.sandbox("a")
    box.mount(*QUIET, "--sync-deletions", "log_only")
    (box.root / RW / "profile.md").unlink()
    box.sync()
    st = rw_status(box)
    assert st["deletes_held"] == 1 and st["paths"]["deletes_held"] == ["/profile.md"]
    assert st["not_on_store"] == 0
    proc = box.unmount(check=False)
    assert proc.returncode == 0, proc.stderr
    assert (
        "every change is on the store service" in proc.stdout and "1 local delete(s) held back" in proc.stdout
    )
    assert "/profile.md" in world.api.contents(world.rw)  # log_only: the store keeps it


def test_offline_status_after_a_crash_shows_the_three_staged_changes(world):
    box = world.sandbox("a")
    box.mount(*QUIET)
    top = box.root / RW
    (top / "notes" / "todo.md").write_text("edited before the crash\n")
    (top / "new.md").write_text("created before the crash\n")
    (top / "profile.md").unlink()
    box.kill9()

    offline = box.memfs("status", "--root", str(box.root), "--json", check=True, timeout=30)
    status = json.loads(offline.stdout)
    assert status["live"] is False
    st = {s["slug"]: s for s in status["stores"]}[RW]
    assert st["staged"] == 3, st
    assert st["paths"]["staged"] == ["/new.md", "/notes/todo.md", "/profile.md"]
    text = box.memfs("status", "--root", str(box.root), check=True, timeout=30).stdout
    assert "NOT RUNNING" in text and "staged=3" in text and "/new.md" in text

    box.mount(*QUIET)  # the next mount with that state dir pushes all three
    box.sync()
    contents = world.api.contents(world.rw)
    assert contents["/notes/todo.md"] == "edited before the crash\n"
    assert contents["/new.md"] == "created before the crash\n"
    assert "/profile.md" not in contents
    assert rw_status(box)["not_on_store"] == 0


def test_the_daemon_exits_non_zero_on_sigterm_while_a_file_is_held_back(world):
    """The daemon's own exit status (what a container's entrypoint reports on `docker stop`)."""
    import signal
    import sys
    import time

    from tests.support.sandbox import is_mounted

    box = world.sandbox("a")
    argv = [
        sys.executable,
        "-m",
        "memfs",
        "mount",
        "--foreground",
        "--root",
        str(box.root),
        "--state-dir",
        str(box.state_dir),
        *QUIET,
    ]
    daemon = subprocess.Popen(argv, env=box.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not is_mounted(box.root) and daemon.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert box.status()["live"] is True
        sh(f"printf '\\xff' > '{box.root}/{RW}/bad.txt'")
        daemon.send_signal(signal.SIGTERM)
        _out, err = daemon.communicate(timeout=60)
        assert daemon.returncode == 3, err
        assert f"{RW}/bad.txt" in err and str(box.state_dir) in err
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(10)
