"""The first download under the hosted API's limits (`scripts/bench --only first`), both sides each
on an emulator of its own with its default limits, behind a delay proxy (40 ms unless `--rtt`):
one full store, then all of them, in both orders (benchmarks/measure/first_download_hosted.py does
the measuring, and runs alone too). Rows: memfs forking its daemon and handed to a standby
(`memfs mount --prestart`), against the official worker's `download()` for one store, against the
limit's floor (and below the official worker) for all of them; requests and 429s in the details."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks.measure.first_download_hosted import measure, summary

if TYPE_CHECKING:
    from benchmarks.harness import Bench
    from benchmarks.rows import Run

ONE_TARGET = 0.5  # one store: at most this times the official worker's time
FLOOR_TARGET = 1.1  # all stores: at most this times the limit's floor, and below the official worker


def run_first_download(b: Bench, r: Run) -> None:
    work = b.work / "first-download"
    work.mkdir()
    rtt = b.rtt if b.rtt is not None else 0.040
    counts = (1, b.cfg.stores) if b.cfg.stores > 1 else (1,)
    out = measure(work, r.stores, counts, 1 if b.cfg.quick else 2, rtt)
    for n in counts:
        got = summary(out, n)
        official, floor = got["official"], got["floor_s"]
        for who, label in (("memfs", ""), ("memfs-early", ", early daemon")):
            mine = got[who]
            details = {
                "runs_s": mine["runs_s"],
                "requests": mine["requests"],
                "limited": mine["limited"],
                "official_runs_s": official["runs_s"],
                "official_requests": official["requests"],
                "official_limited": official["limited"],
                "floor_s": floor,
                "rtt_s": rtt,
                "load": got["load"],
            }
            if n == 1:
                b.add(
                    f"net first-download (hosted, limits{label})",
                    f"one full store's first download, each side on its own emulator with its default limits, "
                    f"{rtt * 1000:g} ms away",
                    mine["s"],
                    official["s"],
                    "s",
                    f"<= {ONE_TARGET}x official",
                    mine["s"] <= ONE_TARGET * official["s"],
                    base_label="official",
                    details=details,
                )
            else:
                b.add(
                    f"net first-download-{n} (hosted, limits{label})",
                    f"{n} full stores' first download, each side on its own emulator with its default limits, "
                    f"{rtt * 1000:g} ms away",
                    mine["s"],
                    floor,
                    "s",
                    f"<= {FLOOR_TARGET}x the floor, < official",
                    # stores that fit in the burst (--quick) have no floor: the row only reports
                    mine["s"] <= FLOOR_TARGET * floor and mine["s"] < official["s"] if floor else None,
                    base_label="floor",
                    details=details,
                )
