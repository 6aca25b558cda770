"""memfs benchmark: memfs against local disk/tmpfs and the official copy-based worker.

One command, its own `memfs serve` (temp dir, free loopback port), its own data, one table on
stdout and a JSON file under bench/results/. Every figure is a median of several runs measured in
this run; ratios are what to read (these machines are shared and noisy).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.admin import Admin
from benchmarks.config import ADMIN_KEY, Config, log
from benchmarks.corpus import build_stores, write_tree
from benchmarks.harness import Bench
from benchmarks.official import run_child
from benchmarks.report import in_issue_order, machine, print_table, write_json
from benchmarks.rows import BY_NAME, GROUPS, Run
from tests.support.seed import seed_database
from tests.support.service import ServiceProcess

REPO = Path(__file__).resolve().parent.parent
SEED_AGE_S = 86_400.0  # seconds: how old the seeded memories' versions are


def parse_rtt(text: str) -> float:
    """'40ms', '0ms', '0.1s' -> seconds."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"--rtt: a duration like 40ms or 0.1s (got {text!r})")
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def parse_seconds(text: str) -> tuple[float, float, float]:
    try:
        idle, active, fleet = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--hosted-seconds: IDLE,ACTIVE,FLEET in seconds (got {text!r})"
        ) from None
    return idle, active, fleet


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced sizes and runs (about a minute)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs (not the mounts) for inspection")
    ap.add_argument("--out", default=None, help="JSON output (default bench/results/<time>[-quick].json)")
    ap.add_argument(
        "--only",
        default=None,
        help=f"comma-separated groups: {','.join(g.name for g in GROUPS)} (net: the network "
        "table, against memfs serve and memfs serve --hosted-api)",
    )
    ap.add_argument(
        "--rtt",
        type=parse_rtt,
        default=None,
        help="round trip between every client and the service, e.g. 40ms (a delay proxy; "
        "default: direct, except the rows that always go through a counting proxy)",
    )
    ap.add_argument(
        "--hosted-seconds",
        type=parse_seconds,
        default=None,
        metavar="IDLE,ACTIVE,FLEET",
        help="the hosted rows' windows in seconds (default 600,300,300; --quick 60,60,60)",
    )
    ap.add_argument(
        "--fleet", type=int, default=None, metavar="N", help="sandboxes in the hosted fleet row (20)"
    )
    ap.add_argument("--child-official", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.only is not None:
        unknown = set(args.only.split(",")) - set(BY_NAME)
        if unknown:
            ap.error(f"--only: unknown group(s) {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child_official:
        run_child(args.child_official)
        return 0
    if os.geteuid() != 0:
        print("scripts/bench: must run as root (FUSE mounts, drop_caches)", file=sys.stderr)
        return 2
    cfg = Config.make(args.quick)
    wanted = set((args.only or ",".join(g.name for g in GROUPS)).split(","))
    started = time.time()
    work = Path(tempfile.mkdtemp(prefix="memfs-bench-", dir="/tmp"))
    shm = Path(tempfile.mkdtemp(prefix="memfs-bench-", dir="/dev/shm"))
    b = Bench(cfg, work, shm)
    b.rtt = args.rtt
    b.extra.update(hosted_seconds=args.hosted_seconds, fleet=args.fleet)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        log(
            f"work dir {work}, tmpfs dir {shm}; {'quick' if cfg.quick else 'full'} run"
            + (f", rtt {args.rtt * 1000:g} ms" if args.rtt is not None else "")
        )
        stores = build_stores(cfg)
        t = time.perf_counter()
        db = work / "service" / "data" / "store.db"
        db.parent.mkdir(parents=True)
        # Dated a day back, as a store's memories are (written over days, not just before the
        # run): the hosted rows' safety net rereads the last hour of versions (sync/feed.py).
        ids_by_name = seed_database(db, stores, age_s=SEED_AGE_S)
        log(
            f"seeded {cfg.stores} stores x {cfg.memories} memories "
            f"({sum(len(x) for x in stores['full-0'].values()) / 2**20:.1f} MiB each) in {time.perf_counter() - t:.1f} s"
        )
        disk, tmpfs = work / "local-disk" / "full-0", shm / "full-0"
        write_tree(disk, stores["full-0"])
        write_tree(tmpfs, stores["full-0"])
        ref = work / "newer-ref"
        ref.write_text("reference for find -newer\n")
        if "net" in wanted:  # the same data behind a hosted-API-only service (no counter, feed, snapshot)
            (work / "hosted" / "data").mkdir(parents=True)
            shutil.copyfile(db, work / "hosted" / "data" / "store.db")
        if "hosted" in wanted:  # the hosted rows' emulators each start from a copy of it
            shutil.copyfile(db, work / "hosted-seed.db")
        b.service = ServiceProcess(work / "service", admin_key=ADMIN_KEY, db_path=db)
        if args.rtt is not None:
            b.front = b.proxy(b.svc)
        b.admin_client = Admin(b.svc.base_url)
        ids = [ids_by_name[f"full-{k}"] for k in range(cfg.stores)]
        run = Run(
            ids=ids,
            stores=stores,
            sess1=b.admin.session(ids[:1]),
            sess8=b.admin.session(ids),
            disk=disk,
            tmpfs=tmpfs,
            ref=ref,
        )
        for group in GROUPS:
            if group.name in wanted:
                log(group.title)
                group.run(b, run)
    finally:
        b.close_all()
        for p in b.proxies:
            p.stop()
        if b.admin_client is not None:
            b.admin_client.close()
        if b.service is not None:
            b.service.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)
        left = [line.split()[1] for line in open("/proc/mounts") if "memfs-bench-" in line]
        if left:
            log(f"WARNING: still mounted: {left}")
    elapsed = time.time() - started
    b.results = in_issue_order(b.results)
    table = print_table(b.results)
    print(table)
    out = (
        Path(args.out)
        if args.out
        else REPO
        / "bench"
        / "results"
        / (time.strftime("%Y%m%dT%H%M%S") + ("-quick" if cfg.quick else "") + ".json")
    )
    write_json(
        out,
        config=asdict(cfg),
        machine=machine(),
        elapsed_s=elapsed,
        rtt_s=b.rtt,
        command=" ".join(["scripts/bench", *(sys.argv[1:] if argv is None else argv)]),
        rows=b.results,
        table=table,
    )
    where = (
        f"every client through a {b.rtt * 1000:g} ms round trip"
        if b.rtt is not None
        else "loopback, no delay proxy"
    )
    if wanted & {"hosted", "relay"} and b.rtt is None:
        where += " (the hosted and relay rows: 40 ms, their default)"
    print(f"\n{len(b.results)} rows in {elapsed:.0f} s, {where}; JSON: {out}")
    return 0
