"""Concurrent writers keep their work (SEMANTICS.md#d-merge): several real mounts of one store on a
real `memfs serve`, written by shell tools at once, nobody running `memfs sync`. What does not
overlap merges; what does is kept on the store as a conflict copy; nothing ends only in a sandbox.
Never timed: every wait polls with a generous deadline."""

from __future__ import annotations

import re
import subprocess

import httpx
import pytest

from tests.e2e.test_live import landed, store_counter
from tests.support.waits import wait_for

pytestmark = pytest.mark.timeout(240)

RW = "work-notes"
LIVE = ("--sync-interval", "300")  # only live mode (the watch, the debounced push) can explain a change


def live(world, *names: str):
    boxes = [world.sandbox(n) for n in names]
    for box in boxes:
        box.mount(*LIVE)
    assert wait_for(lambda: all(b.status()["mode"] == "live" for b in boxes)), [b.status() for b in boxes]
    return boxes


def all_landed(api, world, boxes) -> bool:
    """Every mount has applied the store as it is now (asked through `memfs status`, not the files:
    a file read is a filesystem request, and a mount pulls by itself only when quiet)."""
    counter = store_counter(api, world.rw)
    return wait_for(lambda: all(landed(b, counter) for b in boxes), 60)


def kept_files(box) -> list[str]:
    return [str(p) for p in box.state_dir.rglob("*") if "kept" in p.parts and p.is_file()]


def test_three_sandboxes_appending_to_one_file_keep_every_line(world, api):
    """The shared notes file: three writers' shell appends, one every 0.3 s each, for about 10 s."""
    boxes = live(world, "a", "b", "c")
    api.create(world.rw, "/team/log.md", "# team log\n")
    assert all_landed(api, world, boxes)
    per_writer = 30
    loops = [
        subprocess.Popen(
            [
                "bash",
                "-c",
                f'for i in $(seq {per_writer}); do echo "{box.dir.name} line $i" >> "$F"; sleep 0.3; done',
            ],
            env={"F": str(box.root / RW / "team" / "log.md"), "PATH": "/usr/bin:/bin"},
        )
        for box in boxes
    ]
    for loop in loops:
        assert loop.wait(timeout=120) == 0
    for box in boxes:
        box.unmount(check=True)  # exit 0: "every change is on the store service"
    lines = api.contents(world.rw)["/team/log.md"].splitlines()
    expected = {f"{box.dir.name} line {i}" for box in boxes for i in range(1, per_writer + 1)}
    assert lines[0] == "# team log"
    assert sorted(lines[1:]) == sorted(expected), (len(lines) - 1, len(expected))  # each once, none lost
    for box in boxes:  # a writer's own lines stay in its order
        mine = [line for line in lines if line.startswith(f"{box.dir.name} ")]
        assert mine == [f"{box.dir.name} line {i}" for i in range(1, per_writer + 1)]
        assert kept_files(box) == []
    assert not [p for p in api.contents(world.rw) if ".conflict-" in p]


def test_writers_rewriting_their_own_sections_all_keep_their_edits(world, api):
    """What an `edit` tool does: read the whole file, change one's own section, write it back."""
    sections = "".join(f"## {n}\nstatus: idle\n\n" for n in ("a", "b", "c"))
    api.create(world.rw, "/plan.md", sections)
    boxes = live(world, "a", "b", "c")
    for round_ in range(3):
        for box in boxes:
            path = box.root / RW / "plan.md"
            name = box.dir.name
            edited = re.sub(
                rf"(## {name}\n)status: [^\n]*\n", rf"\1status: round {round_} by {name}\n", path.read_text()
            )
            path.write_text(edited)
    for box in boxes:
        box.unmount(check=True)
    final = api.contents(world.rw)["/plan.md"]
    for name in ("a", "b", "c"):
        assert f"## {name}\nstatus: round 2 by {name}\n" in final, final
    assert not [p for p in api.contents(world.rw) if ".conflict-" in p]


def test_a_true_conflict_is_a_copy_on_the_store_that_every_sandbox_reads(world, api):
    a, b = live(world, "a", "b")
    memory = api.memories(world.rw)["/profile.md"]
    api.update(world.rw, memory["id"], content="name: agent\nlikes: sed\n")  # a's view is now stale
    (a.root / RW / "profile.md").write_text("name: agent\nlikes: awk\n")  # the same line, differently
    assert wait_for(lambda: [p for p in api.contents(world.rw) if p.startswith("/profile.conflict-")], 60)
    store = api.contents(world.rw)
    [copy] = [p for p in store if p.startswith("/profile.conflict-")]
    assert store["/profile.md"] == "name: agent\nlikes: sed\n"
    assert store[copy] == "name: agent\nlikes: awk\n"
    assert all_landed(api, world, [a, b])
    assert (
        b.root / RW / copy.lstrip("/")
    ).read_text() == "name: agent\nlikes: awk\n"  # every sandbox reads it
    assert (a.root / RW / "profile.md").read_text() == "name: agent\nlikes: sed\n"
    assert any(" conflict-copy /profile.md " in n and copy in n for n in a.notices(RW))
    assert a.status()["stores"][0]["conflicts"] >= 1 or a.status()["stores"][1]["conflicts"] >= 1
    a.unmount(check=True)
    b.unmount(check=True)
    assert kept_files(a) == []


def test_the_services_metrics_count_a_merge_for_its_store(world, api):
    """Two mounts, a non-overlapping concurrent edit: `memfs serve`'s /metrics counts the merge
    for that store (the mount marks the merged push, SEMANTICS.md#d-merge). Deterministic: `a`
    holds the file open while `b`'s edit lands (close-to-open keeps a's content), so a's append
    is made on the old version and must merge."""
    a, b = live(world, "a", "b")
    todo = "# TODO\n- buy milk\n- write tests\n"
    with open(a.root / RW / "notes" / "todo.md", "a") as held:
        (b.root / RW / "notes" / "todo.md").write_text(todo.replace("buy milk", "buy oat milk"))
        assert wait_for(lambda: "oat" in api.contents(world.rw)["/notes/todo.md"], 60)
        held.write("- from a\n")
    merged = "# TODO\n- buy oat milk\n- write tests\n- from a\n"
    assert wait_for(lambda: api.contents(world.rw)["/notes/todo.md"] == merged, 60)
    rw = next(s for s in a.status()["stores"] if s["store_id"] == world.rw)
    assert rw["merges"] >= 1 and rw["conflicts"] == 0, rw
    text = httpx.get(world.service.base_url + "/metrics", timeout=10).text
    assert f'memfs_merges_total{{store="{world.rw}"}} {float(rw["merges"])}' in text, text
    a.unmount(check=True)
    b.unmount(check=True)
