"""grep-warm, grep-idle, grep-cold, stat-storm: shell tools over a mounted full store, local disk and tmpfs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.config import median
from benchmarks.harness import Bench
from benchmarks.tools import drop_caches, grep_cmd, run_timed

IDLE_S = 5.0  # the pause before each grep-idle run


def row_reads(b: Bench, store_dir: Path, disk: Path, tmpfs: Path, ref: Path) -> None:
    cfg = b.cfg
    targets = {"memfs": store_dir, "disk": disk, "tmpfs": tmpfs}

    def warm(cmd_for: Callable[[Path], list[str]]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {k: [] for k in targets}
        for d in targets.values():
            run_timed(cmd_for(d))  # warm-up run, not counted
        for _ in range(cfg.read_runs):
            for k, d in targets.items():  # interleaved, so noise hits every side alike
                out[k].append(run_timed(cmd_for(d)))
        return out

    def report(
        row: str, measure: str, runs: dict[str, list[float]], target: float, cold: bool = False
    ) -> None:
        m, d, t = median(runs["memfs"]), median(runs["disk"]), median(runs["tmpfs"])
        base = d if cold else min(d, t)  # warm: the faster of disk and tmpfs; cold: disk (tmpfs has no cold)
        b.add(
            row,
            measure,
            m,
            base,
            "s",
            f"<= {target:g}x local",
            m <= target * base,
            base_label="local disk" if cold or d <= t else "tmpfs",
            details={
                "disk_s": d,
                "tmpfs_s": t,
                "ratio_vs_disk": m / d,
                "ratio_vs_tmpfs": m / t,
                "runs": runs,
            },
        )

    g = warm(grep_cmd)
    report("grep-warm", "`grep -r` over a full store, warm (second and later runs)", g, 8)
    # An agent greps, thinks, greps again: the kernel's entry/attribute cache lifetime (1 s,
    # SEMANTICS.md#d-kernel-cache) has run out by then, the page cache has not.
    idle: dict[str, list[float]] = {k: [] for k in targets}
    for _ in range(cfg.read_runs):
        for k, d in targets.items():
            time.sleep(IDLE_S)
            idle[k].append(run_timed(grep_cmd(d)))
    report("grep-idle", f"`grep -r` again after {IDLE_S:g} s idle, warm page cache", idle, 8)
    cold: dict[str, list[float]] = {k: [] for k in targets}
    for _ in range(cfg.read_runs):
        for k, d in targets.items():
            drop_caches()
            cold[k].append(run_timed(grep_cmd(d)))
    report("grep-cold", "`grep -r` right after `echo 3 > /proc/sys/vm/drop_caches`", cold, 8, cold=True)
    ls = warm(lambda d: ["ls", "-lR", str(d)])
    report("stat-storm (ls -lR)", "`ls -lR` over a full store, warm", ls, 3)
    fnd = warm(lambda d: ["find", str(d), "-type", "f", "-newer", str(ref)])
    report("stat-storm (find)", "`find -type f -newer REF` over a full store, warm", fnd, 3)
