"""Live mode under load: N mounts of one store with random writers, then quiet.

No `memfs sync` is ever called: the mounts run with a 300 s interval, so only live mode (the
watch, its pulls (close-to-open), the debounced pushes) can make them converge. Each writer edits,
renames and deletes files of its own directory (so its last change per path is known: nothing
may be lost), now and then rewrites a shared file whole (a true conflict: the store's version stays,
the other goes onto the store as a conflict copy, every view must agree), and appends lines of its
own to one shared log with shell-style appends (SEMANTICS.md#d-merge: every line must be in the
store's log exactly once, each writer's in its order).
After the writers stop, every mount must reach the store's counter with nothing staged, and show
exactly the store's files. Short profile: 3 mounts for ~15 s; long: 8 mounts for a minute.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from memfs.session.control import DaemonClient
from tests.stress.conftest import RW, profile, store_bytes, wait_for, walk
from tests.support.api import MEMORY_BETA

pytestmark = pytest.mark.timeout(profile(240, 900))

MOUNTS = profile(3, 8)
WRITE_SECONDS = profile(15.0, 60.0)
SHARED = [f"/shared/s{i}.md" for i in range(4)]
LOG = "/shared/log.md"


def _counter(api, store: str) -> int:
    resp = api.http.get("/v1/memory_store_counters", params={"ids": store}, headers=MEMORY_BETA)
    assert resp.status_code == 200, resp.text
    return int(resp.json()["data"][0]["counter"])


def _writer(
    box,
    index: int,
    seed: int,
    stop: threading.Event,
    expected: dict[str, bytes | None],
    steps: list[int],
    errors: list[BaseException],
    appended: list[str],
) -> None:
    """Random changes in /w<index>/ (recorded in `expected`) and now and then a shared file."""
    rng = random.Random(seed)
    top = box.root / RW
    own = top / f"w{index}"
    n = 0
    try:
        own.mkdir(exist_ok=True)
        while not stop.is_set():
            n += 1
            roll = rng.random()
            live = [p for p, c in expected.items() if c is not None]
            if roll < 0.1:
                (top / "shared").mkdir(exist_ok=True)
                (top / rng.choice(SHARED).lstrip("/")).write_text(f"shared by {index} step {n}\n")
            elif roll < 0.25:
                (top / "shared").mkdir(exist_ok=True)
                line = f"writer {index} appends at step {n}"
                with open(top / LOG.lstrip("/"), "a") as log:  # what `echo ... >> log.md` does
                    log.write(line + "\n")
                appended.append(line)
            elif roll < 0.2 and live:
                path = rng.choice(live)
                (top / path.lstrip("/")).unlink()
                expected[path] = None
            elif roll < 0.3 and live:
                old = rng.choice(live)
                new = f"/w{index}/r{n}.md"
                (top / old.lstrip("/")).rename(top / new.lstrip("/"))
                expected[new], expected[old] = expected[old], None
            else:
                path = f"/w{index}/f{rng.randrange(12)}.md"
                content = f"writer {index} step {n}\n".encode() * rng.randint(1, 20)
                (top / path.lstrip("/")).write_bytes(content)
                expected[path] = content
            steps[index] += 1
            stop.wait(rng.uniform(0.02, 0.4))  # bursts and pauses: some closes inside a debounce
    except BaseException as exc:  # the main thread reports it
        errors.append(exc)


def test_mounts_with_random_writers_converge_to_the_store_without_a_sync(rig, stats):
    boxes = [rig.sandbox(f"m{i}") for i in range(MOUNTS)]
    for box in boxes:
        box.mount("--sync-interval", "300")
    assert wait_for(lambda: all(b.status()["mode"] == "live" for b in boxes), timeout=30)
    stop = threading.Event()
    expected: list[dict[str, bytes | None]] = [{} for _ in boxes]
    steps = [0] * MOUNTS
    errors: list[BaseException] = []
    appended: list[list[str]] = [[] for _ in boxes]
    threads = [
        threading.Thread(
            target=_writer, args=(box, i, 1000 + i, stop, expected[i], steps, errors, appended[i])
        )
        for i, box in enumerate(boxes)
    ]
    for t in threads:
        t.start()
    time.sleep(WRITE_SECONDS)
    stop.set()
    for t in threads:
        t.join(30)
    quiet_at = time.monotonic()  # the last write has returned
    assert not errors, errors
    stats["steps"] += sum(steps)

    # Asked over each daemon's control socket on a kept connection (a round trip of a few ms), not
    # with `memfs status` processes: eight of those take seconds on a loaded machine, and the
    # time to look was counted as time to converge. Not through the mounts either: a look at a
    # view is a filesystem request, which delays the quiet-time pulls it is waiting for.
    clients = [DaemonClient(state_dir=box.state_dir, timeout=30) for box in boxes]

    def converged() -> bool:
        counter = _counter(rig.api, rig.rw)
        for client in clients:
            s = next(s for s in client.status()["stores"] if s["slug"] == RW)
            if s["counter"] != counter or s["staged"] or s["pull_pending"]:
                return False
        return counter == _counter(rig.api, rig.rw)

    try:
        ok = wait_for(converged, timeout=profile(60, 120), interval=0.05)
        # The end of the look that found every mount at the store's counter: an upper bound of
        # the moment they got there (the look before it, at most ~0.1 s earlier, did not find it).
        # Reported (MEMFS_STRESS_REPORT, scripts/stress), never asserted: tests do not time things.
        stats["converge_ms"] = int((time.monotonic() - quiet_at) * 1000)
    finally:
        for client in clients:
            client.close()
    store = store_bytes(rig.api, rig.rw)
    for i, box in enumerate(boxes):
        view = walk(box.root / RW)
        if view != store:
            stats["divergences"] += 1
        for path, content in expected[i].items():
            if store.get(path) != content:
                stats["lost"] += 1
    log_lines = store.get(LOG, b"").decode().splitlines()
    # A line whose merges the store kept superseding (plan.MERGE_TRIES in a row) is in a conflict
    # copy of the log, on the store and named by a notice: not lost, counted apart.
    copied = {
        line
        for p, c in store.items()
        if p.startswith("/shared/log.conflict-")
        for line in c.decode().splitlines()
    }
    for lines in appended:  # every appended line once, and each writer's in its order
        mine = [line for line in log_lines if line in set(lines)]
        missing = set(lines) - set(mine)
        stats["in_log_copies"] += len(missing & copied)
        stats["lost"] += len(missing - copied) + (len(mine) - len(set(mine)))
        assert mine == lines or missing, (mine, lines)
    assert ok, [b.status() for b in boxes]
    assert stats["divergences"] == 0 and stats["lost"] == 0, dict(stats)
