"""The hosted fleet row: N sandboxes (real mounts, a daemon each) attaching the same 2 stores of 200
memories, on one `memfs serve --hosted-api` with its default limits, agents active (`memfs sync`
every 2 s in each), an admin edit every 3 s somewhere; the official worker's fleet beside it on its
own emulator (benchmarks/official_hosted.py, "fleet"). Counted: 429s after the first downloads,
requests a minute, and when each edit became readable in each sandbox (within two intervals?)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING

from benchmarks.config import log, median
from benchmarks.harness import Bench
from benchmarks.rows.hosted import (
    EDIT_EVERY_S,
    INTERVAL_S,
    Agents,
    Emulator,
    OfficialChild,
    close_all,
    delta,
    fleet_seed,
    mount_all,
    per_minute,
)
from tests.support.sandbox import Sandbox

if TYPE_CHECKING:
    from benchmarks.rows.hosted import Plan

READABLE_WITHIN_S = 2 * INTERVAL_S


class Edits:
    """An admin edit every 3 s (a different memory each time), and a checker that reads each edited
    file in each sandbox until it shows the edit: the delay from the edit's acknowledgement."""

    def __init__(self, emu: Emulator, targets: list[dict], sandboxes: list[Sandbox]):
        self.emu, self.targets, self.sandboxes = emu, targets, sandboxes
        self.edits: list[dict] = []
        self.stop_editing = threading.Event()
        self.stop_checking = threading.Event()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._edit, self._check)]
        for t in self.threads:
            t.start()

    def _edit(self) -> None:
        i = 0
        while not self.stop_editing.is_set():
            tgt = self.targets[i % len(self.targets)]
            new = f"memfs fleet edit {i} {time.time()}\n"
            try:
                self.emu.admin.update(tgt["store_id"], tgt["memory_id"], new)
            except RuntimeError as e:  # a 429 to the admin: counted, the edit skipped
                log(f"hosted fleet: an admin edit failed: {e}")
            else:
                with self._lock:
                    self.edits.append({**tgt, "content": new, "at": time.monotonic(), "seen": {}})
            i += 1
            self.stop_editing.wait(EDIT_EVERY_S)

    def _check(self) -> None:
        while True:
            with self._lock:
                pending = [e for e in self.edits if len(e["seen"]) < len(self.sandboxes)]
            now = time.monotonic()
            for e in pending:
                for k, sb in enumerate(self.sandboxes):
                    if k in e["seen"]:
                        continue
                    with contextlib.suppress(OSError):
                        if (sb.root / e["slug"] / e["path"].lstrip("/")).read_text() == e["content"]:
                            e["seen"][k] = now - e["at"]
            if self.stop_checking.is_set():
                return
            time.sleep(0.5)

    def done(self) -> bool:
        """Every edit seen everywhere, or the last one older than the readability bound."""
        with self._lock:
            if all(len(e["seen"]) == len(self.sandboxes) for e in self.edits):
                return True
            return bool(self.edits) and time.monotonic() - self.edits[-1]["at"] > READABLE_WITHIN_S + 5

    def close(self) -> None:
        self.stop_editing.set()
        self.stop_checking.set()
        for t in self.threads:
            t.join(60)


def readable(edits: list[dict], sandboxes: int) -> dict:
    """Of every (edit, sandbox) pair: how many became readable within two intervals, the slowest."""
    pairs = len(edits) * sandboxes
    delays = [d for e in edits for d in (e["seen"].values() if isinstance(e["seen"], dict) else e["seen"])]
    within = sum(1 for d in delays if d <= READABLE_WITHIN_S)
    return {
        "edits": len(edits),
        "pairs": pairs,
        "within_two_intervals": within,
        "max_s": max(delays) if delays else float("nan"),
        "median_s": median(delays),
    }


def row_fleet(b: Bench, p: Plan) -> None:
    seed = b.work / "fleet-seed.db"
    ids_by_name = fleet_seed(seed)
    ids = [ids_by_name["fleet-a"], ids_by_name["fleet-b"]]
    emus = [Emulator(b, "fleet-memfs", seed, p.rtt), Emulator(b, "fleet-official", seed, p.rtt)]
    mem, off = emus
    sandboxes: list[Sandbox] = []
    child = None
    try:
        sess_m = [mem.session(ids) for _ in range(p.fleet)]
        sess_o = [off.session(ids) for _ in range(p.fleet)]
        targets = edit_targets(mem, ids, sess_m[0])
        root = b.work / "official-fleet"
        root.mkdir()
        child = OfficialChild({
            "hosted": "fleet", "service_url": off.svc.base_url, "proxy_url": off.proxy.url, "sessions": sess_o,
            "root": str(root), "fleet_s": p.fleet_s, "edit_targets": targets, "edit_every_s": EDIT_EVERY_S,
            "readable_within_s": READABLE_WITHIN_S,
        })  # fmt: skip
        sandboxes = [b.sandbox(s, base_url=mem.proxy.url, name="fleet") for s in sess_m]
        c0 = mem.counts()
        t = time.perf_counter()
        mounts = mount_all(sandboxes)
        download = {"s": time.perf_counter() - t, "mount_s": mounts, **delta(mem, c0)}
        download["failed_mounts"] = sum(len(m["failed_attempts"]) for m in mounts)
        download["never_mounted"] = sum(not m["mounted"] for m in mounts)
        log(
            f"hosted fleet: {len(sandboxes)} mounts in {download['s']:.1f} s ({download['limited']} 429s, "
            f"{download['failed_mounts']} failed mount attempts, {download['never_mounted']} never mounted)"
        )
        up = [sb for sb, m in zip(sandboxes, mounts, strict=True) if m["mounted"]]
        c0 = mem.counts()
        agents = Agents(b, up)
        edits = Edits(mem, targets, up)
        time.sleep(p.fleet_s)
        edits.stop_editing.set()
        window = {"seconds": p.fleet_s, **delta(mem, c0), "edits": len(edits.edits)}
        window["requests"] -= len(edits.edits)  # the admin's own edits are not the fleet's
        while not edits.done():  # the agents stay active while the last edits are checked
            time.sleep(1)
        edits.close()
        agents.join()
        mine = {"download": download, "window": window, "readable": readable(edits.edits, len(sandboxes)),
                "calls": agents.calls, "failed": agents.failed}  # fmt: skip
        theirs = child.next()
        theirs["window"]["requests"] -= len(theirs["edits"])
        theirs["readable"] = readable(theirs["edits"], theirs["sandboxes"])
    finally:
        if child is not None:
            child.stop()
        close_all(b, sandboxes)
        for e in emus:
            e.stop()
    _report(b, p, mine, theirs)


def edit_targets(emu: Emulator, ids: list[str], sess: dict) -> list[dict]:
    out = []
    for sid, slug in zip(ids, sess["slugs"], strict=True):
        for path, m in sorted(emu.admin.list_basic(sid).items()):
            out.append({"store_id": sid, "memory_id": m["id"], "path": path, "slug": slug})
    return out[0::2] + out[1::2]  # alternate between the stores


def _report(b: Bench, p: Plan, mine: dict, theirs: dict) -> None:
    rtt = f"{p.rtt * 1000:g} ms"
    mw, ow = mine["window"], theirs["window"]
    mr, orr = mine["readable"], theirs["readable"]
    # pairs count every sandbox of the fleet: one that never mounted never reads an edit
    all_seen = mr["pairs"] > 0 and mr["within_two_intervals"] == mr["pairs"]
    b.add(
        f"hosted fleet-{p.fleet} 429s",
        f"{p.fleet} sandboxes x 2 stores x 200 memories, agents active, an edit every {EDIT_EVERY_S:g} s, "
        f"{p.fleet_s:g} s: 429 answers after the first downloads (every edit readable in every sandbox "
        f"within two intervals: {mr['within_two_intervals']}/{mr['pairs']}; official "
        f"{orr['within_two_intervals']}/{orr['pairs']}), rtt {rtt}",
        mw["limited"], ow["limited"], "req", "0, every edit readable within 2 intervals",
        mw["limited"] == 0 and all_seen, base_label="official", ratio=float("nan"),
        details={"memfs": mine, "official": theirs},
    )  # fmt: skip
    m, o = per_minute(mw["requests"], mw["seconds"]), per_minute(ow["requests"], ow["seconds"])
    b.add(
        f"hosted fleet-{p.fleet} req/min",
        f"requests a minute of the whole fleet in that window (the admin's edits left out), rtt {rtt}",
        m, o, "req/min", "-", None, base_label="official",
    )  # fmt: skip
    log(
        f"hosted fleet-{p.fleet}: memfs {m:.0f} req/min, {mw['limited']} 429s, readable "
        f"{mr['within_two_intervals']}/{mr['pairs']} (max {mr['max_s']:.1f} s); official {o:.0f} req/min, "
        f"{ow['limited']} 429s, readable {orr['within_two_intervals']}/{orr['pairs']} (max {orr['max_s']:.1f} s)"
    )
