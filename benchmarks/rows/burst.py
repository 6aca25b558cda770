"""write-burst: many new files written through the mount, then until all of them are on the service;
against the official worker writing the same files to local disk and its flush_writes."""

from __future__ import annotations

import asyncio
import shutil
import time

from benchmarks.config import median
from benchmarks.harness import Bench
from benchmarks.official import official_open, official_teardown
from benchmarks.tools import burst_write


def row_write_burst(b: Bench) -> None:
    cfg = b.cfg
    mem_w, mem_push, mem_req, off_w, off_push, off_req = [], [], [], [], [], []
    for i in range(cfg.burst_runs):
        # memfs: an empty store mounted; write; then a forced tick that waits for its uploads
        sid = b.admin.create_store(f"burst-memfs-{i}")
        sess = b.admin.session([sid])
        sb = b.sandbox(sess, name="burst")
        try:
            b.mount(sb)
            mem_w.append(burst_write(sb.root / sess["slugs"][0], cfg.burst_files, cfg.burst_size))
            r0 = b.admin.requests()
            t = time.perf_counter()
            ans = b.control_sync(sb, force=True, wait=True)
            mem_push.append(time.perf_counter() - t)
            mem_req.append(b.admin.requests() - r0)
            if not ans.get("ok"):
                raise RuntimeError(f"memfs push failed: {ans}")
        finally:
            b.close_sandbox(sb)
        got = len(b.admin.list_basic(sid))
        if got != cfg.burst_files:
            raise RuntimeError(f"memfs write-burst: {got} of {cfg.burst_files} files reached the service")
        # official: an empty store downloaded to local disk; write the same files; flush_writes
        sid = b.admin.create_store(f"burst-official-{i}")
        sess = b.admin.session([sid])
        root = b.work / f"official-burst-{i}"
        root.mkdir()

        async def official(sess=sess, root=root) -> tuple[float, float, int]:
            client, stores, session = await official_open(b.url, sess, root)
            try:
                await stores.download(session)
                w = burst_write(root / sess["slugs"][0], cfg.burst_files, cfg.burst_size)
                r0 = b.admin.requests()
                t = time.perf_counter()
                await stores.flush_writes()
                return w, time.perf_counter() - t, b.admin.requests() - r0
            finally:
                await official_teardown(stores, client)

        w, p, r = asyncio.run(official())
        off_w.append(w)
        off_push.append(p)
        off_req.append(r)
        shutil.rmtree(root, ignore_errors=True)
        got = len(b.admin.list_basic(sid))
        if got != cfg.burst_files:
            raise RuntimeError(f"official write-burst: {got} of {cfg.burst_files} files reached the service")
    mw, ow = median(mem_w), median(off_w)
    b.add(
        "write-burst (local write)",
        f"create {cfg.burst_files} files of {cfg.burst_size // 1024} KiB from one Python process",
        mw,
        ow,
        "s",
        "<= 8x local",
        mw <= 8 * ow,
        base_label="local disk",
        details={"memfs_runs_s": mem_w, "local_runs_s": off_w},
    )
    mp, op = median(mem_push), median(off_push)
    b.add(
        "write-burst (push)",
        "then until all are on the service: `memfs sync --force --wait` vs official flush_writes",
        mp,
        op,
        "s",
        "<= 0.3x official",
        mp <= 0.3 * op,
        base_label="official",
        details={
            "memfs_runs_s": mem_push,
            "official_runs_s": off_push,
            "memfs_requests": mem_req,
            "official_requests": off_req,
        },
    )
