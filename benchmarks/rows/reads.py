"""grep-warm, grep-idle, grep-cold, stat-storm: shell tools over a mounted full store, local disk and tmpfs."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.config import log, median
from benchmarks.harness import Bench
from benchmarks.tools import drop_caches, grep_cmd, run_timed

IDLE_S = 5.0  # the pause before each grep-idle run
_HZ = os.sysconf("SC_CLK_TCK")


class CpuWatch:
    """What the machine did during each memfs run, so a slow run can be told apart from a slow
    daemon: the daemon's CPU time (all threads), the time its main thread (the one answering
    FUSE) waited for a CPU while runnable, the CPU time every process used, and the time the
    hypervisor ran something else on this machine's CPUs (steal). Linux /proc; empty figures
    where it cannot be read."""

    def __init__(self, pid: int | None):
        self.pid = pid
        self.runs: list[dict[str, float]] = []

    def _sample(self) -> tuple[float, float, float, float] | None:
        if not self.pid:
            return None
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{self.pid}/task/{self.pid}/schedstat") as f:
                waited = int(f.read().split()[1]) / 1e9
            with open("/proc/stat") as f:
                ticks = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError, IndexError):
            return None
        busy = (sum(ticks[:7]) - ticks[3] - ticks[4]) / _HZ  # user..softirq but idle and iowait
        return (int(fields[11]) + int(fields[12])) / _HZ, waited, busy, ticks[7] / _HZ

    def timed(self, cmd: list[str]) -> float:
        before = self._sample()
        t = run_timed(cmd)
        after = self._sample()
        if before and after:
            self.runs.append(
                {
                    "wall_s": t,
                    "daemon_cpu_s": after[0] - before[0],
                    "daemon_runqueue_wait_s": after[1] - before[1],
                    "machine_busy_cpu_s": after[2] - before[2],
                    "machine_steal_s": after[3] - before[3],
                }
            )
        return t

    def take(self) -> dict[str, Any]:
        runs, self.runs = self.runs, []
        if not runs:
            return {}
        return {"memfs_runs": runs} | {
            f"median_{k}": median([r[k] for r in runs]) for k in runs[0] if k != "wall_s"
        }


def row_reads(
    b: Bench, store_dir: Path, disk: Path, tmpfs: Path, ref: Path, daemon_pid: int | None = None
) -> None:
    cfg = b.cfg
    targets = {"memfs": store_dir, "disk": disk, "tmpfs": tmpfs}
    watch = CpuWatch(daemon_pid)

    def timed(k: str, cmd: list[str]) -> float:
        return watch.timed(cmd) if k == "memfs" else run_timed(cmd)

    def warm(cmd_for: Callable[[Path], list[str]]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {k: [] for k in targets}
        for d in targets.values():
            run_timed(cmd_for(d))  # warm-up run, not counted
        for _ in range(cfg.read_runs):
            for k, d in targets.items():  # interleaved, so noise hits every side alike
                out[k].append(timed(k, cmd_for(d)))
        return out

    def report(
        row: str, measure: str, runs: dict[str, list[float]], target: float, cold: bool = False
    ) -> None:
        m, d, t = median(runs["memfs"]), median(runs["disk"]), median(runs["tmpfs"])
        base = d if cold else min(d, t)  # warm: the faster of disk and tmpfs; cold: disk (tmpfs has no cold)
        machine = watch.take()
        if machine:
            log(
                f"{row}: memfs daemon cpu {machine['median_daemon_cpu_s'] * 1000:.0f} ms, waited for a CPU "
                f"{machine['median_daemon_runqueue_wait_s'] * 1000:.0f} ms, machine busy "
                f"{machine['median_machine_busy_cpu_s'] * 1000:.0f} ms, steal "
                f"{machine['median_machine_steal_s'] * 1000:.0f} ms per run (medians; load "
                f"{os.getloadavg()[0]:.2f})"
            )
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
                "machine": machine,
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
            idle[k].append(timed(k, grep_cmd(d)))
    report("grep-idle", f"`grep -r` again after {IDLE_S:g} s idle, warm page cache", idle, 8)
    cold: dict[str, list[float]] = {k: [] for k in targets}
    for _ in range(cfg.read_runs):
        for k, d in targets.items():
            drop_caches()
            cold[k].append(timed(k, grep_cmd(d)))
    report("grep-cold", "`grep -r` right after `echo 3 > /proc/sys/vm/drop_caches`", cold, 8, cold=True)
    ls = warm(lambda d: ["ls", "-lR", str(d)])
    report("stat-storm (ls -lR)", "`ls -lR` over a full store, warm", ls, 3)
    fnd = warm(lambda d: ["find", str(d), "-type", "f", "-newer", str(ref)])
    report("stat-storm (find)", "`find -type f -newer REF` over a full store, warm", fnd, 3)
