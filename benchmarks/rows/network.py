"""The network table (`--only net --rtt 40ms`): every client behind the delay proxy, memfs against
`memfs serve` (counter, changes feed, snapshot) and `memfs serve --hosted-api` (listings only)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import sys
import time
from typing import Any

from benchmarks.admin import Admin
from benchmarks.config import ADMIN_KEY, log, median
from benchmarks.harness import Bench
from benchmarks.official import official_child, official_download_time
from benchmarks.rows import Run
from tests.support.sandbox import Sandbox
from tests.support.service import ServiceProcess


def run_network(b: Bench, r: Run) -> None:
    """The network group: a second service, `memfs serve --hosted-api`, on a copy of the seeded
    database (`benchmarks.main` copied it before the first service started), then the rows."""
    work = b.work / "hosted"
    hosted = ServiceProcess(work, admin_key=ADMIN_KEY, db_path=work / "data" / "store.db", hosted_api=True)
    try:
        log(f"network rows at rtt {(b.rtt or 0) * 1000:g} ms, memfs serve and memfs serve --hosted-api")
        row_network(b, hosted, r.ids)
    finally:
        hosted.stop()


def row_network(b: Bench, hosted: ServiceProcess, ids: list[str]) -> None:
    """The network table: every client (memfs and the official worker) behind the delay proxy
    (--rtt), memfs against `memfs serve` (counter, changes feed, snapshot) and against
    `memfs serve --hosted-api` (the same data; listings only: docs/SEMANTICS.md, "A service without
    the counter"). The official worker uses only the hosted API, so it runs once per row, against
    the hosted-API service."""
    rtt = f"{(b.rtt or 0) * 1000:g} ms"
    hadmin = Admin(hosted.base_url)
    try:
        _row_network(b, hosted, hadmin, ids, rtt)
    finally:
        hadmin.close()


def _row_network(b: Bench, hosted: ServiceProcess, hadmin: Admin, ids: list[str], rtt: str) -> None:
    cfg = b.cfg
    pc, ph = b.proxy(b.svc), b.proxy(hosted)
    modes = {"counter": (b.admin, pc), "hosted": (hadmin, ph)}
    one = {m: adm.session(ids[:1]) for m, (adm, _p) in modes.items()}
    eight = {m: adm.session(ids) for m, (adm, _p) in modes.items()}

    # first download, one store
    ready: dict[str, list[float]] = {"counter": [], "hosted": [], "official": []}
    for i in range(cfg.runs):
        for m, (_adm, proxy) in modes.items():
            sb = b.sandbox(one[m], base_url=proxy.url, name=f"net1-{m}")
            try:
                ready[m].append(b.mount(sb))
            finally:
                b.close_sandbox(sb)
        root = b.work / f"official-net1-{i}"
        root.mkdir()
        ready["official"].append(asyncio.run(official_download_time(ph.url, one["hosted"], root)))
        shutil.rmtree(root, ignore_errors=True)
    o = median(ready["official"])
    for m, limit in (("hosted", 0.5), ("counter", 0.2)):
        v = median(ready[m])
        b.add(
            f"net first-download ({m})",
            f"`memfs mount` of 1 full store ({m} service) vs official download, rtt {rtt}",
            v,
            o,
            "s",
            f"<= {limit:g}x official",
            v <= limit * o,
            base_label="official",
            details={"memfs_runs_s": ready[m], "official_runs_s": ready["official"], "rtt": rtt},
        )

    # eight stores: download; on the last run's mounts the steady rows
    k = min(3, len(ids) - 1)
    listing = b.admin.list_basic(ids[k])
    target_path = sorted(listing)[len(listing) // 2]
    target = {
        "store_id": ids[k],
        "memory_id": listing[target_path]["id"],
        "path": target_path,
        "slug": eight["hosted"]["slugs"][k],
    }
    push_paths = sorted(b.admin.list_basic(ids[0]))[:200]
    ready8: dict[str, list[float]] = {"counter": [], "hosted": [], "official": []}
    steady: dict[str, dict[str, Any]] = {}
    off: dict[str, Any] = {}
    for run in range(cfg.runs_8):
        last = run == cfg.runs_8 - 1
        for m, (adm, proxy) in modes.items():
            sess = eight[m]
            sb = b.sandbox(sess, base_url=proxy.url, name=f"net8-{m}")
            try:
                ready8[m].append(b.mount(sb))
                if last:
                    steady[m] = _memfs_steady(b, sb, sess, adm, target, push_paths)
            finally:
                b.close_sandbox(sb)
        root = b.work / f"official-net8-{run}"
        root.mkdir()
        off = official_child(
            {
                "service_url": hosted.base_url,
                "proxy_url": ph.url,
                "ctl_port": ph.ctl_port,
                "root": str(root),
                "session": eight["hosted"],
                "runs": cfg.runs,
                "change_target": target,
                "steady": last,
                "push_paths": [(eight["hosted"]["slugs"][0], p) for p in push_paths],
                "push_store": ids[0],
            }
        )
        shutil.rmtree(root, ignore_errors=True)
        ready8["official"].append(off["download_s"])
    o = median(ready8["official"])
    for m in modes:
        v = median(ready8[m])
        b.add(
            f"net first-download-8 ({m})",
            f"`memfs mount` of {len(ids)} full stores ({m}) vs official, rtt {rtt}",
            v,
            o,
            "s",
            "<= 0.3x official",
            v <= 0.3 * o,
            base_label="official",
            details={"memfs_runs_s": ready8[m], "official_runs_s": ready8["official"]},
        )
    oi = median([x["s"] for x in off["idle"]])
    for m, target_x in (("counter", 0.1), ("hosted", 0.5)):
        v = median([x["s"] for x in steady[m]["idle"]])
        b.add(
            f"net idle-tick-8 ({m})",
            f"forced tick, {len(ids)} full stores, nothing changed, rtt {rtt}",
            v,
            oi,
            "s",
            f"<= {target_x:g}x official",
            v <= target_x * oi,
            base_label="official",
            details={"memfs_runs": steady[m]["idle"], "official_runs": off["idle"]},
        )
    oc = median([x["s"] for x in off["change"]])
    for m in modes:
        runs = steady[m]["change"]
        v = median([x["s"] for x in runs])
        b.add(
            f"net one-edit ({m})",
            f"an admin edit until readable (forced tick), {len(ids)} stores, rtt {rtt}",
            v,
            oc,
            "s",
            "<= 0.2x official",
            v <= 0.2 * oc and all(x["visible"] for x in runs),
            base_label="official",
            details={"memfs_runs": runs, "official_runs": off["change"]},
        )
    op = off["push_sync_if_due_s"]
    for m in modes:
        v = steady[m]["push_s"]
        b.add(
            f"net push-200 ({m})",
            f"200 changed files until on the service (`memfs sync --force --wait` vs "
            f"official sync_if_due), {len(ids)} stores mounted, rtt {rtt}",
            v,
            op,
            "s",
            "<= 0.3x official",
            v <= 0.3 * op and steady[m]["push_landed"] == len(push_paths),
            base_label="official",
            details={
                "memfs_landed": steady[m]["push_landed"],
                "official_landed": off["push_sync_if_due_landed"],
                "official_flush_writes_s": off["push_flush_writes_s"],
                "official_flush_writes_landed": off["push_flush_writes_landed"],
            },
        )
    for m in modes:
        runs = steady[m]["not_due"]
        v = median(runs)
        b.add(
            f"net sync-not-due ({m})",
            "`memfs sync` (the CLI process, not forced) when no tick is due",
            v,
            0.020,
            "s",
            "<= 20 ms",
            v <= 0.020,
            base_label="target",
            details={"runs_s": runs},
        )


def _memfs_steady(
    b: Bench, sb: Sandbox, sess: dict, admin: Admin, target: dict, push_paths: list[str]
) -> dict:
    """On a mounted sandbox: idle ticks, one-edit ticks, a push of 200 changed files, `memfs sync`
    when not due. Forced ticks go through the control socket (as the bench's other rows)."""
    cfg = b.cfg
    out: dict[str, Any] = {"idle": [], "change": [], "not_due": []}
    b.control_sync(sb, force=True, wait=True)  # settle: the first tick after a mount
    for _ in range(cfg.runs):
        t = time.perf_counter()
        ans = b.control_sync(sb, force=True)
        out["idle"].append(
            {"s": time.perf_counter() - t, "tick_requests": ans.get("requests"), "ok": ans.get("ok")}
        )
    f = sb.root / sess["slugs"][list(sess["slugs"]).index(target["slug"])] / target["path"].lstrip("/")
    for i in range(cfg.runs):
        new = f"memfs one-edit {i} {time.time()}\n" + "x" * 2000
        admin.update(target["store_id"], target["memory_id"], new)
        t = time.perf_counter()
        ans = b.control_sync(sb, force=True)
        ok = f.read_text() == new
        out["change"].append(
            {"s": time.perf_counter() - t, "tick_requests": ans.get("requests"), "visible": ok}
        )
    token = f"memfs push {time.time()}\n"
    top = sb.root / sess["slugs"][0]
    for path in push_paths:
        (top / path.lstrip("/")).write_text(token + path + "\n")
    t = time.perf_counter()
    ans = b.control_sync(sb, force=True, wait=True)
    out["push_s"] = time.perf_counter() - t
    out["push_answer"] = {k: ans.get(k) for k in ("ok", "pushed", "requests", "error")}
    listed = admin.list_basic(sess["store_ids"][0])
    out["push_landed"] = sum(
        1
        for p in push_paths
        if listed[p]["content_sha256"] == hashlib.sha256((token + p + "\n").encode()).hexdigest()
    )
    # The `memfs` command as a worker's hook runs it (bin/memfs in the venv), not `python -m memfs`:
    # runpy alone imports importlib.util and contextlib, ~8 ms of a ~20 ms target.
    # With the byte-code cache an installed memfs has: PYTHONDONTWRITEBYTECODE (set in some shells)
    # would have every call compile the hook's modules again; the first call writes the cache.
    memfs_cmd = [os.path.join(os.path.dirname(sys.executable), "memfs"), "sync", "--root", str(sb.root)]
    env = {k: v for k, v in sb.env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(memfs_cmd, env=env, capture_output=True, timeout=60)
    for _ in range(5):
        t = time.perf_counter()
        proc = subprocess.run(memfs_cmd, env=env, capture_output=True, text=True, timeout=60)
        out["not_due"].append(time.perf_counter() - t)
        if proc.returncode != 0:
            raise AssertionError(f"memfs sync exited {proc.returncode}: {proc.stderr}")
    return out
