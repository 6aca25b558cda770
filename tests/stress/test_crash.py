"""Crash matrix (docs/DESIGN.md#stress): SIGKILL of the daemon during write bursts and during ticks, and
SIGKILL of the service during pushes. After each crash: remount with the same state dir (or
restart the service on its db); nothing acknowledged is lost (a close() or unlink() that returned),
nothing is pushed twice (store == mount, no memory with more versions than writes explain).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time

import pytest

from tests.stress.conftest import RW, profile, store_bytes, walk

pytestmark = pytest.mark.timeout(profile(150, 3000))

SEED = int(os.environ.get("MEMFS_STRESS_SEED", "4"))


class Burst:
    """Writes, edits and deletes files in a thread until the mount dies or `ops` are done.
    `acked` is what the filesystem acknowledged; `inflight` the one operation that may or may not
    have landed when the daemon died."""

    def __init__(self, top, rng: random.Random, round_: int, known: dict[str, bytes | None], ops: int = 60):
        self.top, self.rng, self.round, self.ops = top, rng, round_, ops
        self.acked: dict[str, bytes | None] = {}  # path -> content, None = deleted
        self.inflight: tuple[str, bytes | None] | None = None
        self.known = known
        self.writes: dict[str, int] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for i in range(self.ops):
            live = [p for p, c in {**self.known, **self.acked}.items() if c is not None]
            roll = self.rng.random()
            if live and roll < 0.15:
                path, content = self.rng.choice(live), None
            elif live and roll < 0.5:
                path = self.rng.choice(live)
                content = f"edit r{self.round} op{i} {self.rng.random()}\n".encode() * self.rng.randint(1, 50)
            else:
                path = f"/r{self.round}/f{i}.md" if i % 3 else f"/f{self.round}-{i}.md"
                content = f"new r{self.round} op{i}\n".encode()
            self.inflight = (path, content)
            full = os.path.join(self.top, path.lstrip("/"))
            try:
                if content is None:
                    os.unlink(full)
                else:
                    os.makedirs(os.path.dirname(full), exist_ok=True)
                    with open(full, "wb") as f:
                        f.write(content)
                    self.writes[path] = self.writes.get(path, 0) + 1
            except OSError:
                return  # the mount died under us: this one is in flight
            self.acked[path] = content
            self.inflight = None

    def check(self, shown: dict[str, bytes]) -> int:
        """Lost acknowledged changes (0 expected)."""
        lost = 0
        for path, content in self.acked.items():
            got = shown.get(path)
            if got == content:
                continue
            if self.inflight and self.inflight[0] == path and got == self.inflight[1]:
                continue  # the in-flight operation on the same path landed too
            lost += 1
        return lost


def _check_store(rig, box, writes: dict[str, int], stats) -> None:
    shown = walk(box.root / RW)
    stored = store_bytes(rig.api, rig.rw)
    if stored != shown:
        stats["divergences"] += 1
    assert stored == shown, "store != mount after recovery"
    for path, m in rig.api.memories(rig.rw).items():
        n = len(rig.api.versions(rig.rw, m["id"]))
        # Each sync pushes a file's latest content once: never more versions than acknowledged writes.
        assert n <= max(1, writes.get(path, 0)), (path, n, writes.get(path))


def _remount(box) -> None:
    proc = box.mount(check=False)
    assert proc.returncode == 0, proc.stderr


def test_sigkill_of_the_daemon_during_bursts_and_ticks(rig, stats):
    rng = random.Random(SEED)
    box = rig.sandbox("crash")
    box.mount()
    top = box.root / RW
    known: dict[str, bytes | None] = {}
    writes: dict[str, int] = {}
    for round_ in range(profile(3, 50)):
        during_tick = round_ % 2 == 1
        burst = Burst(top, rng, round_, known, ops=profile(40, 60))
        sync_proc = None
        if during_tick:
            burst.thread.start()
            burst.thread.join(30)  # a whole burst, then a tick, killed at a random point in it
            sync_proc = subprocess.Popen(
                [sys.executable, "-m", "memfs", "sync", "--root", str(box.root), "--force", "--wait"],
                env=box.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(rng.uniform(0.3, 1.2))  # the command starts in ~0.5 s; the tick follows
        else:
            burst.thread.start()
            time.sleep(rng.uniform(0.0, 0.3))
        box.kill9()
        stats["crashes"] += 1
        burst.thread.join(30)
        assert not burst.thread.is_alive(), "a writer hung on the dead mount"
        if sync_proc:
            sync_proc.wait(60)
        _remount(box)
        shown = walk(top)
        lost = burst.check(shown)
        stats["lost"] += lost
        assert lost == 0, f"round {round_}: {lost} acknowledged change(s) lost"
        stats["steps"] += len(burst.acked)
        for p, n in burst.writes.items():
            writes[p] = writes.get(p, 0) + n
        known = {p: c for p, c in {**known, **burst.acked}.items()}
        known.update({p: shown.get(p) for p in list(known)})
        if round_ % 2 == 1 or round_ == profile(3, 50) - 1:
            assert box.sync()["ok"]
            _check_store(rig, box, writes, stats)


def test_sigkill_of_the_service_during_pushes(rig, stats):
    rng = random.Random(SEED + 1)
    box = rig.sandbox("svc")
    box.mount()
    top = box.root / RW
    writes: dict[str, int] = {}
    for round_ in range(profile(2, 20)):
        for i in range(profile(25, 40)):
            path = f"/s{round_}/f{i}.md" if i % 4 else f"/shared{i % 8}.md"
            (top / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (top / path.lstrip("/")).write_text(f"round {round_} file {i}\n")
            writes[path] = writes.get(path, 0) + 1
        sync_proc = subprocess.Popen(
            [sys.executable, "-m", "memfs", "sync", "--root", str(box.root), "--force", "--wait"],
            env=box.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.4, 1.0))
        rig.service.kill()
        stats["crashes"] += 1
        sync_proc.wait(60)
        rig.service.start()
        for _ in range(3):
            answer = box.sync(check=False)
            if answer.get("ok"):
                break
        assert answer.get("ok"), answer
        _check_store(rig, box, writes, stats)
        stats["steps"] += 1
