"""service: counter reads and memory writes per second from a second process (raw HTTP/1.1)."""

from __future__ import annotations

from benchmarks.admin import MEMORY_HEADERS
from benchmarks.config import ADMIN_KEY, log, median
from benchmarks.harness import Bench
from benchmarks.tools import load


def row_service(b: Bench, ids8: list[str]) -> None:
    cfg = b.cfg
    port = int(b.svc.base_url.rsplit(":", 1)[1])
    sid = b.admin.create_store("service-load")
    mids = []
    for i in range(64):
        r = b.admin.http.post(
            f"/v1/memory_stores/{sid}/memories",
            json={"path": f"/load/m{i}.md", "content": "x"},
            headers=MEMORY_HEADERS,
        )
        mids.append(r.json()["id"])
    runs_c, runs_w = [], []
    for _ in range(max(1, cfg.runs - 1)):
        c = load(
            {
                "port": port,
                "kind": "counter",
                "ids": ",".join(ids8),
                "key": ADMIN_KEY,
                "conc": 16,
                "seconds": cfg.load_seconds,
            }
        )
        runs_c.append(c["ok"] / c["seconds"])
        w = load(
            {
                "port": port,
                "kind": "write",
                "store": sid,
                "mids": mids,
                "key": ADMIN_KEY,
                "conc": 8,
                "seconds": cfg.load_seconds,
            }
        )
        runs_w.append(w["ok"] / w["seconds"])
        if c["err"] or w["err"]:
            log(f"service load: errors counter={c['err']} write={w['err']}")
    reads, writes = median(runs_c), median(runs_w)
    b.add(
        "service (counter reads)",
        f"GET /v1/memory_store_counters ({len(ids8)} ids), 16 connections from a second process",
        reads,
        2000,
        "/s",
        ">= 2,000/s",
        reads >= 2000,
        base_label="target",
        ratio=reads / 2000,
        details={"runs": runs_c},
    )
    b.add(
        "service (memory writes)",
        "POST update (1 KiB, a new version each), 8 connections from a second process",
        writes,
        float("nan"),
        "/s",
        "report",
        None,
        base_label="-",
        ratio=float("nan"),
        details={"runs": runs_w},
    )
