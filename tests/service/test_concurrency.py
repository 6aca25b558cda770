"""Several writer processes on two service processes sharing one db; kill -9 during a burst."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from tests.service.dbcheck import rows
from tests.support.service import ServiceProcess

WRITER = Path(__file__).with_name("concurrent_writer.py")


def test_concurrent_writer_processes_never_lose_an_increment(service, tmp_path):
    # A second service process on the same database: writes meet in the database, not in one process.
    other = ServiceProcess(
        tmp_path / "second", db_path=service.db_path, db_url=service.db_url, admin_key=service.admin_key
    )
    try:
        store = service.create_store("busy")["id"]
        n = 50
        jobs = [
            (service, "mixed", "alpha"),
            (other, "mixed", "beta"),
            (service, "race", "racer-1"),
            (other, "race", "racer-2"),
        ]
        procs = [
            subprocess.Popen(
                [sys.executable, str(WRITER), svc.base_url, svc.admin_key, store, mode, tag, str(n)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for svc, mode, tag in jobs
        ]
        results = []
        for p in procs:
            out, _ = p.communicate(timeout=90)
            assert p.returncode == 0
            results.append(json.loads(out))
        assert all(r["errors"] == [] for r in results), results
        mixed, racers = results[:2], results[2:]
        assert all(r["acked"] == n and r["conflicts"] == 0 for r in mixed)
        # every racing path was created exactly once; the loser of each race got a 409
        assert sum(r["acked"] for r in racers) == n and sum(r["conflicts"] for r in racers) == n
        total = sum(r["acked"] for r in results)

        with service.admin_client() as c:
            assert c.get(f"/v1/memory_stores/{store}/counter").json()["counter"] == total
            versions, page = [], None
            while True:
                body = c.get(
                    f"/v1/memory_stores/{store}/memory_versions",
                    params={"limit": 100, **({"page": page} if page else {})},
                ).json()
                versions += body["data"]
                page = body["next_page"]
                if not page:
                    break
            assert len(versions) == total
            paths = [m["path"] for m in _list_all(c, store)]
            assert len(paths) == len(set(paths))
            assert sorted(p for p in paths if p.startswith("/race/")) == sorted(
                f"/race/{i}" for i in range(n)
            )
            for tag in ("alpha", "beta"):
                mine = sorted(p for p in paths if p.startswith(f"/{tag}/"))
                expected = sorted(
                    [f"/{tag}/renamed/{j}" for j in range(n * 2 // 10, n * 3 // 10)]
                    + [f"/{tag}/{j}" for j in range(n * 4 // 10, n * 6 // 10)]
                    + [f"/{tag}/{j}" for j in range(0, n * 2 // 10)]
                )
                assert mine == expected
        counters = [v for v in _db_counters(service, store)]
        assert counters == list(range(1, total + 1))  # each version at its own counter value, no gaps
    finally:
        other.stop()


def _list_all(c: httpx.Client, store: str) -> list[dict]:
    out, page = [], None
    while True:
        params = {"limit": 100, **({"page": page} if page else {})}
        body = c.get(f"/v1/memory_stores/{store}/memories", params=params).json()
        out += body["data"]
        page = body["next_page"]
        if not page:
            return out


def _db_counters(service, store) -> list[int]:
    dup = rows(
        service,
        "SELECT path, count(*) FROM memories WHERE deleted_at IS NULL GROUP BY store_id, path HAVING count(*) > 1",
    )
    assert dup == []
    return [
        r[0]
        for r in rows(service, "SELECT counter FROM versions WHERE store_id = ? ORDER BY counter", (store,))
    ]


def test_kill_9_during_a_burst_loses_no_acknowledged_write(service):
    store = service.create_store("durable")["id"]
    acked: list[tuple[str, str, str]] = []  # (path, memory id, version id)
    lock = threading.Lock()
    enough = threading.Event()

    def writer(k: int) -> None:
        with httpx.Client(
            base_url=service.base_url,
            headers={"x-api-key": service.admin_key, "anthropic-beta": "agent-memory-2026-07-22"},
            timeout=10,
        ) as c:
            for i in range(10_000):
                path = f"/w{k}/{i}"
                try:
                    r = c.post(
                        f"/v1/memory_stores/{store}/memories",
                        json={"path": path, "content": f"content {k} {i}"},
                    )
                except httpx.HTTPError:
                    return  # the service is gone
                assert r.status_code == 200, r.text
                with lock:
                    acked.append((path, r.json()["id"], r.json()["memory_version_id"]))
                    if len(acked) >= 60:
                        enough.set()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    assert enough.wait(30)
    service.kill()  # SIGKILL while the writers are mid-request
    for t in threads:
        t.join(15)
    service.start()

    with service.admin_client() as c:
        listed = _list_all(c, store)
        by_path = {m["path"]: m for m in listed}
        for path, mid, vid in acked:
            assert by_path[path]["id"] == mid and by_path[path]["memory_version_id"] == vid
            v = c.get(f"/v1/memory_stores/{store}/memory_versions/{vid}").json()
            assert v["content"] == "content " + path[2:].replace("/", " ")
        # at most one in-flight write per writer may have committed without its answer arriving
        assert len(acked) <= len(listed) <= len(acked) + 3
        counter = c.get(f"/v1/memory_stores/{store}/counter").json()["counter"]
        versions = _db_counters(service, store)
        assert counter == len(listed) == len(versions) and versions == list(range(1, counter + 1))
        # and the restarted service takes writes again
        assert (
            c.post(f"/v1/memory_stores/{store}/memories", json={"path": "/after", "content": "x"}).status_code
            == 200
        )
        assert c.get(f"/v1/memory_stores/{store}/counter").json()["counter"] == counter + 1
