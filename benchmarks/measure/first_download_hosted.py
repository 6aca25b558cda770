"""The first download under the hosted API's limits, both sides (docs/PERFORMANCE.md,
"Over a network"): `memfs mount` and the official worker's `download()`, each against its own
`memfs serve --hosted-api` with the emulator's default limits (so neither inherits the other's
spent allowance), every client behind a delay proxy; one store of 2,000 memories, then 8, in both
orders; requests and 429s as each emulator counted them; and the limit's floor for the pages the
stores hold, from the emulator's settings (its burst at once, then its rate). memfs is timed twice in
each order: `memfs mount` forking its daemon (`memfs`), and handed to a daemon started before the
session (`memfs-early`: `memfs mount --prestart`, the sandbox image's way, its imports done).

    .venv/bin/python -m benchmarks.measure.first_download_hosted [--rtt 0.04] [--runs 2]   # as root (it mounts)

`scripts/bench --only first` runs the same as rows of the bench's table (benchmarks/rows/first_download.py).

Between two downloads on one emulator it waits until that emulator's bucket is full again.
Prints one JSON object (every run) and a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.admin import Admin
from benchmarks.config import ADMIN_KEY, Config, log
from benchmarks.corpus import build_stores
from benchmarks.official import official_download_time
from benchmarks.rows.mount import prestart
from memfs.client.listing import FULL_LIMIT
from memfs.service.orglimit import DEFAULT_BURST_S, DEFAULT_READS_PER_MIN, burst_for
from tests.support.proxy import ProxyProcess
from tests.support.sandbox import Sandbox, is_mounted
from tests.support.seed import seed_database
from tests.support.service import ServiceProcess


def floor_s(pages: int) -> float:
    """The least time the emulator's read limit lets `pages` requests through: its burst at once,
    then its rate."""
    rate = DEFAULT_READS_PER_MIN / 60.0
    return max(0, pages - burst_for(DEFAULT_READS_PER_MIN, DEFAULT_BURST_S)) / rate


class Side:
    def __init__(self, work: Path, name: str, seed: Path, rtt: float):
        (work / name / "data").mkdir(parents=True)
        shutil.copyfile(seed, work / name / "data" / "store.db")
        self.svc = ServiceProcess(
            work / name, admin_key=ADMIN_KEY, db_path=work / name / "data" / "store.db",
            hosted_api=True, org_limits=None,
        )  # fmt: skip
        self.proxy = ProxyProcess(self.svc.base_url, rtt=rtt)
        self.admin = Admin(self.svc.base_url)
        self.work = work / name

    def rest(self) -> None:
        """The emulator's bucket full again (its burst at its rate, and a second more)."""
        time.sleep(burst_for(DEFAULT_READS_PER_MIN, DEFAULT_BURST_S) / (DEFAULT_READS_PER_MIN / 60.0) + 1.0)

    def stop(self) -> None:
        self.admin.close()
        self.proxy.stop()
        self.svc.stop()


def memfs_run(side: Side, sess: dict, n: int, early: bool = False) -> dict:
    side.rest()
    before = side.admin.org_requests()
    sb = Sandbox(side.work, f"sb-{n}-{time.monotonic_ns()}", base_url=side.proxy.url,
                 session_id=sess["id"], work_secret=sess["work_secret"])  # fmt: skip
    try:
        if early:
            pid = prestart(sb)  # sends nothing: the session is not known yet
        load = os.getloadavg()[0]
        t = time.perf_counter()
        sb.mount(timeout=600)
        s = time.perf_counter() - t
        if early:
            assert sb.daemon_pid() == pid, "the mount did not go to the standby"
    finally:
        if is_mounted(sb.root):
            sb.memfs("unmount", "--root", str(sb.root), "--flush-timeout", "10", timeout=60)
        sb.close()
        shutil.rmtree(sb.dir, ignore_errors=True)
    return {"s": s, "load": load, **counted(side, before)}


def official_run(side: Side, sess: dict) -> dict:
    side.rest()
    before = side.admin.org_requests()
    root = Path(tempfile.mkdtemp(prefix="official-", dir=side.work))
    try:
        load = os.getloadavg()[0]
        s = asyncio.run(official_download_time(side.proxy.url, sess, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"s": s, "load": load, **counted(side, before)}


def counted(side: Side, before: dict[str, int]) -> dict[str, int]:
    after = side.admin.org_requests()
    return {"requests": after["total"] - before["total"], "limited": after["limited"] - before["limited"]}


def measure(
    work: Path, stores: dict[str, dict[str, str]], counts: tuple[int, ...], runs: int, rtt: float
) -> dict:
    """Both sides' downloads of the first `n` full stores for each n of `counts`, `runs` times in
    each order, each side on its own emulator (seeded in `work` from `stores`): every run, and the
    limit's floor for each n's pages."""
    out: dict = {"rtt": rtt, "runs": []}
    sides: list[Side] = []
    try:
        seed = work / "seed.db"
        ids_by_name = seed_database(seed, stores, age_s=86_400.0)
        ids = [ids_by_name[f"full-{k}"] for k in range(max(counts))]
        mem, off = Side(work, "memfs", seed, rtt), Side(work, "official", seed, rtt)
        sides = [mem, off]
        for n in counts:
            sm, so = mem.admin.session(ids[:n]), off.admin.session(ids[:n])
            pages = sum(math.ceil(len(stores[f"full-{k}"]) / FULL_LIMIT) for k in range(n))
            for run in range(runs):
                for order in (("memfs", "memfs-early", "official"), ("official", "memfs-early", "memfs")):
                    for who in order:
                        if who == "official":
                            r = official_run(off, so)
                        else:
                            r = memfs_run(mem, sm, n, early=who == "memfs-early")
                        r.update(stores=n, who=who, order="-".join(order), run=run)
                        out["runs"].append(r)
                        log(json.dumps(r))
            out[f"floor_{n}"] = {"pages": pages, "s": floor_s(pages)}
    finally:
        for side in sides:
            side.stop()
    return out


def summary(out: dict, n: int) -> dict:
    """One count's runs by side: the median seconds, every run's seconds, requests and 429s; the
    official worker's, and the floor. Empty when that count was not measured."""
    rs = [r for r in out["runs"] if r["stores"] == n]
    if not rs:
        return {}
    got: dict = {"floor_s": out[f"floor_{n}"]["s"], "load": [round(r["load"], 1) for r in rs]}
    for who in ("memfs", "memfs-early", "official"):
        mine = [r for r in rs if r["who"] == who]
        got[who] = {
            "s": statistics.median(r["s"] for r in mine),
            "runs_s": [round(r["s"], 3) for r in mine],
            "requests": [r["requests"] for r in mine],
            "limited": [r["limited"] for r in mine],
        }
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rtt", type=float, default=0.040)
    ap.add_argument("--runs", type=int, default=2, help="runs of each order")
    ap.add_argument("--only", choices=("1", "8"), default=None)
    args = ap.parse_args()
    cfg = Config.make(False)
    work = Path(tempfile.mkdtemp(prefix="memfs-fdh-", dir="/tmp"))
    try:
        stores = build_stores(cfg)
        counts = tuple(n for n in (1, cfg.stores) if not args.only or int(args.only) == (1 if n == 1 else 8))
        out = measure(work, stores, counts, args.runs, args.rtt)
        print(json.dumps(out, indent=1))
        for n in counts:
            got = summary(out, n)
            o, fl = got["official"]["s"], got["floor_s"]
            for who in ("memfs", "memfs-early"):
                m = got[who]["s"]
                print(
                    f"{n} store(s): {who} {m:.2f} s (runs {[round(x, 2) for x in got[who]['runs_s']]}), "
                    f"official {o:.2f} s ({m / o:.3f}x), floor {fl:.2f} s "
                    f"({m / fl if fl else float('nan'):.3f}x); {who} requests {got[who]['requests']} "
                    f"429s {got[who]['limited']}"
                )
            print(
                f"{n} store(s): official runs {[round(x, 2) for x in got['official']['runs_s']]}, "
                f"requests {got['official']['requests']} 429s {got['official']['limited']}; load {got['load']}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
