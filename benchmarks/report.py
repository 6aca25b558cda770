"""The report: figures formatted, rows in the issue's order, the table on stdout, the JSON file."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any


def fmt(v: float, unit: str) -> str:
    if v != v:  # nan
        return "-"
    if unit == "s":
        return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"
    if unit == "B":
        for u, d in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if v >= d:
                return f"{v / d:.1f} {u}"
        return f"{v:.0f} B"
    if unit == "req":
        return f"{v:.0f} req"
    if unit == "/s":
        return f"{v:,.0f}/s"
    return f"{v:.3g} {unit}"


def machine() -> dict:
    def sh(cmd: str) -> str:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()

    return {
        "nproc": os.cpu_count(),
        "cpu": sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip(),
        "mem": sh("free -h | awk '/Mem:/ {print $2}'"),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_start": os.getloadavg(),
    }


ORDER = [
    "mount-ready",
    "mount-ready-early",
    "mount-ready-8",
    "idle-tick",
    "one-change-tick",
    "grep-warm",
    "grep-idle",
    "grep-cold",
    "stat-storm",
    "write-burst",
    "propagation",
    "propagation-live",
    "rss",
    "service",
]


def in_issue_order(results: list[dict]) -> list[dict]:
    def key(r: dict) -> tuple[int, int]:
        head = r["row"].split(" ")[0]
        return (ORDER.index(head) if head in ORDER else len(ORDER), results.index(r))

    return sorted(results, key=key)


def print_table(results: list[dict]) -> str:
    head = ["row", "memfs", "baseline", "", "ratio", "target", "met"]
    rows = []
    for r in results:
        ratio = "-" if r["ratio"] != r["ratio"] else f"{r['ratio']:.3g}x"
        met = "-" if r["met"] is None else ("yes" if r["met"] else "NO")
        base = "-" if r["baseline"] != r["baseline"] else fmt(r["baseline"], r["unit"])
        rows.append(
            [r["row"], fmt(r["memfs"], r["unit"]), base, r["baseline_label"], ratio, r["target"], met]
        )
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"  # noqa: E731
    out = [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]
    return "\n".join(out)


def write_json(out: Path, **fields: Any) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(fields, indent=2, default=str))
