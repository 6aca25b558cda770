"""concurrent writers (SEMANTICS.md#d-merge): N sandboxes (own sessions) mount one store and, with
shell appends, each add a line of their own to one shared notes file every ~2 s (jittered) and
rewrite their own section of a second file every ~20 s, for a window; nobody calls `memfs sync`.
After the unmounts (each one's final sync): lines in the shared file / lines appended (target
100 %), lines lost (0), section edits kept (N of N). Against `memfs serve` (live), the hosted-API
emulator (its default limits, 40 ms away) and a relay in front of it; and once with
`--on-conflict store-wins` beside it (the seeds' rule, the figure before merging)."""

from __future__ import annotations

import random
import re
import subprocess
import threading
import time
from typing import Any

from benchmarks.admin import Admin
from benchmarks.config import ADMIN_KEY, log
from benchmarks.harness import Bench
from tests.support.proxy import ProxyProcess
from tests.support.sandbox import Sandbox
from tests.support.service import ServiceProcess

SANDBOXES = 5
APPEND_EVERY_S = 2.0
SECTION_EVERY_S = 20.0
LOG, PLAN = "/shared/log.md", "/shared/plan.md"


def _writer(box: Sandbox, slug: str, name: str, until: float, seed: int, out: dict[str, Any]) -> None:
    rng = random.Random(seed)
    top = box.root / slug
    next_section = time.monotonic() + rng.uniform(0, SECTION_EVERY_S)
    i = 0
    while time.monotonic() < until:
        i += 1
        line = f"{name} line {i}"
        subprocess.run(
            ["bash", "-c", f'echo "{line}" >> "$F"'], env={"F": str(top / LOG.lstrip("/"))}, check=True
        )
        out["appended"].append(line)
        if time.monotonic() >= next_section:
            value = f"{name} edit {i}"
            path = top / PLAN.lstrip("/")
            text = path.read_text()  # what an `edit` tool does: read, change one's section, write back
            path.write_text(re.sub(rf"(## {name}\n)status: [^\n]*\n", rf"\1status: {value}\n", text))
            out["section"] = value
            next_section += SECTION_EVERY_S * rng.uniform(0.8, 1.2)
        time.sleep(APPEND_EVERY_S * rng.uniform(0.5, 1.5))


def _run_variant(
    b: Bench, label: str, base_url: str, admin: Admin, window: float, flags: tuple[str, ...]
) -> dict[str, Any]:
    store = admin.create_store(f"Writers {label}")
    names = [f"w{k}" for k in range(SANDBOXES)]
    admin.create(store, LOG, "# shared log\n")
    admin.create(store, PLAN, "".join(f"## {n}\nstatus: idle\n\n" for n in names))
    boxes: list[Sandbox] = []
    outs: list[dict[str, Any]] = [{"appended": [], "section": None} for _ in names]
    try:
        for k in range(SANDBOXES):
            sess = admin.session([store])
            box = Sandbox(
                b.work / "writers" / label,
                names[k],
                base_url=base_url,
                session_id=sess["id"],
                work_secret=sess["work_secret"],
            )
            boxes.append(box)
            box.mount(*flags, timeout=180)
        slug = next(p.name for p in boxes[0].root.iterdir())
        until = time.monotonic() + window
        threads = [
            threading.Thread(target=_writer, args=(box, slug, names[k], until, 7 + k, outs[k]))
            for k, box in enumerate(boxes)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(window + 120)
        exits = [box.unmount(check=False, timeout=180).returncode for box in boxes]
        store_now = admin.contents(store)
    finally:
        for box in boxes:
            box.close()
    lines = store_now.get(LOG, "").splitlines()
    appended = [line for o in outs for line in o["appended"]]
    present = set(lines)
    lost = sum(1 for line in appended if line not in present)
    sections = sum(
        1
        for n, o in zip(names, outs, strict=True)
        if o["section"] is None or f"status: {o['section']}\n" in store_now.get(PLAN, "")
    )
    kept_aside = sum(
        1 for box in boxes for p in box.state_dir.rglob("*") if "kept" in p.parts and p.is_file()
    )
    return {
        "appended": len(appended),
        "in_file": sum(1 for line in lines if line in set(appended)),
        "lost": lost,
        "duplicated": len(lines) - len(present),
        "sections_kept": sections,
        "sections": SANDBOXES,
        "conflict_copies": sum(1 for p in store_now if ".conflict-" in p),
        "kept_in_state_dirs": kept_aside,
        "unmount_exits": exits,
        "window_s": window,
    }


def _service(b: Bench, name: str, **kw: Any) -> ServiceProcess:
    work = b.work / "writers" / name
    work.mkdir(parents=True, exist_ok=True)
    return ServiceProcess(work, admin_key=ADMIN_KEY, **kw)


def run_writers(b: Bench) -> None:
    window = 30.0 if b.cfg.quick else 120.0
    rtt = b.rtt if b.rtt is not None else 0.04
    results: dict[str, dict[str, Any]] = {}
    svc = _service(b, "serve")
    admin = Admin(svc.base_url)
    try:
        results["memfs serve (live)"] = _run_variant(b, "live", svc.base_url, admin, window, ())
        results["memfs serve, --on-conflict store-wins"] = _run_variant(
            b, "store-wins", svc.base_url, admin, window, ("--on-conflict", "store-wins")
        )
    finally:
        admin.close()
        svc.stop()
    emu = _service(b, "emulator", hosted_api=True, org_limits=None)
    proxy = ProxyProcess(emu.base_url, rtt=rtt)
    b.proxies.append(proxy)
    admin = Admin(emu.base_url)
    relay: ServiceProcess | None = None
    try:
        results[f"hosted-API emulator ({rtt * 1000:g} ms)"] = _run_variant(
            b, "hosted", proxy.url, admin, window, ()
        )
        relay = _service(b, "relay", extra_args=("--upstream", proxy.url))
        results["through a relay"] = _run_variant(b, "relay", relay.base_url, admin, window, ())
    finally:
        if relay is not None:
            relay.stop()
        admin.close()
        emu.stop()
    for label, r in results.items():
        log(f"concurrent writers, {label}: {r}")
        kept = r["in_file"] / r["appended"] if r["appended"] else float("nan")
        b.add(
            f"concurrent writers ({label})",
            f"lines in the shared file / appended; lost {r['lost']}, sections kept {r['sections_kept']}/{r['sections']}",
            kept * 100,
            100.0,
            "%",
            "100 %, 0 lost, 5 of 5 sections",
            None if "store-wins" in label else (r["lost"] == 0 and r["sections_kept"] == r["sections"]),
            base_label="target",
            details=r,
        )
