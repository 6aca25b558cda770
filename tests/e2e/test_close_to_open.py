"""Live means live (SEMANTICS.md#d-when): a busy mount applies another sandbox's write to a file
nobody has open as soon as its watch tells, and a file that is open keeps the content it was
opened with until it is closed (close-to-open, as NFS promises it).

Real mounts on a real `memfs serve`; the mounts use a 300 s interval, so only live mode explains a
change arriving. A background reader keeps the mount busy (a read every 0.1 s: never a second
without a filesystem request), which is what held every remote change back before.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.e2e.test_relay import relayed
from tests.support.sandbox import Sandbox
from tests.support.waits import wait_for
from tests.support.world import StoreSpec

pytestmark = pytest.mark.timeout(180)

RW = "work-notes"
LONG = "300"


def rw_status(box: Sandbox) -> dict:
    return next(s for s in box.status()["stores"] if s["slug"] == RW)


def live(*boxes: Sandbox) -> bool:
    return all(b.status()["mode"] == "live" for b in boxes)


def keep_busy(path: Path) -> subprocess.Popen:
    """A command that reads `path` every 0.1 s until it is killed: the mount is never quiet."""
    return subprocess.Popen(["bash", "-c", f"while true; do cat {path} >/dev/null 2>&1; sleep 0.1; done"])


def read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def test_a_busy_reader_sees_another_mounts_write_within_a_second(world):
    a, b = world.sandbox("a"), world.sandbox("b")
    a.mount("--sync-interval", LONG)
    b.mount("--sync-interval", LONG)
    assert wait_for(lambda: live(a, b)), (a.status(), b.status())
    waits = _reader_waits(a, b, RW, busy_name="profile.md")
    print("busy reader, memfs serve live: waits", [f"{w:.2f}" for w in waits])
    assert statistics.median(waits) <= 1.0 and max(waits) <= 2.0, [f"{w:.2f}" for w in waits]


def _reader_waits(a: Sandbox, b: Sandbox, top: str, *, busy_name: str, rounds: int = 6) -> list[float]:
    """A's writes to `top`/status.md, each timed until B's reader (a look every 0.1 s, never a
    `memfs sync`) sees it; a second command keeps B busy throughout."""
    status_in_b = b.root / top / "status.md"
    busy = keep_busy(b.root / top / busy_name)
    try:
        waits = []
        for round_ in range(rounds):
            text = f"round {round_}: done\n"
            (a.root / top / "status.md").write_text(text)
            written = time.monotonic()
            while read(status_in_b) != text:
                assert time.monotonic() - written < 20, (b.status(), read(status_in_b))
                time.sleep(0.1)
            waits.append(time.monotonic() - written)
            time.sleep(0.5)
    finally:
        busy.kill()
        busy.wait()
    return waits


def test_a_busy_reader_through_a_relay_sees_another_mounts_write_within_a_second(tmp_path):
    with relayed(tmp_path, hosted=True) as fleet:
        w = fleet.world([StoreSpec("Shared", seed={"/shared.md": "first\n"})])
        a = w.sandbox("a")
        b = fleet.world([StoreSpec("Shared")], {"Shared": w.rw}).sandbox("b")  # a session of its own
        a.mount("--sync-interval", LONG)
        b.mount("--sync-interval", LONG)
        assert wait_for(lambda: live(a, b)), (a.status(), b.status())
        waits = _reader_waits(a, b, "shared", busy_name="shared.md")
    print("busy reader, through a relay: waits", [f"{w:.2f}" for w in waits])
    assert statistics.median(waits) <= 1.0 and max(waits) <= 2.0, [f"{w:.2f}" for w in waits]


def test_a_file_held_open_keeps_its_content_until_closed(world, api):
    memories = api.memories(world.rw)
    old = "".join(f"old line {i:05d}\n" for i in range(5000))  # 80 KB: many pages, many reads
    new = "".join(f"NEW line {i:05d}\n" for i in range(5000))
    api.update(world.rw, memories["/profile.md"]["id"], content=old)
    box = world.sandbox("held")
    box.mount("--sync-interval", LONG)
    assert wait_for(lambda: live(box))
    held = box.root / RW / "profile.md"
    other = box.root / RW / "notes" / "todo.md"
    busy = keep_busy(other)
    try:
        with open(held, "rb", buffering=0) as f:
            head = f.read(4096)
            api.update(world.rw, memories["/profile.md"]["id"], content=new)
            api.update(world.rw, memories["/notes/todo.md"]["id"], content="moved on\n")
            # the mount knows: a file nobody holds open changes at once, busy mount or not
            assert wait_for(lambda: read(other) == "moved on\n", timeout=20), rw_status(box)
            rest = f.read()
            assert (head + rest).decode() == old  # the open file: the content it was opened with
            assert rw_status(box)["pull_pending"], rw_status(box)
        # closed: the next open sees the new content
        assert wait_for(lambda: read(held) == new, timeout=10), rw_status(box)
        assert wait_for(lambda: not rw_status(box)["pull_pending"], timeout=10), rw_status(box)
    finally:
        busy.kill()
        busy.wait()


def test_grep_while_changes_arrive_never_reads_a_torn_file(world, api):
    files = {f"/torn/f{i:02d}.md": "".join(f"v0 line {j}\n" for j in range(3000)) for i in range(12)}
    ids = {path: api.create(world.rw, path, text)["id"] for path, text in files.items()}
    box = world.sandbox("grep")
    box.mount("--sync-interval", LONG)
    assert wait_for(lambda: live(box))
    seen_versions: set[str] = set()
    writer = 1
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for mid in ids.values():  # a new version of every file, one request each
            api.update(world.rw, mid, content="".join(f"v{writer} line {j}\n" for j in range(3000)))
        writer += 1
        out = subprocess.run(
            ["grep", "-r", "-o", r"^v[0-9]*", str(box.root / RW / "torn")],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        versions: dict[str, set[str]] = defaultdict(set)
        lines: dict[str, int] = defaultdict(int)
        for line in out.splitlines():
            path, _, v = line.rpartition(":")
            versions[path].add(v)
            lines[path] += 1
        torn = {p: sorted(v) for p, v in versions.items() if len(v) > 1}
        assert not torn, torn
        cut = {p: n for p, n in lines.items() if n != 3000}  # read up to an older, shorter size
        assert not cut and len(lines) == len(files), (cut, len(lines))
        seen_versions |= {v for vs in versions.values() for v in vs}
    assert len(seen_versions) > 2, seen_versions  # changes did arrive while grep ran
