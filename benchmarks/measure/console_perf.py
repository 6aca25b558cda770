"""How fast the console's pages answer on a store of 10,000 memories (docs/SEMANTICS.md#d-console: each under 300 ms).

Seeds a temp SQLite database through the service's rules (`StoreService`) (10,000 memories in 50 directories of 200,
some with several versions), starts `memfs serve --console` on it on a free loopback port, signs in
and times every console page: 7 GETs each, first, median and worst, as a browser's request sees
them. A store's overview counts its memories and bytes with one indexed query (`store_totals`), so
its first view after a start (timed again on fresh processes at the end) costs what later ones do.
Prints a table; asserts nothing. Run: .venv/bin/python -m benchmarks.measure.console_perf [--postgresql]
(--postgresql: the same on a throwaway PostgreSQL cluster, tests/support/postgres.py, as root).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from memfs.service.database import open_storage
from memfs.service.storage import Actor
from tests.support.service import ServiceProcess

MEMORIES = 10_000
DIRS = 50
RUNS = 7
COLD_RUNS = 5
BUDGET_MS = 300


def seed(db: Path | str) -> tuple[str, str, list[str]]:
    storage = open_storage(db)
    actor = Actor("api_actor", "apikey_perf")
    store = storage.create_store("perf store", "10,000 memories", {})
    for i in range(30):  # other stores, so the list has something to page over
        storage.create_store(f"other store {i}", "", {})
    per_dir = MEMORIES // DIRS
    first = None
    for i in range(MEMORIES):
        body = f"# note {i}\n" + "a line of remembered text\n" * 20
        m = storage.create_memory(store.id, f"/dir{i // per_dir:02d}/note{i % per_dir:03d}.md", body, actor,
                                  max_memories=MEMORIES)  # fmt: skip
        first = first or m
    for n in range(5):  # a memory with history
        storage.update_memory(store.id, first.id, content=f"# note 0\nrevision {n}\n" * 10, path=None,
                              expected_sha256=None, actor=actor)  # fmt: skip
    versions = storage.list_versions(
        store.id, filters=_filter(first.id), limit=10, after=None, with_content=False
    )
    storage.close()
    return store.id, first.id, [v.id for v in versions.items]


def _filter(memory_id: str):
    from memfs.service.storage import VersionFilter

    return VersionFilter(memory_id=memory_id)


def sign_in(c: httpx.Client, key: str) -> None:
    r = c.get("/console/login")
    token = re.search(r'name="csrf" value="([^"]+)"', r.text).group(1)
    r = c.post("/console/login", data={"csrf": token, "admin_key": key})
    assert r.status_code == 303, r.text


def main() -> int:
    ap = argparse.ArgumentParser(description="Times every console page on a 10,000-memory store.")
    ap.add_argument("--postgresql", action="store_true", help="on a throwaway PostgreSQL cluster (as root)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="memfs-console-perf-"))
    db = work / "data" / "store.db"
    db.parent.mkdir(parents=True)
    cluster = url = svc = None
    if args.postgresql:
        from tests.support.postgres import PostgresCluster

        cluster = PostgresCluster()
        url = cluster.create_database("console_perf")
    try:
        t = time.perf_counter()
        sid, mid, vids = seed(url or db)
        print(
            f"seeded {MEMORIES} memories ({'PostgreSQL' if url else 'SQLite'}) in {time.perf_counter() - t:.1f} s"
        )
        svc = ServiceProcess(work / "service", db_path=db, db_url=url, console=True)
        _measure(svc, sid, mid, vids)
    finally:
        if svc is not None:
            svc.stop()
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _measure(svc: ServiceProcess, sid: str, mid: str, vids: list[str]) -> None:
    with httpx.Client(base_url=svc.base_url, timeout=30) as c:
        sign_in(c, svc.admin_key)
        browse = c.get(f"/console/stores/{sid}/memories", params={"prefix": "/dir00/"}).text
        nxt = re.search(r'page=([^"&]+)" id="next-page"', browse)
        pages = {
            "stores list": "/console/",
            "stores search": "/console/?q=perf",
            "store overview (counts 10,000)": f"/console/stores/{sid}",
            "browse / (50 roll-ups)": f"/console/stores/{sid}/memories?prefix=/",
            "browse /dir00/ (page 1 of 2)": f"/console/stores/{sid}/memories?prefix=/dir00/",
            "browse /dir00/ (page 2)": f"/console/stores/{sid}/memories?prefix=/dir00/&page={nxt.group(1)}",
            "memory view": f"/console/stores/{sid}/memories/{mid}",
            "memory edit": f"/console/stores/{sid}/memories/{mid}/edit",
            "memory rename form": f"/console/stores/{sid}/memories/{mid}/rename",
            "memory delete confirm": f"/console/stores/{sid}/memories/{mid}/delete",
            "memory history": f"/console/stores/{sid}/memories/{mid}/history",
            "store history (10,005 versions)": f"/console/stores/{sid}/history",
            "version": f"/console/stores/{sid}/versions/{vids[-1]}",
            "diff": f"/console/stores/{sid}/diff?a={vids[-1]}&b={vids[0]}",
            "redact confirm": f"/console/stores/{sid}/versions/{vids[-1]}/redact",
            "archive confirm (counts)": f"/console/stores/{sid}/archive",
            "delete store confirm (counts)": f"/console/stores/{sid}/delete",
            "import form": "/console/import",
            "new memory form": f"/console/stores/{sid}/memories/new?prefix=/dir00/",
        }
        print(f"{'page':40} {'first ms':>10} {'median ms':>10} {'worst ms':>10}")
        worst_all = 0.0
        for name, url in pages.items():
            times = []
            for _ in range(RUNS):
                t = time.perf_counter()
                r = c.get(url)
                times.append((time.perf_counter() - t) * 1000)
                assert r.status_code == 200, (url, r.status_code, r.text[:300])
            worst_all = max(worst_all, max(times))
            print(f"{name:40} {times[0]:10.1f} {statistics.median(times):10.1f} {max(times):10.1f}")
        t = time.perf_counter()
        r = c.get(f"/console/stores/{sid}/export")
        print(f"{'export (download, 10,000 memories)':40} {(time.perf_counter() - t) * 1000:10.1f}"
              f"  ({len(r.content) / 1e6:.1f} MB)")  # fmt: skip
        print(f"worst page: {worst_all:.1f} ms (budget {BUDGET_MS} ms)")
    # The cold case again, on fresh service processes (nothing counted yet): its spread.
    cold = []
    for _ in range(COLD_RUNS):
        svc.restart()
        with httpx.Client(base_url=svc.base_url, timeout=30) as c:
            sign_in(c, svc.admin_key)
            t = time.perf_counter()
            assert c.get(f"/console/stores/{sid}").status_code == 200
            cold.append((time.perf_counter() - t) * 1000)
    print(f"store overview, first view after {COLD_RUNS} restarts: median {statistics.median(cold):.1f} ms, "
          f"worst {max(cold):.1f} ms")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
