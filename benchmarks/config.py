"""The bench's sizes (full and --quick), its constants, and the two helpers every module uses."""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass

ADMIN_KEY = "bench-admin-key-0123456789abcdef"
MAX_CONTENT = 100 * 1024  # "each <= 100 KiB" (the service allows 102,400 bytes)
INTERVAL = 5.0  # the smallest sync interval both sides accept


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


@dataclass
class Config:
    quick: bool
    memories: int = 2000  # per full store
    store_bytes: int = 33_400_000  # ~31.9 MiB: under the mount's default --max-bytes (32 MiB)
    stores: int = 8
    runs: int = 3  # write-burst, ticks
    mount_runs: int = 5  # mount-ready and mount-ready-early
    runs_8: int = 2  # mount-ready-8 (the last run's mounts also serve idle-tick, one-change-tick, rss)
    read_runs: int = 5  # grep / stat
    burst_runs: int = 2  # each run pushes 2,000 creates per side: bound by the service's commits
    prop_trials: int = 3
    burst_files: int = 2000
    burst_size: int = 16 * 1024
    load_seconds: float = 4.0

    @classmethod
    def make(cls, quick: bool) -> Config:
        if not quick:
            return cls(quick=False)
        return cls(
            quick=True,
            memories=150,
            store_bytes=2_500_000,
            stores=3,
            runs=1,
            mount_runs=1,
            runs_8=1,
            read_runs=3,
            burst_runs=1,
            prop_trials=1,
            burst_files=200,
            load_seconds=1.0,
        )
