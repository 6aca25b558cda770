"""mount-ready: time until one full store is readable, `memfs mount` against the official download."""

from __future__ import annotations

import asyncio
import shutil

from benchmarks.config import median
from benchmarks.harness import Bench
from benchmarks.official import official_download_time


def row_mount_ready(b: Bench, sess: dict, label: str, runs: int) -> None:
    mem, off = [], []
    for i in range(runs):
        sb = b.sandbox(sess, name=label)
        try:
            mem.append(b.mount(sb))
        finally:
            b.close_sandbox(sb)
        root = b.work / f"official-{label}-{i}"
        root.mkdir()
        off.append(asyncio.run(official_download_time(b.url, sess, root)))
        shutil.rmtree(root, ignore_errors=True)
    m, o = median(mem), median(off)
    b.add(
        label,
        f"time until {len(sess['slugs'])} full store(s) are readable: `memfs mount` vs official download",
        m,
        o,
        "s",
        "<= 0.2x official",
        m <= 0.2 * o,
        base_label="official",
        details={"memfs_runs_s": mem, "official_runs_s": off},
    )
