"""The 10,000-memory rows (`scripts/bench --only big`): one store at the hosted API's cap (10,000
memories, the current guide's figure) on `memfs serve --hosted-api` with its default per-organisation
limits (1,200 reads and 300 writes a minute), behind the delay proxy (`--rtt`, 40 ms unless given),
requests counted at the emulator (`memfs_org_requests_total`).

| row | measure | target |
|---|---|---|
| big mount | `memfs mount --max-files 10000 --max-bytes 64MiB` until it returns (the first download; its requests and 429s in the details) | every file |
| big rss | the daemon's resident set after the download | (for the record) |
| big idle-tick | a forced `memfs sync`, nothing changed: requests | (the hosted budget) |
| big one-edit | an admin edit, then a forced `memfs sync` until readable: requests | (the hosted budget) |

The mount's defaults (--max-files 2,000, --max-bytes 32 MiB) stay the seeds'; a store this size is
mounted by giving the mount its full size, as an operator would.
"""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

from benchmarks.config import log, median
from benchmarks.corpus import make_corpus, store_contents, store_layout
from benchmarks.harness import Bench
from benchmarks.rows import Run
from benchmarks.rows.hosted import DEFAULT_RTT_S, INTERVAL_S, Emulator, delta, retrying
from tests.support.seed import seed_database

MEMORIES = 10_000
STORE_BYTES = 20_000_000  # ~2 KB a memory: a team's notes
MOUNT_LIMITS = ("--max-files", str(MEMORIES), "--max-bytes", "64MiB")


def seed(path: Path) -> tuple[str, str, str]:
    """One store of MEMORIES memories, seeded (a day old) before the emulator starts: its id, and
    the id and path of the memory the one-edit rows change (read from the database: listing
    10,000 memories through the API would spend the organisation's read budget the rows measure)."""
    rng = random.Random(37)
    corpus = make_corpus(rng, 2**20)
    stores = {"big": store_contents(rng, corpus, "big", store_layout(rng, MEMORIES, STORE_BYTES))}
    store_id = seed_database(path, stores, age_s=86_400.0)["big"]
    with sqlite3.connect(path) as db:
        mid, mpath = db.execute(
            "SELECT id, path FROM memories WHERE store_id = ? AND content IS NOT NULL ORDER BY path "
            "LIMIT 1 OFFSET ?",
            (store_id, MEMORIES // 2),
        ).fetchone()
    return store_id, mid, mpath


def run_big(b: Bench, r: Run) -> None:
    rtt = b.rtt if b.rtt is not None else DEFAULT_RTT_S
    db = b.work / "big-seed.db"
    t = time.perf_counter()
    store_id, memory_id, path = seed(db)
    log(f"big: seeded {MEMORIES} memories in {time.perf_counter() - t:.1f} s; rtt {rtt * 1000:g} ms")
    emu = Emulator(b, "big", db, rtt)
    sb = None
    try:
        sess = emu.session([store_id])
        sb = b.sandbox(sess, base_url=emu.proxy.url, name="big")
        c0 = emu.counts()
        t = time.perf_counter()
        sb.mount("--sync-interval", f"{INTERVAL_S:g}", *MOUNT_LIMITS, timeout=900)
        mount = {"s": time.perf_counter() - t, **delta(emu, c0)}
        files = sum(1 for p in (sb.root / sess["slugs"][0]).rglob("*") if p.is_file() and p.name[0] != ".")
        log(
            f"big: mounted in {mount['s']:.1f} s, {mount['requests']} requests, {mount['limited']} 429s, {files} files"
        )
        time.sleep(2.0)  # the first tick after the download is one interval away: none runs below
        rss = b.daemon_rss(sb)
        idle, edit = [], []
        f = sb.root / sess["slugs"][0] / path.lstrip("/")
        for i in range(b.cfg.runs):
            c0 = emu.counts()
            t = time.perf_counter()
            ans = b.control_sync(sb, force=True, wait=True)
            idle.append({"s": time.perf_counter() - t, "ok": ans.get("ok"), **delta(emu, c0)})
            log(f"big: idle tick {idle[-1]}")
            new = f"big one-edit {i} {time.time()}\n" + "x" * 2000
            retrying(lambda new=new: emu.admin.update(store_id, memory_id, new))
            c0 = emu.counts()
            t = time.perf_counter()
            ans = b.control_sync(sb, force=True, wait=True)
            dt = time.perf_counter() - t
            edit.append({"s": dt, "ok": ans.get("ok"), "visible": f.read_text() == new, **delta(emu, c0)})
            log(f"big: one-edit tick {edit[-1]}")
    finally:
        if sb is not None:
            b.close_sandbox(sb)
        emu.stop()
    _report(b, rtt, mount, files, rss, idle, edit)


def _report(b: Bench, rtt: float, mount: dict, files: int, rss: dict, idle: list, edit: list) -> None:
    at = f"{MEMORIES} memories, rtt {rtt * 1000:g} ms, default org limits"
    b.add(
        "big mount",
        f"`memfs mount {' '.join(MOUNT_LIMITS)}` until it returns (first download), {at}",
        mount["s"], float("nan"), "s", "every file", files == MEMORIES,
        base_label="-", details={**mount, "files": files},
    )  # fmt: skip
    b.add(
        "big rss",
        f"the daemon's resident set after the download, {at}",
        rss.get("VmRSS", 0) / 2**20, float("nan"), "MiB", "report", None,
        base_label="-", details={"VmRSS": rss.get("VmRSS"), "VmHWM": rss.get("VmHWM")},
    )  # fmt: skip
    b.add(
        "big idle-tick",
        f"requests of a forced `memfs sync --wait`, nothing changed, {at}",
        median([x["requests"] for x in idle]), float("nan"), "req", "report",
        all(x["ok"] and not x["limited"] for x in idle), base_label="-", details={"runs": idle},
    )  # fmt: skip
    b.add(
        "big one-edit",
        f"requests of a forced `memfs sync --wait` after one admin edit (until readable), {at}",
        median([x["requests"] for x in edit]), float("nan"), "req", "report",
        all(x["ok"] and x["visible"] and not x["limited"] for x in edit), base_label="-",
        details={"runs": edit, "s": median([x["s"] for x in edit])},
    )  # fmt: skip
