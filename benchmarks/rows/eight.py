"""mount-ready-8, idle-tick, one-change-tick, rss: eight full stores, both sides via a counting proxy."""

from __future__ import annotations

import shutil
import time
from typing import Any

from benchmarks.config import median
from benchmarks.harness import Bench
from benchmarks.official import official_child
from benchmarks.tools import grep_cmd, run_timed
from memfs.protocol import WATCH_PATH
from tests.support.proxy import ProxyProcess

WATCH_WAIT_S = 5.0  # for the live watch's answer to an edit (it comes within ~25 ms on SQLite)


def _tick_requests(before: dict[str, int], after: dict[str, int]) -> int:
    """Requests answered between two readings of `Admin.requests_by_route`, but the watch's: a
    held watch is answered when something changes or its wait runs out, not by the tick."""
    return sum(n - before.get(route, 0) for route, n in after.items() if route != WATCH_PATH)


def _watch_answers(before: dict[str, int], after: dict[str, int]) -> int:
    return after.get(WATCH_PATH, 0) - before.get(WATCH_PATH, 0)


def _after_the_watch(b: Bench, before: dict[str, int], *, live: bool) -> dict[str, int]:
    """`Admin.requests_by_route` once a live mount's watch has answered the edit (bounded)."""
    deadline = time.monotonic() + WATCH_WAIT_S
    while True:
        now = b.admin.requests_by_route()
        if not live or _watch_answers(before, now) or time.monotonic() > deadline:
            return now
        time.sleep(0.01)


def _warm_up(b: Bench, sess8: dict, proxy: ProxyProcess) -> float:
    """One mount of the eight stores, not measured. The first run after the machine's memory sat
    unused pays the host's first touch of the memory it takes (docs/PERFORMANCE.md "The
    machine"): memfs's first mount was 0.4-1.9 s slower than its next. Without this, memfs's first
    run would be the only one to pay it: each official run comes right after a memfs run has
    freed its memory. Returns its time (the row's details)."""
    sb = b.sandbox(sess8, base_url=proxy.url, name="eight-warm-up")
    try:
        return b.mount(sb)
    finally:
        b.close_sandbox(sb)


def row_eight_stores(
    b: Bench, sess8: dict, ids: list[str], proxy: ProxyProcess, contents: dict[str, dict[str, str]]
) -> None:
    """mount-ready-8, then on the last run's mounts: idle-tick, one-change-tick, rss.

    Both sides reach the service through the byte-counting proxy (a forwarding process on
    loopback), so the byte figures are exact and the timing conditions equal. The official worker
    runs in a child process, so that its memory footprint is its own. The memfs mount is
    unmounted before the official side runs: its timer ticks would otherwise count there."""
    cfg = b.cfg
    k = min(3, len(ids) - 1)
    target_slug, target_store = sess8["slugs"][k], ids[k]
    listing = b.admin.list_basic(target_store)
    target_path = sorted(listing)[len(listing) // 2]
    target = {
        "store_id": target_store,
        "memory_id": listing[target_path]["id"],
        "path": target_path,
        "slug": target_slug,
    }
    mem_ready, off_ready = [], []
    idle: list[dict[str, Any]] = []
    change: list[dict[str, Any]] = []
    warm_up = _warm_up(b, sess8, proxy)
    for run in range(cfg.runs_8):
        last = run == cfg.runs_8 - 1
        sb = b.sandbox(sess8, base_url=proxy.url, name="eight")
        try:
            mem_ready.append(b.mount(sb))
            if last:
                b.control_sync(sb, force=True, wait=True)  # settle: the first tick after a mount
                for _ in range(cfg.runs):
                    r0, b0 = b.admin.requests_by_route(), proxy.bytes()
                    t = time.perf_counter()
                    ans = b.control_sync(sb, force=True)
                    dt = time.perf_counter() - t
                    r1 = b.admin.requests_by_route()
                    idle.append(
                        {
                            "s": dt,
                            "requests": _tick_requests(r0, r1),
                            "watch_answers": _watch_answers(r0, r1),  # a held watch timing out
                            "bytes": proxy.bytes() - b0,
                            "tick_requests": ans.get("requests"),
                        }
                    )
                f = sb.root / target_slug / target_path.lstrip("/")
                for i in range(cfg.runs):
                    new = f"memfs one-change {i} {time.time()}\n" + "x" * 2000
                    # Counted from before the edit (less the edit itself) until the live watch
                    # has answered it: the watch may hear of it before `memfs sync` (then the
                    # mount's own pull takes some of the tick's requests, and they count here
                    # too) or after (its change source on SQLite looks every 25 ms).
                    r0, b0 = b.admin.requests_by_route(), proxy.bytes()
                    b.admin.update(target_store, target["memory_id"], new)
                    t = time.perf_counter()
                    ans = b.control_sync(sb, force=True)
                    dt = time.perf_counter() - t
                    ok = f.read_text() == new  # readable through the mount once sync returns
                    r1 = _after_the_watch(b, r0, live=ans.get("mode") == "live")
                    change.append(
                        {
                            "s": dt,
                            "requests": _tick_requests(r0, r1) - 1,
                            "watch_answers": _watch_answers(r0, r1),
                            "bytes": proxy.bytes() - b0,
                            "tick_requests": ans.get("requests"),
                            "visible": ok,
                        }
                    )
                rss_mounted = b.daemon_rss(sb)
                for slug in sess8["slugs"]:  # read everything once: the blob LRU fills up
                    run_timed(grep_cmd(sb.root / slug))
                rss_read = b.daemon_rss(sb)
                state_bytes = sum(p.stat().st_size for p in sb.state_dir.rglob("*") if p.is_file())
        finally:
            b.close_sandbox(sb)
        root = b.work / f"official-eight-{run}"
        root.mkdir()
        off = official_child(
            {
                "service_url": b.svc.base_url,
                "proxy_url": proxy.url,
                "ctl_port": proxy.ctl_port,
                "root": str(root),
                "session": sess8,
                "runs": cfg.runs,
                "change_target": target,
                "steady": last,
            }
        )
        shutil.rmtree(root, ignore_errors=True)
        off_ready.append(off["download_s"])
    content_bytes = sum(len(t.encode()) for c in contents.values() for t in c.values())
    m, o = median(mem_ready), median(off_ready)
    b.add(
        "mount-ready-8",
        f"time until {len(ids)} full stores are readable: `memfs mount` vs official download",
        m,
        o,
        "s",
        "<= 0.2x official",
        m <= 0.2 * o,
        base_label="official",
        details={
            "memfs_runs_s": mem_ready,
            "official_runs_s": off_ready,
            "memfs_warm_up_s": warm_up,
            "via": "counting proxy",
        },
    )

    mi, oi = idle[len(idle) // 2], sorted(off["idle"], key=lambda x: x["s"])[len(off["idle"]) // 2]
    mreq, oreq = median([x["requests"] for x in idle]), median([x["requests"] for x in off["idle"]])
    b.add(
        "idle-tick",
        f"requests per tick, {len(ids)} full stores, nothing changed (a forced `memfs sync`)",
        mreq,
        oreq,
        "req",
        "1 request",
        mreq <= 1,
        base_label="official",
        details={
            "memfs_bytes": median([x["bytes"] for x in idle]),
            "official_bytes": median([x["bytes"] for x in off["idle"]]),
            "memfs_tick_s": median([x["s"] for x in idle]),
            "official_tick_s": median([x["s"] for x in off["idle"]]),
            "memfs_runs": idle,
            "official_runs": off["idle"],
            "example": {"memfs": mi, "official": oi},
        },
    )
    b.add(
        "idle-tick (bytes)",
        "bytes on the wire per idle tick (both directions, via a counting proxy)",
        median([x["bytes"] for x in idle]),
        median([x["bytes"] for x in off["idle"]]),
        "B",
        "report",
        None,
        base_label="official",
    )
    creq, coreq = median([x["requests"] for x in change]), median([x["requests"] for x in off["change"]])
    b.add(
        "one-change-tick",
        "requests until one remote edit is readable (a forced `memfs sync`; the live watch's own "
        "answer to the edit apart, in the details)",
        creq,
        coreq,
        "req",
        "<= 3 requests",
        creq <= 3 and all(x["visible"] for x in change),
        base_label="official",
        details={"memfs_runs": change, "official_runs": off["change"]},
    )
    b.add(
        "one-change-tick (time)",
        "time of that tick (until the edit is readable)",
        median([x["s"] for x in change]),
        median([x["s"] for x in off["change"]]),
        "s",
        "report",
        None,
        base_label="official",
    )
    rss = max(rss_mounted["VmRSS"], rss_read["VmRSS"])
    b.add(
        "rss",
        f"daemon resident memory, {len(ids)} full stores mounted ({content_bytes / 2**20:.0f} MiB of "
        "content), after reading all of it",
        rss,
        off["rss"]["VmHWM"],
        "B",
        "<= 150 MiB (for 256 MiB of content)",
        rss <= 150 * 2**20,
        base_label="official worker process (peak)",
        details={
            "memfs_mounted": rss_mounted,
            "memfs_after_reading_all": rss_read,
            "memfs_state_dir_bytes": state_bytes,
            "official_rss": off["rss"],
            "official_disk_bytes": off["disk_bytes"],
            "content_bytes": content_bytes,
        },
    )
