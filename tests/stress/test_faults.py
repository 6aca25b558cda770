"""Fault injection (docs/DESIGN.md#stress): a proxy between the mount and the real service.

Expected everywhere: a clear error, automatic recovery, no duplicate memory, no lost change, no
tick storm (at most one tick per interval unless forced), and no `memfs sync` hung on a service
that never answers (the client's 10 s request timeout bounds it).
"""

from __future__ import annotations

import os
import time

import pytest

from tests.stress.conftest import RW, long_only, profile, store_bytes, walk
from tests.support.api import Api
from tests.support.proxy import Proxy
from tests.support.sandbox import is_mounted

pytestmark = pytest.mark.timeout(150)

SEED = {
    "/keep.md": "keep\n",
    "/edit.md": "edit me\n",
    "/move.md": "move me\n",
    "/gone.md": "delete me\n",
    "/dir/deep.md": "deep\n",
}
MEM = r"/memories/mem_[^/]+$"
# memfs serve has the batch-write extension: a push's creates, updates and deletes go
# there, so a rule aimed at one kind of push also matches the batch it now travels in
BATCH = r"|/memory_batch$"


@pytest.fixture
def proxy(rig):
    p = Proxy(rig.service.base_url)
    try:
        yield p
    finally:
        for box in rig.sandboxes:  # unmount through a working proxy first: a fast final sync
            p.clear()
            box.close()
        p.close()


@pytest.fixture
def seeded(rig):
    for path, content in SEED.items():
        rig.api.create(rig.rw, path, content)
    return rig


@pytest.fixture
def own(rig):
    """The store API with this rig's session token, as another sandbox on the same session writes:
    the changes feed leaves the content of its writes out (docs/API.md, view=full), so a pull
    asks those memories by id (MEM)."""
    api = Api(rig.service.base_url, rig.token)
    try:
        yield api
    finally:
        api.close()


def assert_converged(rig, box):
    """Store == mount, and no memory exists twice (one memory per path, ids unique)."""
    memories = rig.api.memories(rig.rw)
    assert store_bytes(rig.api, rig.rw) == walk(box.root / RW)
    assert len({m["id"] for m in memories.values()}) == len(memories)
    return memories


def test_faults_during_the_initial_download(seeded, proxy, stats):
    rig = seeded
    box = rig.sandbox("init", base_url=proxy.url)
    cases = profile(
        [], [("GET", r"/memory_store_counters$", "reset", 0, "cannot download the memory stores")]
    ) + [
        ("GET", r"/v1/sessions/", "status", 503, "cannot read session"),
        ("GET", r"/snapshot$", "reset_mid_body", 0, "cannot download the memory stores"),
        ("GET", r"/snapshot$", "status", 500, "cannot download the memory stores"),
    ]
    for method, path, action, code, message in cases:
        proxy.clear()
        proxy.add(method, path, action, code=code)
        proc = box.mount(check=False)
        stats["faults"] += 1
        assert proc.returncode != 0, (action, proc.stdout)
        assert message in proc.stderr and proxy.url in proc.stderr, (action, proc.stderr)
        # Never a half-materialised store: nothing mounted, the root left empty.
        assert not is_mounted(box.root) and os.listdir(box.root) == []
    proxy.clear()
    box.mount()
    assert walk(box.root / RW) == {p: c.encode() for p, c in SEED.items()}


def test_faults_during_a_pull(seeded, proxy, stats, own):
    rig = seeded
    box = rig.sandbox("pull", base_url=proxy.url)
    # Only `memfs sync` pulls here: a live mount applies a remote edit on its own, busy or not
    # (close-to-open), and could read it before the fault is in place.
    box.mount("--live", "off", "--sync-interval", "300")
    ids = {p: m["id"] for p, m in rig.api.memories(rig.rw).items()}
    # A pull asks a memory by id (MEM) only for a change whose content its changes answer does
    # not carry: past the answer's 2 MiB, or written last by the caller's own session. So the
    # rounds that break those GETs edit with this session's token (`own`).
    for round_, (method, path, action, code) in enumerate(
        [
            ("GET", r"/changes$", "status", 500),
            ("GET", MEM, "reset_mid_body", 0),
            ("GET", r"/memory_store_counters$", "status", 429),
        ]
        + profile(
            [],
            [
                ("GET", MEM, "lose_answer", 0),
                ("GET", r"/changes$", "delay", 0),  # slow, not failed: the tick just takes longer
            ],
        )
    ):
        before = walk(box.root / RW)
        text = f"remote edit {round_}\n"
        writer = own if path == MEM else rig.api
        writer.update(rig.rw, ids["/edit.md"], content=text)
        writer.create(rig.rw, f"/new{round_}.md", text)
        rule = proxy.add(method, path, action, code=code, times=1, seconds=1.0)
        answer = box.sync(check=False)
        assert rule.hits == 1
        if action == "delay":
            assert answer["ok"], answer
        else:
            stats["faults"] += 1
            assert answer["ok"] is False and answer["error"], answer
            assert walk(box.root / RW) == before  # the view is untouched by a failed pull
            status = box.status()["stores"][0]
            assert status["last_result"] == "failed" and status["last_error"]
            assert box.sync()["ok"]  # forced: recovers at once
        assert (box.root / RW / "edit.md").read_text() == text
        assert (box.root / RW / f"new{round_}.md").read_text() == text
    assert_converged(rig, box)


def test_faults_during_pushes_lost_answers_included(seeded, proxy, stats):
    rig = seeded
    box = rig.sandbox("push", base_url=proxy.url)
    box.mount()
    top = box.root / RW
    before = rig.api.memories(rig.rw)
    scenarios = [
        # (rules, what they do to each kind of push)
        [
            ("POST", r"/memories$" + BATCH, "lose_answer"),
            ("POST", MEM + BATCH, "lose_answer"),
            ("DELETE", MEM, "lose_answer"),
        ],
        [
            ("POST", r"/memories$" + BATCH, "status", 503),
            ("DELETE", MEM, "lose_answer"),
            ("POST", MEM + BATCH, "status", 500),
        ],
        [("*", r"/memor(ies|y_batch)", "status", 429)],
    ] + profile(
        [],
        [
            [("POST", r"/memories$" + BATCH, "reset"), ("DELETE", MEM, "reset")],
            [("POST", MEM + BATCH, "reset_mid_body")],
        ],
    )
    versions_expected: dict[str, int] = {}
    for i, rules in enumerate(scenarios):
        (top / f"created{i}.md").write_text(f"created {i}\n")
        (top / "edit.md").write_text(f"edit {i}\n")
        os.rename(top / ("move.md" if i == 0 else f"moved{i - 1}.md"), top / f"moved{i}.md")
        (top / f"doomed{i}.md").write_text("short-lived\n")
        if i:
            os.unlink(top / f"doomed{i - 1}.md")
        for method, path, action, *code in rules:
            proxy.add(method, path, action, times=1, code=code[0] if code else 503)
        answer = box.sync(check=False)
        assert answer["ok"] is False, answer
        assert box.status()["stores"][0]["staged"] > 0
        # A failed push stops the tick; each next tick settles lost answers and pushes the rest,
        # meeting the faults still armed one by one.
        for _attempt in range(len(rules) + 1):
            answer = box.sync(check=False)
            if answer["ok"]:
                break
        assert answer["ok"], answer
        assert box.status()["stores"][0]["staged"] == 0
        proxy.clear()
        memories = assert_converged(rig, box)
        versions_expected[f"/created{i}.md"] = 1
    stats["faults"] += proxy.faults()
    # Nothing pushed twice: every memory has exactly the versions its edits explain.
    for path, n in versions_expected.items():
        assert len(rig.api.versions(rig.rw, memories[path]["id"])) == n, path
    edit = rig.api.versions(rig.rw, before["/edit.md"]["id"])
    assert len(edit) == 1 + len(scenarios), [v["operation"] for v in edit]
    moved = rig.api.versions(rig.rw, before["/move.md"]["id"])
    assert memories[f"/moved{len(scenarios) - 1}.md"]["id"] == before["/move.md"]["id"]
    assert len(moved) == 1 + len(scenarios)
    assert not [p for p in memories if p.startswith("/doomed") and p != f"/doomed{len(scenarios) - 1}.md"]


@pytest.mark.parametrize("fault", profile(["lose_answer"], ["status", "lose_answer"]))
def test_faults_during_the_final_flush(seeded, proxy, stats, fault):
    rig = seeded
    box = rig.sandbox("final", base_url=proxy.url)
    box.mount()
    top = box.root / RW
    (top / "last.md").write_text("written at the very end\n")
    (top / "edit.md").write_text("edited at the very end\n")
    proxy.add("POST", r"/memor(ies|y_batch)", fault, times=None if fault == "status" else 1)
    proxy.add("POST", r"/memor(ies|y_batch)", "status", code=503)
    proc = box.memfs("unmount", "--root", str(box.root), "--flush-timeout", "5", timeout=60)
    stats["faults"] += 1
    assert proc.returncode == 3, proc.stderr
    assert "staged change" in proc.stderr and str(box.state_dir) in proc.stderr
    assert not is_mounted(box.root)
    proxy.clear()
    flush = box.memfs("flush", "--state-dir", str(box.state_dir), timeout=60)
    assert flush.returncode == 0, flush.stderr
    contents = rig.api.contents(rig.rw)
    assert contents["/last.md"] == "written at the very end\n"
    assert contents["/edit.md"] == "edited at the very end\n"
    assert len(rig.api.versions(rig.rw, rig.api.memories(rig.rw)["/last.md"]["id"])) == 1


def test_blackholed_service_neither_hangs_sync_nor_storms(seeded, proxy, stats):
    rig = seeded
    box = rig.sandbox("hole", base_url=proxy.url)
    box.mount()
    (box.root / RW / "offline.md").write_text("written while the service hangs\n")
    proxy.add("*", r"^/v1/", "blackhole")
    t0 = time.monotonic()
    answer = box.sync(check=False)
    took = time.monotonic() - t0
    stats["faults"] += 1
    assert answer["ok"] is False and answer["error"], answer
    assert took < 10 + 8, f"memfs sync hung {took:.1f}s on a black-holed service"
    # No tick storm: calls that are not forced do not tick again within the interval (5 s), and the
    # daemon's own timer ticks at most once per interval.
    start = time.monotonic()
    calls = 0
    while time.monotonic() - start < 3.5:  # well inside the 5 s interval that follows the failure
        assert box.sync(force=False, wait=False, check=False)["ran"] is False
        calls += 1
    assert calls >= 2
    window_end = max(start + 5.5, time.monotonic())
    time.sleep(max(0, window_end - time.monotonic()))
    ticks = proxy.count("GET", r"/memory_store_counters$", since=start)
    assert ticks <= int((window_end - start) / 5) + 1, ticks
    proxy.clear()
    assert box.sync()["ok"]
    assert rig.api.contents(rig.rw)["/offline.md"] == "written while the service hangs\n"
    assert_converged(rig, box)


def test_long_random_fault_schedule(seeded, proxy, stats, own):
    """Long profile: rounds of random edits on both sides under random faults; converges each round."""
    long_only()
    import random

    rng = random.Random(int(os.environ.get("MEMFS_STRESS_SEED", "5")))
    rig = seeded
    box = rig.sandbox("random", base_url=proxy.url)
    box.mount()
    top = box.root / RW
    actions = [
        ("status", 503),
        ("status", 500),
        ("status", 429),
        ("reset", 0),
        ("lose_answer", 0),
        ("reset_mid_body", 0),
        ("delay", 0),
    ]
    targets = [
        ("POST", r"/memories$"),
        ("POST", r"/memory_batch$"),
        ("POST", MEM),
        ("DELETE", MEM),
        ("GET", MEM),
        ("GET", r"/changes$"),
        ("GET", r"/memory_store_counters$"),
    ]
    # Half the remote edits are made with this mount's own session token (`own`), so that the
    # GET MEM faults below meet a pull, not only pushes.
    by_id = 0
    for round_ in range(40):
        for _ in range(rng.randint(1, 4)):
            name = f"f{rng.randint(0, 9)}.md"
            op = rng.choice(["write", "write", "delete", "rename"])
            if op == "write":
                (top / name).write_text(f"round {round_} {rng.random()}\n")
            elif (top / name).exists():
                if op == "delete":
                    (top / name).unlink()
                else:
                    os.rename(top / name, top / f"f{rng.randint(0, 9)}.md")
        if rng.random() < 0.5:
            path = f"/r{rng.randint(0, 4)}.md"
            writer = own if rng.random() < 0.5 else rig.api
            existing = rig.api.memories(rig.rw).get(path)
            if existing:
                writer.update(rig.rw, existing["id"], content=f"remote {round_}\n")
            else:
                writer.create(rig.rw, path, f"remote {round_}\n")
        for _ in range(rng.randint(1, 3)):
            action, code = rng.choice(actions)
            method, path = rng.choice(targets)
            proxy.add(method, path, action, times=1, code=code, seconds=0.5)
        box.sync(check=False)
        stats["faults"] += proxy.faults()
        by_id += proxy.count("GET", MEM)  # this tick's, and the last round's recovery ticks'
        proxy.clear()
        proxy.log.clear()
        assert box.sync()["ok"]
        assert box.sync()["ok"]  # a second tick: anything settled late is settled now
        assert_converged(rig, box)
        stats["steps"] += 1
    stats["gets_by_id"] = by_id + proxy.count("GET", MEM)
    assert stats["gets_by_id"], "no pull asked a memory by id: the GET MEM faults met no pull"
