"""The hosted rows (`scripts/bench --only hosted`): memfs against `memfs serve --hosted-api` with its
default per-organisation limits (1,200 reads and 300 writes a minute), every client behind the delay
proxy (`--rtt`, 40 ms unless given), counting requests at the emulator (`memfs_org_requests_total`)
as well as seconds, with the official worker beside it on an emulator of its own (same data, same
limits), run at the same time where the row counts requests and alone where it times.

| row | measure | target |
|---|---|---|
| hosted download-8 | first download of every full store, under the limits | (for the record) |
| hosted idle-8 | nobody using the mount: requests per store per 5 minutes | <= 1 (official: 0) |
| hosted active-8 | `memfs sync` every 2 s, nothing changing: requests per store per interval | <= 1 |
| hosted one-edit | an admin edit until readable, at the next due tick (forced) | <= 0.1x official |
| hosted fleet | N sandboxes x 2 stores x 200 memories on one emulator, agents active, an edit every 3 s: 429s after the first downloads; every edit readable in every sandbox within two intervals | 0, all |

Both sides run at their default sync interval, 15 s. Durations: `--hosted-seconds IDLE,ACTIVE,FLEET`
(default 600,300,300; `--quick` 60,60,60) and `--fleet N` (default 20).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.admin import Admin
from benchmarks.config import ADMIN_KEY, log, median
from benchmarks.corpus import make_corpus, store_contents, store_layout
from benchmarks.harness import Bench
from benchmarks.rows import Run
from memfs.limits import DEFAULT_SYNC_INTERVAL
from tests.support.proxy import ProxyProcess
from tests.support.sandbox import Sandbox
from tests.support.seed import seed_database
from tests.support.service import ServiceProcess

REPO = Path(__file__).resolve().parents[2]
INTERVAL_S = (
    DEFAULT_SYNC_INTERVAL  # both sides' default (the official DEFAULT_MEMORY_SYNC_INTERVAL is 15 s too)
)
AGENT_PERIOD_S = 2.0
EDIT_EVERY_S = 3.0
DEFAULT_RTT_S = 0.040
FLEET_MEMORIES = 200


@dataclass
class Plan:
    idle_s: float
    active_s: float
    fleet_s: float
    fleet: int
    rtt: float


def plan(b: Bench) -> Plan:
    idle, active, fleet_s = b.extra.get("hosted_seconds") or (
        (60, 60, 60) if b.cfg.quick else (600, 300, 300)
    )
    return Plan(
        idle, active, fleet_s, b.extra.get("fleet") or 20, b.rtt if b.rtt is not None else DEFAULT_RTT_S
    )


class Emulator:
    """`memfs serve --hosted-api` with its default limits, on its own copy of a seeded database,
    behind its own delay proxy."""

    def __init__(self, b: Bench, name: str, seed: Path, rtt: float):
        work = b.work / name
        (work / "data").mkdir(parents=True)
        shutil.copyfile(seed, work / "data" / "store.db")
        self.svc = ServiceProcess(
            work, admin_key=ADMIN_KEY, db_path=work / "data" / "store.db", hosted_api=True, org_limits=None
        )
        self.proxy = ProxyProcess(self.svc.base_url, rtt=rtt)
        b.proxies.append(self.proxy)
        self.admin = Admin(self.svc.base_url)

    def counts(self) -> dict[str, int]:
        return self.admin.org_requests()

    def session(self, ids: list[str]) -> dict:
        return retrying(lambda: self.admin.session(ids))

    def stop(self) -> None:
        self.admin.close()
        self.svc.stop()


def retrying(fn):
    """The bench's own admin calls meet the limits too: wait out a 429 (they are setup, not measured)."""
    for _ in range(60):
        try:
            return fn()
        except RuntimeError as e:
            if "-> 429" not in str(e):
                raise
            time.sleep(1.0)
    return fn()


class OfficialChild:
    """benchmarks/official_hosted.py in a child process: JSON lines out, a line in means go on."""

    def __init__(self, args: dict):
        self.proc = subprocess.Popen(
            [sys.executable, os.fspath(REPO / "scripts" / "bench"), "--child-official", json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def next(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        err = self.proc.stderr.read() if self.proc.stderr else ""
        raise RuntimeError(f"official child ended early (exit {self.proc.wait()}):\n{err[-3000:]}")

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def memfs_sync_cmd(sb: Sandbox) -> tuple[list[str], dict]:
    """The `memfs sync` a worker's hook runs before a tool call (bin/memfs of the venv)."""
    cmd = [os.path.join(os.path.dirname(sys.executable), "memfs"), "sync", "--root", str(sb.root)]
    return cmd, sb.env


def per_minute(n: float, seconds: float) -> float:
    return n * 60.0 / seconds if seconds else float("nan")


def run_hosted(b: Bench, r: Run) -> None:
    p = plan(b)
    seed = b.work / "hosted-seed.db"  # benchmarks.main copied the seeded database before any service ran
    log(
        f"hosted rows at rtt {p.rtt * 1000:g} ms, default org limits; idle {p.idle_s:g} s, active "
        f"{p.active_s:g} s, fleet {p.fleet} x {p.fleet_s:g} s"
    )
    from benchmarks.rows.hosted_fleet import row_fleet

    emus: list[Emulator] = []
    try:
        emus = [Emulator(b, "hosted-memfs", seed, p.rtt), Emulator(b, "hosted-official", seed, p.rtt)]
        _rows_eight(b, r, p, *emus)
        for e in emus:
            e.stop()
        emus = []
        row_fleet(b, p)
    finally:
        for e in emus:
            e.stop()


def _target(admin: Admin, ids: list[str], sess: dict) -> dict:
    k = min(3, len(ids) - 1)
    listing = retrying(lambda: admin.list_basic(ids[k]))
    path = sorted(listing)[len(listing) // 2]
    return {"store_id": ids[k], "memory_id": listing[path]["id"], "path": path, "slug": sess["slugs"][k]}


def _rows_eight(b: Bench, r: Run, p: Plan, mem: Emulator, off: Emulator) -> None:
    ids, n = r.ids, len(r.ids)
    sess_m, sess_o = mem.session(ids), off.session(ids)
    target = _target(mem.admin, ids, sess_m)  # the same ids on both copies
    root = b.work / "official-hosted"
    root.mkdir()
    child = OfficialChild({
        "hosted": "rows", "service_url": off.svc.base_url, "proxy_url": off.proxy.url, "session": sess_o,
        "root": str(root), "idle_s": p.idle_s, "active_s": p.active_s, "runs": b.cfg.runs,
        "change_target": target,
    })  # fmt: skip
    sb = b.sandbox(sess_m, base_url=mem.proxy.url, name="hosted")
    try:
        mine = _memfs_windows(b, sb, mem, p, n)
        theirs = child.next()
        mine["edit"] = _memfs_edits(b, sb, mem, sess_m, target)
        child.go()
        theirs["edit"] = child.next()["edit"]
    finally:
        child.stop()
        b.close_sandbox(sb)
        shutil.rmtree(root, ignore_errors=True)
    _report_eight(b, p, n, mine, theirs)


def _memfs_windows(b: Bench, sb: Sandbox, mem: Emulator, p: Plan, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    c0 = mem.counts()
    t = time.perf_counter()
    sb.mount("--sync-interval", f"{INTERVAL_S:g}", timeout=900)
    out["download"] = {"s": time.perf_counter() - t, **delta(mem, c0)}
    time.sleep(INTERVAL_S)  # settle: the mount's first tick after its download is not "idle"
    c0 = mem.counts()
    time.sleep(p.idle_s)
    out["idle"] = {"seconds": p.idle_s, **delta(mem, c0)}
    cmd, env = memfs_sync_cmd(sb)
    c0 = mem.counts()
    end, calls, failed = time.monotonic() + p.active_s, 0, 0
    while time.monotonic() < end:
        started = time.monotonic()
        failed += subprocess.run(cmd, env=env, capture_output=True, timeout=120).returncode != 0
        calls += 1
        time.sleep(max(0.0, AGENT_PERIOD_S - (time.monotonic() - started)))
    out["active"] = {"seconds": p.active_s, "calls": calls, "failed": failed, **delta(mem, c0)}
    return out


def delta(emu: Emulator, before: dict[str, int]) -> dict[str, int]:
    after = emu.counts()
    return {"requests": after["total"] - before["total"], "limited": after["limited"] - before["limited"]}


def _memfs_edits(b: Bench, sb: Sandbox, mem: Emulator, sess: dict, target: dict) -> list[dict]:
    f = sb.root / target["slug"] / target["path"].lstrip("/")
    out = []
    for i in range(b.cfg.runs):
        new = f"memfs hosted edit {i} {time.time()}\n" + "x" * 2000
        retrying(lambda new=new: mem.admin.update(target["store_id"], target["memory_id"], new))
        c0 = mem.counts()
        t = time.perf_counter()
        ans = b.control_sync(sb, force=True)
        dt = time.perf_counter() - t
        out.append({"s": dt, **delta(mem, c0), "visible": f.read_text() == new, "ok": ans.get("ok")})
    return out


def _report_eight(b: Bench, p: Plan, n: int, mine: dict, theirs: dict) -> None:
    rtt = f"{p.rtt * 1000:g} ms"
    md, od = mine["download"], theirs["download"]
    b.add(
        f"hosted download-{n}",
        f"first download of {n} full stores under the default org limits, rtt {rtt}",
        md["s"], od["s"], "s", "-", None, base_label="official",
        details={"memfs": md, "official": od},
    )  # fmt: skip
    per5 = lambda w: w["requests"] / n / (w["seconds"] / 300.0)  # noqa: E731
    mi, oi = mine["idle"], theirs["idle"]
    b.add(
        f"hosted idle-{n}",
        f"nobody using the mount for {p.idle_s:g} s: requests per store per 5 minutes, rtt {rtt}",
        per5(mi), per5(oi), "req/store/5min", "<= 1 (official 0)", per5(mi) <= 1.0, base_label="official",
        ratio=float("nan") if not oi["requests"] else per5(mi) / per5(oi),
        details={"memfs": mi, "official": oi, "memfs_per_min": per_minute(mi["requests"], mi["seconds"]),
                 "official_per_min": per_minute(oi["requests"], oi["seconds"])},
    )  # fmt: skip
    per_iv = lambda w: w["requests"] / n / (w["seconds"] / INTERVAL_S)  # noqa: E731
    ma, oa = mine["active"], theirs["active"]
    b.add(
        f"hosted active-{n}",
        f"`memfs sync` every 2 s for {p.active_s:g} s, nothing changing: requests per store per "
        f"{INTERVAL_S:g} s interval (official: sync_if_due every 2 s), rtt {rtt}",
        per_iv(ma), per_iv(oa), "req/store/interval", "<= 1", per_iv(ma) <= 1.0, base_label="official",
        details={"memfs": ma, "official": oa, "memfs_per_min": per_minute(ma["requests"], ma["seconds"]),
                 "official_per_min": per_minute(oa["requests"], oa["seconds"])},
    )  # fmt: skip
    me, oe = mine["edit"], theirs["edit"]
    v, o = median([x["s"] for x in me]), median([x["s"] for x in oe])
    b.add(
        "hosted one-edit",
        f"an admin edit until readable at the next due tick, {n} stores, rtt {rtt}",
        v, o, "s", "<= 0.1x official", v <= 0.1 * o and all(x["visible"] for x in me), base_label="official",
        details={"memfs_runs": me, "official_runs": oe},
    )  # fmt: skip
    for row, w, x in (("idle", mi, oi), ("active", ma, oa)):
        m, o = per_minute(w["requests"], w["seconds"]), per_minute(x["requests"], x["seconds"])
        ratio = f"x{m / o:.3g}" if o else "official 0"
        log(f"hosted {row}-{n}: memfs {m:.1f} req/min ({w['limited']} 429s), official {o:.1f} req/min "
            f"({x['limited']} 429s), {ratio}")  # fmt: skip


def fleet_seed(path: Path, memories: int = FLEET_MEMORIES) -> dict[str, str]:
    """Two stores of `memories` small memories (~2 KB each: a team's shared notes), seeded before
    the emulators start."""
    rng = random.Random(25)
    corpus = make_corpus(rng, 2**20)
    stores = {
        name: store_contents(rng, corpus, name, store_layout(rng, memories, memories * 2000))
        for name in ("fleet-a", "fleet-b")
    }
    return seed_database(path, stores, age_s=86_400.0)  # a day old, as benchmarks.main seeds


class Agents:
    """`memfs sync` before a tool call every 2 s in every sandbox (through the control socket, as
    the hook sends it: 20 CLI processes every 2 s would measure this machine's fork rate), each on
    its own thread, out of step with the others."""

    def __init__(self, b: Bench, sandboxes: list[Sandbox]):
        self.stop = threading.Event()
        self.calls = 0
        self.failed = 0
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(b, sb), daemon=True) for sb in sandboxes]
        for t in self.threads:
            t.start()

    def _run(self, b: Bench, sb: Sandbox) -> None:
        if self.stop.wait(random.uniform(0, AGENT_PERIOD_S)):
            return
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                ok = bool(b.control_sync(sb, force=False).get("ok", True))
            except Exception:
                ok = False
            with self._lock:
                self.calls += 1
                self.failed += not ok
            self.stop.wait(max(0.0, AGENT_PERIOD_S - (time.monotonic() - started)))

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


MOUNT_DEADLINE_S = 600.0


def mount_all(sandboxes: list[Sandbox]) -> list[dict]:
    """Every sandbox mounted at once, as a fleet starts. A mount that fails (a 429 its first
    download did not wait out) is tried again after 1-5 s (jittered: the fleet's retries must not
    stay in step), for up to 10 minutes; each failure is kept for the row's details, and a sandbox
    that never mounted is reported (it would have started without its memory)."""

    def one(sb: Sandbox) -> dict:
        t, errors = time.perf_counter(), []
        while time.perf_counter() - t < MOUNT_DEADLINE_S:
            proc = sb.mount("--sync-interval", f"{INTERVAL_S:g}", timeout=900, check=False)
            if proc.returncode == 0:
                return {"s": time.perf_counter() - t, "mounted": True, "failed_attempts": errors}
            errors.append(proc.stderr.strip()[-300:])
            time.sleep(random.uniform(1.0, 5.0))
        return {"s": float("nan"), "mounted": False, "failed_attempts": errors}

    with ThreadPoolExecutor(len(sandboxes)) as pool:
        return list(pool.map(one, sandboxes))


def close_all(b: Bench, sandboxes: list[Sandbox]) -> None:
    with ThreadPoolExecutor(max(1, len(sandboxes))) as pool:
        list(pool.map(b.close_sandbox, sandboxes))
