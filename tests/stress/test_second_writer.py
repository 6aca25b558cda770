"""A second writer (docs/DESIGN.md#stress): two mounts of one store and the API edit the same files at
the same time. After the final syncs both mounts and the store agree, and every local change the
mount no longer shows as written is kept: merged into the file (its lines are in it), or in a
conflict copy a `.sync-notices.log` notice names (SEMANTICS.md#d-merge), or in the kept copy of a
notice (a memory the store deleted).
"""

from __future__ import annotations

import os
import random
import re
import threading
from pathlib import Path

import pytest

from tests.stress.conftest import RW, profile, store_bytes, walk

pytestmark = pytest.mark.timeout(profile(150, 3000))

PATHS = [f"/p{i}.md" for i in range(6)] + ["/sub/q0.md", "/sub/q1.md"]
KEPT = re.compile(r"kept at (\S+?)\)?$")
COPY = re.compile(r"yours is at (\S+)$")


def _local_round(top: Path, rng: random.Random, tag: str) -> dict[str, bytes | None]:
    """A few writes/deletes in one mount; returns its last change per path."""
    done: dict[str, bytes | None] = {}
    for i in range(rng.randint(2, 6)):
        path = rng.choice(PATHS)
        full = top / path.lstrip("/")
        if rng.random() < 0.2:
            if full.exists():
                full.unlink()
                done[path] = None
            continue
        full.parent.mkdir(parents=True, exist_ok=True)
        content = f"{tag} edit {i}\n".encode()
        full.write_bytes(content)
        done[path] = content
    return done


def _api_round(api, store: str, rng: random.Random, tag: str) -> None:
    for i in range(rng.randint(1, 4)):
        path = rng.choice(PATHS)
        existing = api.memories(store).get(path)
        roll = rng.random()
        if existing and roll < 0.2:
            api.delete(store, existing["id"])
        elif existing:
            api.update(store, existing["id"], content=f"{tag} api edit {i}\n")
        else:
            try:
                api.create(store, path, f"{tag} api create {i}\n")
            except AssertionError:  # 409: a mount pushed that path meanwhile
                pass


def _check_overrides(box, before_lines: int, done: dict[str, bytes | None]) -> int:
    """Every written file the mount no longer shows as written is merged into it, or in the conflict
    copy or the kept copy a new notice names."""
    shown = walk(box.root / RW)
    new = box.notices(RW)[before_lines:]
    missing = 0
    for path, content in done.items():
        if content is None or shown.get(path) == content:
            continue
        if path in shown and set(content.splitlines()) <= set(shown[path].splitlines()):
            continue  # merged with the store's version
        kept = []
        for line in new:
            parts = line.split(" ", 3)
            if len(parts) == 4 and parts[2] == path:
                m = KEPT.search(parts[3])
                if m and os.path.exists(m.group(1)):
                    kept.append(Path(m.group(1)).read_bytes())
                m = COPY.search(parts[3])
                if m and m.group(1) in shown:
                    kept.append(shown[m.group(1)])
        if content not in kept:
            missing += 1
    return missing


def test_two_mounts_and_the_api_converge_and_every_override_is_noticed(rig, stats):
    rng = random.Random(int(os.environ.get("MEMFS_STRESS_SEED", "2")))
    a, b = rig.sandbox("a"), rig.sandbox("b")
    a.mount()
    b.mount()
    for round_ in range(profile(4, 40)):
        results: dict[str, dict] = {}
        lines = {"a": len(a.notices(RW)), "b": len(b.notices(RW))}

        def run(name, box, seed, tag, results=results):
            results[name] = _local_round(box.root / RW, random.Random(seed), tag)

        threads = [
            threading.Thread(target=run, args=(n, box, rng.random(), f"r{round_}{n}"))
            for n, box in (("a", a), ("b", b))
        ]
        threads.append(
            threading.Thread(
                target=_api_round, args=(rig.api, rig.rw, random.Random(rng.random()), f"r{round_}")
            )
        )
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for name, box in (("a", a), ("b", b)):
            assert box.sync()["ok"]
            missing = _check_overrides(box, lines[name], results[name])
            stats["lost"] += missing
            assert missing == 0, (
                f"round {round_}: {name} lost {missing} overridden change(s) without a kept copy"
            )
        stats["steps"] += sum(len(r) for r in results.values())
    # Final syncs: a, b, a again: both mounts and the store agree.
    for box in (a, b, a):
        assert box.sync()["ok"]
    stored = store_bytes(rig.api, rig.rw)
    if not (walk(a.root / RW) == stored == walk(b.root / RW)):
        stats["divergences"] += 1
    assert walk(a.root / RW) == stored
    assert walk(b.root / RW) == stored
