"""propagation: a write in mount A until it is readable in mount B (ticks by `memfs sync`, not forced)."""

from __future__ import annotations

import asyncio
import random
import time

from benchmarks.config import INTERVAL, median
from benchmarks.harness import Bench
from benchmarks.official import make_due, official_open, official_teardown


def row_propagation(b: Bench, store_id: str) -> None:
    """Write in A, readable in B; both with a 5 s interval, ticks driven by `memfs sync` (not forced)
    as the worker calls it at the start of every tool call (here: every 0.25 s on each side), each
    trial at random, independent phases of A's and B's intervals."""
    cfg = b.cfg
    rng = random.Random(7)
    sa, sb_ = b.admin.session([store_id]), b.admin.session([store_id])
    listing = b.admin.list_basic(store_id)
    path = sorted(listing)[1]
    A, B = b.sandbox(sa, name="propA"), b.sandbox(sb_, name="propB")
    mem: list[float] = []
    try:
        b.mount(A)
        b.mount(B)
        fa = A.root / sa["slugs"][0] / path.lstrip("/")
        fb = B.root / sb_["slugs"][0] / path.lstrip("/")
        for i in range(cfg.prop_trials):
            # Two sandboxes tick on their own, unrelated phases: B's is set at random here, A's
            # lies at random relative to the write (without this both would tick in lockstep).
            time.sleep(rng.uniform(0, INTERVAL))
            b.control_sync(B, force=True)
            time.sleep(rng.uniform(0, INTERVAL))
            token = f"propagation {i} {time.time()}\n"
            fa.write_text(token)
            t0 = time.perf_counter()
            while True:
                b.control_sync(A, force=False)
                b.control_sync(B, force=False)
                if fb.read_text() == token:
                    break
                if time.perf_counter() - t0 > 60:
                    raise RuntimeError("memfs propagation: not visible after 60 s")
                time.sleep(0.25)
            mem.append(time.perf_counter() - t0)
    finally:
        b.close_sandbox(A)
        b.close_sandbox(B)

    async def official() -> list[float]:
        ra, rb = b.work / "official-propA", b.work / "official-propB"
        ra.mkdir()
        rb.mkdir()
        ca, A, sess_a = await official_open(b.url, b.admin.session([store_id]), ra)
        cb, B, sess_b = await official_open(b.url, b.admin.session([store_id]), rb)
        out = []
        try:
            await A.download(sess_a)
            await B.download(sess_b)
            fa = A.roots[0] / path.lstrip("/")
            fb = B.roots[0] / path.lstrip("/")
            for i in range(cfg.prop_trials):
                await asyncio.sleep(rng.uniform(0, INTERVAL))
                make_due(B)
                await B.sync_if_due()
                await asyncio.sleep(rng.uniform(0, INTERVAL))
                token = f"official propagation {i} {time.time()}\n"
                fa.write_text(token)
                t0 = time.perf_counter()
                while True:
                    await A.sync_if_due()  # after each tool call, as the worker does
                    await B.sync_if_due()
                    if fb.read_text() == token:
                        break
                    if time.perf_counter() - t0 > 60:
                        raise RuntimeError("official propagation: not visible after 60 s")
                    await asyncio.sleep(0.25)
                out.append(time.perf_counter() - t0)
        finally:
            await official_teardown(A, ca)
            await official_teardown(B, cb)
        return out

    off = asyncio.run(official())
    m, o = median(mem), median(off)
    b.add(
        "propagation",
        f"write in mount A -> readable in mount B, {INTERVAL:g} s interval, ticks by `memfs sync`",
        m,
        o,
        "s",
        f"median <= {INTERVAL + 1:g} s",
        m <= INTERVAL + 1,
        base_label="official",
        details={"memfs_runs_s": mem, "official_runs_s": off},
    )
