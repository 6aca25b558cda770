"""The relay row (`scripts/bench --only relay`): a fleet of sandboxes sharing stores through ONE
`memfs serve --upstream` (SEMANTICS.md#d-relay), against `memfs serve --hosted-api` with its default
per-organisation limits (1,200 reads, 300 writes a minute), the relay 40 ms from it (`--rtt`;
the sandboxes sit next to the relay), and the same fleet without the relay right after, on a
fresh emulator of the same data.

Full: 20 sandboxes (real mounts, a daemon each) x 2 stores of 2,000 memories, the relay polling
every 15 s, agents active for 5 minutes (`memfs sync` every 2 s in each, as in the fleet row), an
edit every 3 s written to a file through one sandbox's mount (round-robin over the sandboxes) and
an edit on the upstream with its admin key every 20 s. `--quick`: 6 sandboxes x 2 x 200, 45 s.
`--fleet N` and `--hosted-seconds _,_,WINDOW` change the fleet and the active window.

Measured: the first downloads (upstream requests, relay_status, time until every mount is up);
upstream requests per store per interval in the active window, split into the relay's polls, the
writes it passed through and its access confirmations; 429s; when each edit became readable in
each other sandbox (p50, p99), and each upstream edit in every sandbox.

Readable is timed without touching the mounts (`Visibility`): when each other mount fetched the
edited memory, from the access log of the service the mounts talk to; at the end every edited
file is read in every sandbox.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks.config import ADMIN_KEY, log
from benchmarks.harness import Bench
from benchmarks.rows import Run
from benchmarks.rows.hosted import (
    AGENT_PERIOD_S,
    DEFAULT_RTT_S,
    EDIT_EVERY_S,
    INTERVAL_S,
    Agents,
    Emulator,
    close_all,
    fleet_seed,
    mount_all,
    per_minute,
    retrying,
)
from benchmarks.rows.hosted_fleet import edit_targets
from benchmarks.rows.live import pct
from tests.support.sandbox import Sandbox
from tests.support.service import ServiceProcess

UPSTREAM_EDIT_EVERY_S = 20.0
STORES = 2


@dataclass
class Shape:
    sandboxes: int
    memories: int
    window_s: float
    rtt: float


def shape(b: Bench) -> Shape:
    secs = b.extra.get("hosted_seconds")
    window = secs[2] if secs else (45.0 if b.cfg.quick else 300.0)
    n = b.extra.get("fleet") or (6 if b.cfg.quick else 20)
    return Shape(n, 200 if b.cfg.quick else 2000, window, b.rtt if b.rtt is not None else DEFAULT_RTT_S)


# -- who saw which edit when ---------------------------------------------------------------------

FETCH = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO memfs\.service\.access: "
    r"GET /v1/memory_stores/[^/\s]+/memories/([^/\s]+) 200 ",
    re.M,
)


class Fetches:
    """When each memory was fetched (`GET …/memories/{id}` answered 200), from the access log of
    the service the mounts talk to (the relay's, or the emulator's without it): wall times by
    memory id, read on as the log grows."""

    def __init__(self, log_path: Path):
        self.path, self.offset = log_path, 0
        self.times: dict[str, list[float]] = {}

    def read(self) -> dict[str, list[float]]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next read
        self.offset += end
        for m in FETCH.finditer(chunk[:end].decode("utf-8", "replace")):
            at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time, as logged
            self.times.setdefault(m.group(2), []).append(at)
        return self.times


class Applied:
    """When each edited memory's new content was in each sandbox's view but its writer's: the
    memory's baseline row (written in the same transaction as the view's file) read from the
    sandbox's state dir, read-only, every 0.25 s. For the fleet without a relay: its mounts read
    the hosted feed with the content in it (view=full) and fetch nothing, so the access log
    (`Fetches`) cannot tell. Resolution 0.25 s; the mounts themselves are not touched."""

    EVERY_S = 0.25

    def __init__(self, sandboxes: list[Sandbox]):
        self.sandboxes = sandboxes
        self.times: dict[str, list[float]] = {}
        self._wanted: dict[str, tuple[str, int | None]] = {}  # memory id -> (sha, writer's index)
        self._seen: set[tuple[int, str]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def want(self, memory_id: str, content: str, origin: int | None) -> None:
        with self._lock:
            self._wanted[memory_id] = (hashlib.sha256(content.encode()).hexdigest(), origin)

    def read(self) -> dict[str, list[float]]:
        return self.times

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.EVERY_S):
            self._look()

    def _look(self) -> None:
        with self._lock:
            wanted = dict(self._wanted)
        now = time.time()
        for i, sb in enumerate(self.sandboxes):
            pending = [m for m, (_sha, origin) in wanted.items() if origin != i and (i, m) not in self._seen]
            if not pending:
                continue
            with (
                contextlib.suppress(sqlite3.Error),
                contextlib.closing(
                    sqlite3.connect(f"file:{sb.state_dir / 'state.db'}?mode=ro", uri=True, timeout=1)
                ) as db,
            ):
                marks = ",".join("?" * len(pending))
                rows = db.execute(
                    f"SELECT memory_id, sha FROM baseline WHERE memory_id IN ({marks})", pending
                )
                for memory_id, sha in rows.fetchall():
                    if sha == wanted[memory_id][0]:
                        self._seen.add((i, memory_id))
                        self.times.setdefault(memory_id, []).append(now)


class Visibility:
    """The edits made, and when each became readable in each sandbox but its writer: when the
    other mounts fetched the edited memory, the service's access log says (each memory is edited
    once, and nothing else fetches it: the mounts downloaded it by listing or snapshot), the view
    applied right after. The mounts themselves are not touched while it runs: a file read keeps a
    mount busy (a busy mount pulls at its next tool call, not at once) and `memfs status` costs
    ~90 ms of daemon CPU with 2 x 2,000 memories. At the end every edited file is read in every
    sandbox (`verify`): the fetch was the edit, and it reached the view."""

    def __init__(self, sandboxes: list[Sandbox], fetches: Fetches | Applied):
        self.sandboxes, self.fetches = sandboxes, fetches
        self.edits: list[dict] = []
        self._lock = threading.Lock()

    def made(self, edit: dict) -> None:
        with self._lock:
            self.edits.append(edit)
        if isinstance(self.fetches, Applied):
            self.fetches.want(edit["memory_id"], edit["content"], edit.get("origin"))

    def expected(self, e: dict) -> int:
        return len(self.sandboxes) - (e.get("origin") is not None)

    def delays(self, e: dict) -> list[float]:
        times = sorted(t - e["at"] for t in self.fetches.times.get(e["memory_id"], []) if t > e["at"])
        return times[: self.expected(e)]

    def settled(self, within: float) -> bool:
        """Every edit fetched everywhere, or the last one older than `within`."""
        self.fetches.read()
        with self._lock:
            if all(len(self.delays(e)) >= self.expected(e) for e in self.edits):
                return True
            return bool(self.edits) and time.time() - self.edits[-1]["at"] > within

    def verify(self) -> dict[str, int]:
        """Every edit's file read in every sandbox: (edit, sandbox) pairs showing the edit."""
        out = {"pairs": 0, "readable": 0}
        for e in self.edits:
            for sb in self.sandboxes:
                out["pairs"] += 1
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    out["readable"] += (sb.root / e["slug"] / e["path"].lstrip("/")).read_text() == e[
                        "content"
                    ]
        return out

    def summary(self, kind: str) -> dict:
        """p50/p99/max over every (edit, other sandbox) pair of `kind`; a pair never fetched counts
        as infinitely late (so p99 is inf when more than 1 % never were)."""
        self.fetches.read()
        edits = [e for e in self.edits if e["kind"] == kind]
        delays = [d for e in edits for d in self.delays(e)]
        pairs = sum(self.expected(e) for e in edits)
        every = delays + [float("inf")] * (pairs - len(delays))
        fetched = sum(len(self.fetches.times.get(e["memory_id"], [])) for e in edits)
        return {
            "edits": len(edits),
            "pairs": pairs,
            "seen": len(delays),
            "fetches": fetched,  # more than `seen`: a mount fetched an edit twice
            "p50_s": pct(every, 50),
            "p99_s": pct(every, 99),
            "max_s": max(every) if every else float("nan"),
            "delays_s": sorted(round(d, 3) for d in delays),
        }


class Editors:
    """An edit every 3 s written through a sandbox's mount (round-robin), and an admin edit on
    the upstream every 20 s; disjoint memories, each edited once."""

    def __init__(self, emu: Emulator, sandboxes: list[Sandbox], targets: list[dict], vis: Visibility):
        self.emu, self.sandboxes, self.vis = emu, sandboxes, vis
        self.mine = [t for j, t in enumerate(targets) if j % 4 < 2]  # both lists alternate stores
        self.theirs = [t for j, t in enumerate(targets) if j % 4 >= 2]
        self.failed: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._sandbox, self._upstream)]
        for t in self.threads:
            t.start()

    def _sandbox(self) -> None:
        i = 0
        while not self.stop.is_set() and i < len(self.mine):
            k, tgt = i % len(self.sandboxes), self.mine[i]
            new = f"relay bench: sandbox {k} edit {i} {time.time()}\n"
            at = time.time()
            try:
                (self.sandboxes[k].root / tgt["slug"] / tgt["path"].lstrip("/")).write_text(new)
            except OSError as e:
                self.failed.append(f"sandbox {k}: {e}")
            else:
                self.vis.made({**tgt, "kind": "sandbox", "origin": k, "content": new, "at": at})
            i += 1
            self.stop.wait(EDIT_EVERY_S)

    def _upstream(self) -> None:
        i = 0
        while not self.stop.wait(UPSTREAM_EDIT_EVERY_S / 2 if i == 0 else UPSTREAM_EDIT_EVERY_S):
            if i >= len(self.theirs):
                return
            tgt, new = self.theirs[i], f"relay bench: upstream edit {i} {time.time()}\n"
            try:
                self.emu.admin.update(tgt["store_id"], tgt["memory_id"], new)
            except RuntimeError as e:  # a 429 to the admin: reported, the edit skipped
                self.failed.append(f"upstream: {e}")
            else:
                self.vis.made({**tgt, "kind": "upstream", "origin": None, "content": new, "at": time.time()})
            i += 1

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


# -- where the CPU went ------------------------------------------------------------------------------

_HZ = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int | None) -> tuple[float, float]:
    """(CPU seconds of every thread, seconds the main thread waited runnable for a CPU); zeros
    when gone."""
    if not pid:
        return 0.0, 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            waited = int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0
    return (int(fields[11]) + int(fields[12])) / _HZ, waited


def cpu_sample(relay: ServiceProcess | None, emu: Emulator, sandboxes: list[Sandbox]) -> dict[str, Any]:
    """CPU seconds so far: the relay, the emulator, the mount daemons (summed), the machine (busy,
    every process: the other work on these shared cores included), the load average."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    daemons = [_proc_cpu(sb.daemon_pid()) for sb in sandboxes]
    return {
        "relay": _proc_cpu(relay.proc.pid if relay and relay.proc else None),
        "emulator": _proc_cpu(emu.svc.proc.pid if emu.svc.proc else None),
        "daemons": (sum(d[0] for d in daemons), sum(d[1] for d in daemons)),
        "machine_busy": (sum(ticks[:7]) - ticks[3] - ticks[4]) / _HZ,
        "loadavg": os.getloadavg()[0],
    }


def cpu_delta(before: dict, after: dict, seconds: float) -> dict[str, float]:
    """Cores used on average over the window (CPU seconds / wall seconds), and the seconds the
    relay's and the daemons' main threads waited for a CPU while runnable."""
    out = {}
    for k in ("relay", "emulator", "daemons"):
        out[f"{k}_cores"] = round((after[k][0] - before[k][0]) / seconds, 3)
        out[f"{k}_runqueue_wait_s"] = round(after[k][1] - before[k][1], 1)
    out["machine_busy_cores"] = round((after["machine_busy"] - before["machine_busy"]) / seconds, 3)
    out["loadavg_1min"] = [before["loadavg"], after["loadavg"]]
    return out


# -- one fleet, with or without the relay ---------------------------------------------------------


def relay_status(relay: ServiceProcess) -> dict:
    r = httpx.get(f"{relay.base_url}/v1/relay_status", headers={"x-api-key": ADMIN_KEY}, timeout=30)
    r.raise_for_status()
    return r.json()


def _poll_kinds(before: dict, after: dict) -> dict[str, int]:
    """The poller's requests by kind between two statuses (its last hour: the run is shorter)."""
    a, b = before["requests"]["last_hour"], after["requests"]["last_hour"]
    return {k: b.get(k, 0) - a.get(k, 0) for k in sorted(set(a) | set(b)) if b.get(k, 0) - a.get(k, 0)}


def _front(before: dict, after: dict) -> dict[str, int]:
    a, b = before["front_requests"], after["front_requests"]
    return {k: b.get(k, 0) - a.get(k, 0) for k in ("pass", "write", "confirm")}


class Counter:
    """Upstream requests (the delay proxy's count: the fleet's or the relay's, not the admin's)
    and 429s (the emulator's), and with a relay its own account."""

    def __init__(self, emu: Emulator, relay: ServiceProcess | None):
        self.emu, self.relay = emu, relay

    def read(self) -> dict:
        out: dict[str, Any] = {"requests": self.emu.proxy.counts()["requests"], "org": self.emu.counts()}
        if self.relay is not None:
            out["relay"] = relay_status(self.relay)
        return out

    def delta(self, before: dict, after: dict) -> dict[str, Any]:
        out: dict[str, Any] = {
            "requests": after["requests"] - before["requests"],
            "limited": after["org"]["limited"] - before["org"]["limited"],
        }
        if "relay" in after:
            rb, ra = before["relay"], after["relay"]
            out["polls"] = ra["requests"]["total"] - rb["requests"]["total"]
            out["poll_kinds"] = _poll_kinds(rb, ra)
            out["front"] = _front(rb, ra)
            out["front_limited"] = ra["front_limited"] - rb["front_limited"]
            out["stores"] = ra["stores"]
        return out


def run_fleet(
    b: Bench, s: Shape, emu: Emulator, sessions: list[dict], targets: list[dict], relay: ServiceProcess | None
) -> dict[str, Any]:
    name = "relay" if relay else "direct"
    url = relay.base_url if relay else emu.proxy.url
    counter = Counter(emu, relay)
    sandboxes = [b.sandbox(sess, base_url=url, name=name) for sess in sessions]
    agents: Agents | None = None
    editors: Editors | None = None
    applied: Applied | None = None
    try:
        c0 = counter.read()
        t = time.perf_counter()
        mounts = mount_all(sandboxes)
        download = {"s": time.perf_counter() - t, **counter.delta(c0, counter.read())}
        download["mount_s"] = sorted(round(m["s"], 2) for m in mounts)
        download["failed_attempts"] = sum(len(m["failed_attempts"]) for m in mounts)
        download["never_mounted"] = sum(not m["mounted"] for m in mounts)
        log(
            f"relay row, {name}: {len(sandboxes)} mounts in {download['s']:.1f} s, {download['requests']} "
            f"upstream requests, {download['limited']} 429s, {download['failed_attempts']} failed mount "
            f"attempts, {download['never_mounted']} never mounted"
        )
        up = [sb for sb, m in zip(sandboxes, mounts, strict=True) if m["mounted"]]
        # Through the relay, mounts fetch each edit from it (the changes feed has no content): its
        # access log times them exactly. Without it they fetch nothing (the hosted feed carries
        # the content): their state dirs tell (`Applied`).
        source: Fetches | Applied
        if relay is not None:
            source = Fetches(relay.stderr_path)
        else:
            source = applied = Applied(up)
        vis = Visibility(up, source)
        c0, cpu0 = counter.read(), cpu_sample(relay, emu, up)
        agents = Agents(b, up)
        editors = Editors(emu, up, targets, vis)
        time.sleep(s.window_s)
        editors.close()
        window = {"seconds": s.window_s, **counter.delta(c0, counter.read())}
        window["cpu"] = cpu_delta(cpu0, cpu_sample(relay, emu, up), s.window_s)
        # sandbox edits need up to two intervals without a relay (a push at a tick, a pull at one)
        within = (1 if relay else 2) * INTERVAL_S + 15
        while not vis.settled(within):  # the agents stay active while the last edits are checked
            time.sleep(1.0)
        agents.join()
        verified = vis.verify()
        out = {
            "download": download,
            "window": window,
            "sandbox_edits": vis.summary("sandbox"),
            "upstream_edits": vis.summary("upstream"),
            "calls": agents.calls,
            "failed_calls": agents.failed,
            "edit_failures": editors.failed,
            "verified": verified,
            "sandboxes": len(sandboxes),
        }
        _log_fleet(name, s, out)
        return out
    finally:
        if editors is not None:
            editors.close()
        if agents is not None:
            agents.join()
        if applied is not None:
            applied.close()
        close_all(b, sandboxes)


def _per_store_interval(n: float, seconds: float) -> float:
    return n / STORES / (seconds / INTERVAL_S) if seconds else float("nan")


def _log_fleet(name: str, s: Shape, out: dict) -> None:
    w, se, ue = out["window"], out["sandbox_edits"], out["upstream_edits"]
    split = ""
    if "polls" in w:
        f = w["front"]
        split = (
            f" (per store per interval: polls {_per_store_interval(w['polls'], w['seconds']):.2f}, writes "
            f"{_per_store_interval(f['write'], w['seconds']):.2f}, confirms "
            f"{_per_store_interval(f['confirm'], w['seconds']):.2f}, pass {_per_store_interval(f['pass'], w['seconds']):.2f})"
        )
    log(
        f"relay row, {name}: {per_minute(w['requests'], w['seconds']):.0f} upstream req/min, "
        f"{_per_store_interval(w['requests'], w['seconds']):.2f} per store per interval{split}, "
        f"{w['limited']} 429s; sandbox edits seen {se['seen']}/{se['pairs']} p50 {se['p50_s']:.2f} s p99 "
        f"{se['p99_s']:.2f} s; upstream edits seen {ue['seen']}/{ue['pairs']} max {ue['max_s']:.2f} s; "
        f"{out['calls']} agent calls ({out['failed_calls']} failed); read back at the end "
        f"{out['verified']['readable']}/{out['verified']['pairs']}; CPU {w['cpu']}"
    )


# -- the row ------------------------------------------------------------------------------------------


def run_relay(b: Bench, r: Run) -> None:
    s = shape(b)
    log(
        f"relay row: {s.sandboxes} sandboxes x {STORES} stores x {s.memories} memories, rtt {s.rtt * 1000:g} ms "
        f"relay-upstream, agents every {AGENT_PERIOD_S:g} s for {s.window_s:g} s, a sandbox edit every "
        f"{EDIT_EVERY_S:g} s, an upstream edit every {UPSTREAM_EDIT_EVERY_S:g} s; then the same fleet direct"
    )
    seed = b.work / "relay-seed.db"
    t = time.perf_counter()
    by_name = fleet_seed(seed, s.memories)
    ids = [by_name["fleet-a"], by_name["fleet-b"]]
    log(f"relay row: seeded {STORES} x {s.memories} memories in {time.perf_counter() - t:.1f} s")
    mine: dict[str, Any] = {}
    emu = Emulator(b, "relay-upstream", seed, s.rtt)
    relay: ServiceProcess | None = None
    try:
        sessions = [emu.session(ids) for _ in range(s.sandboxes)]
        targets = retrying(lambda: edit_targets(emu, ids, sessions[0]))
        (b.work / "relay" / "data").mkdir(parents=True)
        # The documented deployment: the operator's key (the emulator's admin key here) polls and
        # confirms the tokens of a store with one listing of its sessions a minute (OPERATIONS.md#relay).
        key_file = b.work / "relay" / "upstream-key"
        key_file.write_text(ADMIN_KEY + "\n")
        key_file.chmod(0o600)
        relay = ServiceProcess(
            b.work / "relay",
            admin_key=ADMIN_KEY,
            extra_args=(
                "--upstream", emu.proxy.url, "--poll-interval", f"{INTERVAL_S:g}",
                "--upstream-key-file", str(key_file),
            ),
        )  # fmt: skip
        mine = run_fleet(b, s, emu, sessions, targets, relay)
    finally:
        if relay is not None:
            relay.stop()
        emu.stop()
    emu = Emulator(b, "relay-direct", seed, s.rtt)  # the same data, fresh limits
    try:
        sessions = [emu.session(ids) for _ in range(s.sandboxes)]
        theirs = run_fleet(b, s, emu, sessions, targets, None)
    finally:
        emu.stop()
    report(b, s, mine, theirs)


def report(b: Bench, s: Shape, mine: dict, theirs: dict) -> None:
    n, rtt = s.sandboxes, f"{s.rtt * 1000:g} ms"
    fleet = f"{n} sandboxes x {STORES} x {s.memories}"
    md, od = mine["download"], theirs["download"]
    downloads = {st["memory_store_id"]: st["downloads"] for st in md["stores"]}
    b.add(
        f"relay download-{n}",
        f"{fleet}: every mount up, through one relay (rtt {rtt} to the hosted API emulator) vs direct",
        md["s"], od["s"], "s", "-", None, base_label="direct", details={"relay": md, "direct": od},
    )  # fmt: skip
    b.add(
        f"relay download-{n} requests",
        f"upstream requests of those first downloads (relay: {md['polls']} the poller's, front "
        f"{md['front']}; downloads per store {sorted(downloads.values())}; 429s {md['limited']} vs "
        f"{od['limited']})",
        md["requests"], od["requests"], "req", "one store download each",
        all(v == 1 for v in downloads.values()) and len(downloads) == STORES,
        base_label="direct",
    )  # fmt: skip
    mw, ow = mine["window"], theirs["window"]
    per = lambda x: _per_store_interval(x, mw["seconds"])  # noqa: E731
    f = mw["front"]
    b.add(
        f"relay active-{n}",
        f"agents active {mw['seconds']:g} s, sandbox edits every {EDIT_EVERY_S:g} s, upstream ones every "
        f"{UPSTREAM_EDIT_EVERY_S:g} s: upstream requests per store per {INTERVAL_S:g} s interval (polls "
        f"{per(mw['polls']):.2f}, writes {per(f['write']):.2f}, confirmations {per(f['confirm']):.2f}, "
        f"other {per(f['pass']):.2f})",
        per(mw["requests"]), _per_store_interval(ow["requests"], ow["seconds"]), "req/store/interval", "-",
        None, base_label="direct", details={"relay": mine, "direct": theirs},
    )  # fmt: skip
    b.add(
        f"relay active-{n} req/min",
        "upstream requests a minute of the whole fleet in that window (the admin's edits left out)",
        per_minute(mw["requests"], mw["seconds"]), per_minute(ow["requests"], ow["seconds"]), "req/min", "-",
        None, base_label="direct",
    )  # fmt: skip
    b.add(
        f"relay active-{n} 429s",
        "429 answers in that window",
        mw["limited"], ow["limited"], "req", "0", mw["limited"] == 0, base_label="direct", ratio=float("nan"),
    )  # fmt: skip
    ms, os_ = mine["sandbox_edits"], theirs["sandbox_edits"]
    b.add(
        f"relay edit-{n}",
        f"an edit written through one sandbox until readable in each other one, p50 (p99 {ms['p99_s']:.2f} s "
        f"vs {os_['p99_s']:.2f} s; {ms['seen']}/{ms['pairs']} and {os_['seen']}/{os_['pairs']} pairs fetched; read back at the end "
        f"{mine['verified']['readable']}/{mine['verified']['pairs']} and "
        f"{theirs['verified']['readable']}/{theirs['verified']['pairs']})",
        ms["p50_s"], os_["p50_s"], "s", "p50 <= 1 s, p99 <= 2 s", ms["p50_s"] <= 1.0 and ms["p99_s"] <= 2.0,
        base_label="direct p50",
    )  # fmt: skip
    mu, ou = mine["upstream_edits"], theirs["upstream_edits"]
    bound = INTERVAL_S + 1.0
    b.add(
        f"relay upstream-edit-{n}",
        f"an admin edit on the upstream until readable in every sandbox, the slowest (p50 {mu['p50_s']:.2f} s "
        f"vs {ou['p50_s']:.2f} s; {mu['edits']} edits, {mu['seen']}/{mu['pairs']} pairs fetched)",
        mu["max_s"], ou["max_s"], "s", f"<= interval + 1 s ({bound:g} s)",
        mu["pairs"] > 0 and mu["max_s"] <= bound, base_label="direct",
    )  # fmt: skip
