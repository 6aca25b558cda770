"""live: propagation in live mode (SEMANTICS.md#d-when) — a write in sandbox A until it is readable
in sandbox B, 20 trials per row, on a service and store of its own:

- live, both idle: both mounts live (a 300 s interval, so only the watch explains a pull), no tool
  calls: A's file is closed, B is watched through `memfs status` over the control socket (reading
  B's files would keep B busy, and a busy mount pulls only at its next tool call);
- live, tool calls: both sides make a tool call every 0.25 s (`memfs sync` through the control
  socket, then a look at the store's directory);
- polling: `--live off --sync-interval 5`, idle, watched as in the first row;
- official: the official worker (interval 5 s) on both sides, a tool call (sync_if_due) every 0.25 s;
- live, a busy reader: B reads one file every 0.1 s (never `memfs sync`) until it holds A's
  rewrite of it (close-to-open: a busy mount applies what moved at a file nobody has open);
- hosted API, a busy reader: the same reader in a mount against `memfs serve --hosted-api` (no
  counter, no watch: it polls every 5 s, close-to-open while busy), the store written through the
  API at a random phase of the poll; the mount's requests counted through the proxy;
- idle cost: requests per idle live mount per minute, through the counting proxy.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.admin import Admin
from benchmarks.config import ADMIN_KEY
from benchmarks.harness import Bench
from benchmarks.official import official_open, official_teardown
from memfs.session import control
from tests.support.proxy import ProxyProcess
from tests.support.sandbox import Sandbox
from tests.support.service import ServiceProcess

TOOL_CALL_EVERY = 0.25
HOSTED_INTERVAL = 5.0  # the shortest sync interval a mount takes
TRIAL_TIMEOUT = 60.0
SLUG = "propagation"


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

    threads = [
        threading.Thread(target=tool_calls, args=(a, False)),
        threading.Thread(target=tool_calls, args=(b, True)),
    ]
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


def reader_trials(a: Sandbox, b: Sandbox, trials: int) -> list[float]:
    """A busy reader in B (SEMANTICS.md#d-when, close-to-open): a loop that opens and reads one file
    every 0.1 s, never calling `memfs sync`, until it sees A's write (A rewrites that file)."""
    out = []
    target = b.root / SLUG / "status.md"
    (a.root / SLUG / "status.md").write_text("reader trial start\n")
    deadline = time.monotonic() + TRIAL_TIMEOUT
    while time.monotonic() < deadline:
        if target.exists() and target.read_text() == "reader trial start\n":
            break
        time.sleep(0.1)
    for i in range(trials):
        want = f"done {i}\n"
        stop = threading.Event()
        seen: list[float] = []

        def poll(want: str = want, stop: threading.Event = stop, seen: list[float] = seen) -> None:
            while not stop.is_set():
                try:
                    if target.read_text() == want:
                        seen.append(time.monotonic())
                        return
                except OSError:
                    pass
                stop.wait(0.1)

        reader = threading.Thread(target=poll)
        reader.start()
        time.sleep(1.0)  # the reader is busy before the write
        t0 = time.monotonic()
        (a.root / SLUG / "status.md").write_text(want)
        reader.join(TRIAL_TIMEOUT)
        stop.set()
        if not seen:
            raise RuntimeError(f"reader trial {i}: B's reader never saw A's write")
        out.append(seen[0] - t0)
    return out


def hosted_reader_trials(work: Path, trials: int) -> dict[str, Any]:
    """A busy reader (as `reader_trials`) in a mount polling `memfs serve --hosted-api`
    (SEMANTICS.md#d-when: a due poll runs while the mount is busy), each write made through the API
    after a random pause within the interval, so the write's phase in the poll is uniform; and
    what the busy mount sent meanwhile (its polls are the organisation's budget)."""
    svc = ServiceProcess(work / "hosted", admin_key=ADMIN_KEY, hosted_api=True)
    admin = Admin(svc.base_url)
    proxy = ProxyProcess(svc.base_url)
    box = None
    stop = threading.Event()
    try:
        store = admin.create_store("Propagation")
        sess = admin.session([store])
        status = admin.create(store, "/status.md", "reader trial start\n")["id"]
        box = Sandbox(
            work, "hosted-b", base_url=proxy.url, session_id=sess["id"], work_secret=sess["work_secret"]
        )
        box.mount("--sync-interval", f"{HOSTED_INTERVAL:g}", timeout=120)
        target = box.root / sess["slugs"][0] / "status.md"
        seen: dict[str, float] = {}

        def poll() -> None:  # B's reader: never quiet, never `memfs sync`
            while not stop.is_set():
                try:
                    seen.setdefault(target.read_text(), time.monotonic())
                except OSError:
                    pass
                stop.wait(0.1)

        reader = threading.Thread(target=poll)
        reader.start()
        time.sleep(1.0)
        proxy.counts(reset=True)
        started = time.monotonic()
        out = []
        for i in range(trials):
            time.sleep(random.uniform(0, HOSTED_INTERVAL))
            want = f"done {i}\n"
            t0 = time.monotonic()
            admin.update(store, status, want)
            while want not in seen:
                if time.monotonic() - t0 > TRIAL_TIMEOUT:
                    raise RuntimeError(f"hosted reader trial {i}: B's reader never saw the write")
                time.sleep(0.02)
            out.append(seen[want] - t0)
        window = time.monotonic() - started
        requests = proxy.counts()["requests"]
        return {
            "trials_s": out,
            "window_s": window,
            "requests": requests,
            "requests_per_minute": requests * 60 / window,
        }
    finally:
        stop.set()
        if box is not None:
            box.close()
        proxy.stop()
        admin.close()
        svc.stop()


async def official_trials(url: str, sess: dict, work: Path, trials: int) -> list[float]:
    """The official worker on both sides: a tool call (sync_if_due) every 0.25 s on each."""
    ca, a, sa = await official_open(url, sess, work / "official-a")
    cb, b, sb = await official_open(url, sess, work / "official-b")
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
        await official_teardown(a, ca)
        await official_teardown(b, cb)
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
        return {
            "window_s": window,
            "requests": c["requests"],
            "held_now": c["in_flight"],
            "requests_per_minute": c["requests"] * 60.0 / window,
        }
    finally:
        box.close()
        proxy.stop()


def measure(work: Path, *, trials: int, idle_window: float, official: bool = True) -> dict[str, Any]:
    """Every row's trials (seconds) and the idle cost, on a service of its own under `work`."""
    svc = ServiceProcess(work / "service", admin_key=ADMIN_KEY)
    admin = Admin(svc.base_url)
    boxes: list[Sandbox] = []
    rows: dict[str, Any] = {}

    def pair(name: str, *flags: str) -> tuple[Sandbox, Sandbox]:
        made = []
        for side in ("a", "b"):
            box = Sandbox(
                work,
                f"{name}-{side}",
                base_url=svc.base_url,
                session_id=sess["id"],
                work_secret=sess["work_secret"],
            )
            boxes.append(box)
            box.mount(*flags, timeout=120)
            made.append(box)
        return made[0], made[1]

    try:
        store = admin.create_store("Propagation")
        sess = admin.session([store])
        assert sess["slugs"] == [SLUG], sess["slugs"]
        a, b = pair("live", "--sync-interval", "300")
        rows["live-idle"] = idle_trials(a, b, trials, "idle")
        rows["live-busy"] = busy_trials(a, b, trials)
        rows["live-reader"] = reader_trials(a, b, trials)
        a.close()
        b.close()
        a, b = pair("polling", "--sync-interval", "5", "--live", "off")
        rows["polling-idle"] = idle_trials(a, b, trials, "polling")
        a.close()
        b.close()
        if official:
            rows["official"] = asyncio.run(official_trials(svc.base_url, sess, work, trials))
        rows["idle-cost"] = idle_cost(svc, sess, work, idle_window)
        rows["hosted-reader"] = hosted_reader_trials(work, trials)
    finally:
        for box in boxes:
            box.close()
        admin.close()
        svc.stop()
    return rows


def row_live(b: Bench, work: Path) -> None:
    """The live rows: p50 and p99 against the official worker's p50 in the same run."""
    trials = 5 if b.cfg.quick else 20
    rows = measure(work, trials=trials, idle_window=15.0 if b.cfg.quick else 60.0)
    official = rows.get("official") or []
    base = pct(official, 50)
    for key, label in (
        ("live-idle", "both idle"),
        ("live-busy", "tool calls every 0.25 s"),
        ("live-reader", "a reader polling a file every 0.1 s"),
        ("polling-idle", "polling (5 s), both idle"),
    ):
        xs = rows[key]
        p50, p99 = pct(xs, 50), pct(xs, 99)
        live = key.startswith("live")
        b.add(
            f"propagation-live ({label})",
            "write in A readable in B, p50",
            p50,
            base,
            "s",
            "p50 <= 1 s, p99 <= 2 s" if live else "comparison",
            (p50 <= 1.0 and p99 <= 2.0) if live else None,
            base_label="official p50",
            details={"p99_s": p99, "trials_s": xs, "official_trials_s": official},
        )
    hosted = rows["hosted-reader"]
    xs = hosted["trials_s"]
    b.add(
        f"propagation-live (hosted API direct, polled every {HOSTED_INTERVAL:g} s, a reader polling a file every 0.1 s)",
        "write on the store readable in B, p50",
        pct(xs, 50),
        base,
        "s",
        f"max <= {HOSTED_INTERVAL:g} s + 2 s",
        max(xs) <= HOSTED_INTERVAL + 2.0,
        base_label="official p50",
        details={"p99_s": pct(xs, 99), "max_s": max(xs), **hosted, "official_trials_s": official},
    )
    cost = rows["idle-cost"]
    b.add(
        "propagation-live (idle cost)",
        "requests per idle mount per minute",
        cost["requests_per_minute"],
        0.0,
        "req",
        "<= 2",
        cost["requests_per_minute"] <= 2,
        base_label="-",
        ratio=float("nan"),
        details=cost,
    )
