"""Live means live, whatever the mount holds staged and whether or not its service has a watch
(SEMANTICS.md#d-when): a reader that polls a file every 0.1 s sees another sandbox's write while
its own sandbox keeps a change staged (a command appends to a log every 0.1 s, so the push
debounce never passes), and a mount against the hosted API runs its due poll while busy,
close-to-open, at the pace it polls a used mount anyway.

Real mounts on a real `memfs serve` (and `memfs serve --hosted-api`, behind the loopback proxy
of tests/support/proxy.py, which counts the mount's requests).
"""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.test_close_to_open import LONG, RW, _reader_waits, keep_busy, live, read, rw_status
from tests.support.sandbox import SandboxWorld
from tests.support.waits import wait_for
from tests.support.world import StoreSpec

pytestmark = pytest.mark.timeout(180)

INTERVAL = 5.0  # the shortest sync interval a mount takes (memfs/limits.py)


def keep_appending(path: Path) -> subprocess.Popen:
    """A command that appends a line to `path` every 0.1 s until it is killed: the file is
    always staged (never 0.3 s without a change, so never pushed) and the mount never quiet."""
    return subprocess.Popen(["bash", "-c", f"i=0; while true; do echo $((i++)) >> {path}; sleep 0.1; done"])


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def test_a_busy_reader_sees_another_mounts_write_while_its_mount_keeps_a_change_staged(world):
    a, b = world.sandbox("a"), world.sandbox("b")
    a.mount("--sync-interval", LONG)
    b.mount("--sync-interval", LONG)
    assert wait_for(lambda: live(a, b)), (a.status(), b.status())
    log = b.root / RW / "log.md"
    writer = keep_appending(log)
    try:
        assert wait_for(lambda: rw_status(b)["staged"] > 0), rw_status(b)
        waits = _reader_waits(a, b, RW, busy_name="profile.md", rounds=5)
        assert rw_status(b)["staged"] > 0, rw_status(b)  # still staged: pulled around, never over
    finally:
        stop(writer)
    print("busy reader, a change staged, memfs serve live: waits", [f"{w:.2f}" for w in waits])
    assert statistics.median(waits) <= 1.0 and max(waits) <= 2.0, [f"{w:.2f}" for w in waits]
    # the writer stopped: its log is pushed whole (nothing of it lost to the pulls around it)
    assert wait_for(lambda: rw_status(b)["staged"] == 0, timeout=20), rw_status(b)
    assert wait_for(lambda: read(a.root / RW / "log.md") == log.read_text(), timeout=10)


def test_a_busy_reader_against_the_hosted_api_sees_a_write_at_the_next_poll(tmp_path):
    seed = {"/status.md": "waiting\n", "/other.md": "other\n"}
    world = SandboxWorld.serving(tmp_path, [StoreSpec("Shared", seed=seed)], hosted_api=True)
    try:
        proxy = world.proxy()  # B mounts through it: it counts B's requests only
        box = world.sandbox("b", base_url=proxy.url)
        box.mount("--sync-interval", f"{INTERVAL:g}")
        other = world.api.create_session([(world.rw, "read_write")])
        a = world.sandbox("a", other)  # another sandbox, straight to the service
        a.mount("--sync-interval", f"{INTERVAL:g}")
        assert box.status()["has_counter"] is False
        top = box.root / "shared"
        busy = keep_busy(top / "other.md")  # a second command: never a quiet second
        writer = keep_appending(top / "log.md")  # and a change that stays staged
        waits, started = [], time.monotonic()
        try:
            for round_ in range(2):
                text = f"round {round_}: done\n"
                (a.root / "shared" / "status.md").write_text(text)
                a.sync()  # A's write is on the store (`memfs sync --force --wait`)
                written = time.monotonic()
                while read(top / "status.md") != text:
                    assert time.monotonic() - written < INTERVAL + 10, (box.status(), read(top / "status.md"))
                    time.sleep(0.1)
                waits.append(time.monotonic() - written)
            polls = proxy.count("GET", r"/memory_versions", since=started)
            elapsed = time.monotonic() - started
        finally:
            stop(writer)
            stop(busy)
        print(
            f"busy reader, hosted API polled every {INTERVAL:g}s: waits",
            [f"{w:.2f}" for w in waits],
            f"{polls} feed reads in {elapsed:.1f}s",
        )
        assert max(waits) <= INTERVAL + 2.0, [f"{w:.2f}" for w in waits]
        # the pace of a used mount, no more: one feed read of the store per interval
        assert polls <= elapsed / INTERVAL + 1, (polls, elapsed)
    finally:
        world.close()
