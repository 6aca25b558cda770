#!/usr/bin/env python3
"""Propagation (live mode, SEMANTICS.md#d-when): how long a write in sandbox A takes to be readable in sandbox B.

Standalone for now (scripts/bench is being turned into a package; it will run this as its
`propagation` group). One `memfs serve`, one store, two sandboxes, 20 trials per row:

- live, idle:        both mounts live (a 300 s interval, so only the watch explains a pull), no
                     tool calls: A's file is closed, B is watched through `memfs status` (the control
                     socket: reading B's files would keep B busy, and a busy mount pulls only at
                     the next tool call);
- live, tool calls:  both sides make a tool call every 0.25 s (`memfs sync` through the control
                     socket, then a look at the store's directory); B's file is read at its calls;
- polling:           `--live off --sync-interval 5`, idle, watched as in the first row;
- official:          the official worker (anthropic's SessionMemoryStores, driven as scripts/bench
                     drives it, interval 5 s) on both sides, a tool call (sync_if_due) every 0.25 s;
- idle cost:         requests per idle live mount per minute, through the counting proxy.

Prints p50/p99 per row and writes JSON under bench/results/. Run as root (FUSE).

    scripts/bench_propagation.py [--trials 20] [--idle-window 60] [--skip-official]
"""

from __future__ import annotations

import os
import sys

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_VENV_PY = os.path.join(_REPO, ".venv", "bin", "python")
if os.path.exists(_VENV_PY) and os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(_REPO, ".venv")):
    os.execv(_VENV_PY, [_VENV_PY, *sys.argv])  # the venv has memfs, pyfuse3 and anthropic
sys.path.insert(0, _REPO)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import importlib.machinery  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from memfs.session import control  # noqa: E402
from tests.support.proxy import ProxyProcess  # noqa: E402
from tests.support.sandbox import Sandbox  # noqa: E402
from tests.support.service import ServiceProcess  # noqa: E402

TOOL_CALL_EVERY = 0.25
TRIAL_TIMEOUT = 60.0
SLUG = "propagation"


def _bench():
    """scripts/bench, imported for its official-worker driver (official_open, official_teardown,
    make_due, Admin): a package `scripts/bench/` once bench12's split lands, a file until then."""
    here = Path(_REPO) / "scripts"
    if (here / "bench" / "__init__.py").exists():
        sys.path.insert(0, str(here))
        import bench  # type: ignore[import-not-found]
        return bench
    loader = importlib.machinery.SourceFileLoader("memfs_bench", str(here / "bench"))
    spec = importlib.util.spec_from_loader("memfs_bench", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["memfs_bench"] = module
    loader.exec_module(module)
    return module


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def status_counter(box: Sandbox) -> int:
    answer = control.call(box.state_dir, {"op": "status"}, timeout=30)
    return next(s["counter"] or 0 for s in answer["stores"] if s["slug"] == SLUG)


def wait_counter_above(box: Sandbox, counter: int, poll: float = 0.01) -> float:
    deadline = time.monotonic() + TRIAL_TIMEOUT
    while time.monotonic() < deadline:
        if status_counter(box) > counter:
            return time.monotonic()
        time.sleep(poll)
    raise RuntimeError(f"no propagation to {box.root} within {TRIAL_TIMEOUT:g}s")


def idle_trials(a: Sandbox, b: Sandbox, trials: int, label: str) -> list[float]:
    """A writes one file; B is watched through its status (counter applied to the view)."""
    out = []
    for i in range(trials):
        time.sleep(1.5)  # both idle (quiet) before the write
        before = status_counter(b)
        path = a.root / SLUG / f"{label}-{i}.md"
        t0 = time.monotonic()
        path.write_text(f"{label} trial {i}\n")
        out.append(wait_counter_above(b, before) - t0)
        got = (b.root / SLUG / path.name).read_text()
        if got != f"{label} trial {i}\n":
            raise RuntimeError(f"B shows {got!r} after its counter moved")
    return out


def busy_trials(a: Sandbox, b: Sandbox, trials: int) -> list[float]:
    """Tool calls every 0.25 s on both sides: `memfs sync` (non-forced), then a look at the store."""
    stop = threading.Event()
    seen: dict[str, float] = {}
    errors: list[BaseException] = []

    def tool_calls(box: Sandbox, reader: bool) -> None:
        try:
            while not stop.is_set():
                control.call(box.state_dir, {"op": "sync", "force": False, "wait": False}, timeout=60)
                names = os.listdir(box.root / SLUG)
                if reader:
                    for n in names:
                        if n.startswith("busy-") and n not in seen:
                            seen[n] = time.monotonic()
                stop.wait(TOOL_CALL_EVERY)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=tool_calls, args=(a, False)), threading.Thread(target=tool_calls, args=(b, True))]
    for t in threads:
        t.start()
    out = []
    try:
        for i in range(trials):
            time.sleep(0.5)
            name = f"busy-{i}.md"
            t0 = time.monotonic()
            (a.root / SLUG / name).write_text(f"busy trial {i}\n")  # a tool call of A's agent
            deadline = t0 + TRIAL_TIMEOUT
            while name not in seen and time.monotonic() < deadline and not errors:
                time.sleep(0.01)
            if name not in seen:
                raise RuntimeError(f"busy trial {i}: not seen in B ({errors})")
            out.append(seen[name] - t0)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    return out


async def official_trials(bench: Any, url: str, sess: dict, work: Path, trials: int) -> list[float]:
    """The official worker on both sides: a tool call (sync_if_due) every 0.25 s on each."""
    ca, a, sa = await bench.official_open(url, sess, work / "official-a")
    cb, b, sb = await bench.official_open(url, sess, work / "official-b")
    out = []
    try:
        await a.download(sa)
        await b.download(sb)
        for i in range(trials):
            name = f"official-{i}.md"
            t0 = time.monotonic()
            (work / "official-a" / SLUG / name).write_text(f"official trial {i}\n")
            target = work / "official-b" / SLUG / name
            while True:
                await a.sync_if_due()
                await b.sync_if_due()
                if target.exists() and target.read_text() == f"official trial {i}\n":
                    out.append(time.monotonic() - t0)
                    break
                if time.monotonic() - t0 > TRIAL_TIMEOUT:
                    raise RuntimeError(f"official trial {i}: not propagated")
                await asyncio.sleep(TOOL_CALL_EVERY)
    finally:
        await bench.official_teardown(a, ca)
        await bench.official_teardown(b, cb)
    return out


def idle_cost(svc: ServiceProcess, sess: dict, work: Path, window: float) -> dict[str, float]:
    proxy = ProxyProcess(svc.base_url)
    box = Sandbox(work, "idle", base_url=proxy.url, session_id=sess["id"], work_secret=sess["work_secret"])
    try:
        box.mount("--sync-interval", "15")  # the default interval: polling would be 4 ticks a minute
        time.sleep(2.0)
        proxy.counts(reset=True)
        time.sleep(window)
        c = proxy.counts()
        return {"window_s": window, "requests": c["requests"], "held_now": c["in_flight"],
                "requests_per_minute": c["requests"] * 60.0 / window}
    finally:
        box.close()
        proxy.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--idle-window", type=float, default=60.0, help="seconds of idle to count requests over")
    ap.add_argument("--skip-official", action="store_true")
    args = ap.parse_args()
    bench = _bench()
    work = Path(tempfile.mkdtemp(prefix="memfs-propagation-"))
    work.chmod(0o755)
    svc = ServiceProcess(work / "service", admin_key=bench.ADMIN_KEY)
    admin = bench.Admin(svc.base_url)
    boxes: list[Sandbox] = []
    rows: dict[str, Any] = {}

    def pair(name: str, *flags: str) -> tuple[Sandbox, Sandbox]:
        made = []
        for side in ("a", "b"):
            box = Sandbox(work, f"{name}-{side}", base_url=svc.base_url, session_id=sess["id"],
                          work_secret=sess["work_secret"])
            boxes.append(box)
            box.mount(*flags, timeout=120)
            made.append(box)
        return made[0], made[1]

    def done(a: Sandbox, b: Sandbox) -> None:
        for box in (a, b):
            box.close()

    def report(row: str, xs: list[float], target: str) -> None:
        rows[row] = {"p50_s": pct(xs, 50), "p99_s": pct(xs, 99), "trials": len(xs), "target": target, "runs_s": xs}
        print(f"{row:<28} p50 {pct(xs, 50) * 1000:7.0f} ms   p99 {pct(xs, 99) * 1000:7.0f} ms   "
              f"({len(xs)} trials; target {target})", flush=True)

    try:
        store = admin.create_store("Propagation")
        sess = admin.session([store])
        assert sess["slugs"] == [SLUG], sess["slugs"]
        a, b = pair("live", "--sync-interval", "300")
        report("live, both idle", idle_trials(a, b, args.trials, "idle"), "p50 <= 1 s, p99 <= 2 s")
        report("live, tool calls / 0.25 s", busy_trials(a, b, args.trials), "p50 <= 1 s, p99 <= 2 s")
        done(a, b)
        a, b = pair("polling", "--sync-interval", "5", "--live", "off")
        report("polling (5 s), both idle", idle_trials(a, b, args.trials, "polling"), "comparison")
        done(a, b)
        if not args.skip_official:
            xs = asyncio.run(official_trials(bench, svc.base_url, sess, work, args.trials))
            report("official (5 s), tool calls", xs, "comparison")
        cost = idle_cost(svc, sess, work, args.idle_window)
        rows["idle cost"] = cost
        print(f"{'idle live mount':<28} {cost['requests_per_minute']:.2f} requests/minute "
              f"({cost['requests']} in {cost['window_s']:g} s, {cost['held_now']} held; target <= 2)", flush=True)
        out_dir = Path(_REPO) / "bench" / "results"
        out_dir.mkdir(parents=True, exist_ok=True)
        out = out_dir / f"propagation-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
        out.write_text(json.dumps(rows, indent=2))
        print(f"results: {out}")
    finally:
        for box in boxes:
            box.close()
        admin.close()
        svc.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
