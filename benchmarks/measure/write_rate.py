"""2,000 creates into one store of a fresh `memfs serve`: single requests vs batch writes.

    .venv/bin/python -m benchmarks.measure.write_rate [--files 2000] [--size 16384] [--concurrency 32]
        [--modes single-1,single-N,batch] [--db sqlite|URL]

Starts its own service on a loopback port (a temp dir, SQLite unless --db), then per mode creates
`--files` memories of about `--size` bytes (random words) in a store of their own and prints the
wall time and requests:
- `single-1`: one create after the other on one connection (a lone writer: one commit each);
- `single-N`: `--concurrency` connections at once, as the mount and the official worker push (on
  SQLite these form group commits);
- `batch`: the batch-write extension, cut as the mount cuts it (memfs.batching.batch_chunks), the
  batches sent `--concurrency` at once.
Run it with another checkout's interpreter (its editable memfs serves) for a before/after.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from pathlib import Path

import httpx

from tests.support.service import ServiceProcess

WORDS = [
    w * k for w in ("memory", "store", "batch", "commit", "fsync", "write", "agent", "note") for k in (1, 2)
]
BETA = {"anthropic-beta": "agent-memory-2026-07-22"}


def contents(n: int, size: int, seed: int = 18) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words: list[str] = []
        total = 0
        while total < size:
            words.append(rng.choice(WORDS))
            total += len(words[-1]) + 1
        out.append((f"/d{i % 50}/f{i:05d}.md", " ".join(words) + "\n"))
    return out


def _pool(n: int, jobs: list, fn) -> None:
    lock = threading.Lock()
    items = list(jobs)
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                if not items or errors:
                    return
                job = items.pop(0)
            try:
                fn(job)
            except BaseException as e:  # noqa: BLE001 - reported after the run
                errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def run(svc: ServiceProcess, mode: str, files: list[tuple[str, str]], concurrency: int) -> dict:
    store = svc.create_store(f"rate-{mode}")["id"]
    local = threading.local()

    def client() -> httpx.Client:
        if not hasattr(local, "c"):
            local.c = httpx.Client(
                base_url=svc.base_url, headers={"x-api-key": svc.admin_key, **BETA}, timeout=120
            )
        return local.c

    requests = [0]

    def single(item: tuple[str, str]) -> None:
        r = client().post(f"/v1/memory_stores/{store}/memories", json={"path": item[0], "content": item[1]})
        requests[0] += 1
        if r.status_code != 200:
            raise RuntimeError(r.text[:300])

    def batch(chunk: list[int]) -> None:
        ops = [{"type": "create", "path": files[i][0], "content": files[i][1]} for i in chunk]
        r = client().post(f"/v1/memory_stores/{store}/memory_batch", json={"operations": ops})
        requests[0] += 1
        if r.status_code != 200:
            raise RuntimeError(r.text[:300])
        bad = [x for x in r.json()["results"] if x.get("type") == "error"]
        if bad:
            raise RuntimeError(json.dumps(bad[0]))

    t0 = time.perf_counter()
    if mode == "single-1":
        _pool(1, files, single)
    elif mode == "single-N":
        _pool(concurrency, files, single)
    elif mode == "batch":
        from memfs.batching import batch_chunks

        ops = [{"type": "create", "path": p, "content": c} for p, c in files]
        _pool(concurrency, batch_chunks(ops), batch)
    else:
        raise SystemExit(f"unknown mode {mode}")
    seconds = time.perf_counter() - t0
    with svc.admin_client() as c:
        counter = c.get(f"/v1/memory_stores/{store}/counter").json()["counter"]
    assert counter == len(files), (counter, len(files))
    return {
        "mode": mode,
        "files": len(files),
        "seconds": round(seconds, 2),
        "requests": requests[0],
        "per_second": round(len(files) / seconds, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--modes", default="single-1,single-N,batch")
    ap.add_argument("--db", default="sqlite")
    args = ap.parse_args()
    files = contents(args.files, args.size)
    with tempfile.TemporaryDirectory(prefix="memfs-write-rate-") as tmp:
        svc = ServiceProcess(
            Path(tmp), db_url=None if args.db == "sqlite" else args.db, max_memories=max(10_000, args.files)
        )
        try:
            for mode in args.modes.split(","):
                print(json.dumps(run(svc, mode, files, args.concurrency)), flush=True)
        finally:
            svc.stop()


if __name__ == "__main__":
    main()
