"""Shell tools and load generators the rows time: grep, a write burst, raw HTTP load.

Each runs in a process of its own, so what is timed is the tool, not this process's GIL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def run_timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


GREP_NEEDLE = "zq-needle-that-is-nowhere"  # absent: grep reads every byte of every file


def grep_cmd(d: Path) -> list[str]:
    return ["grep", "-r", "-F", "-c", GREP_NEEDLE, str(d)]


BURST_CHILD = r"""
import os, sys, time
root, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
base = ("burst line of text for the benchmark %d\n" * 400)
dirs = [os.path.join(root, "burst", f"d{i:02d}") for i in range(20)]
t = time.perf_counter()
for d in dirs:
    os.makedirs(d, exist_ok=True)
for i in range(n):
    head = f"file {i}\n"
    body = (head + base)[:size]
    with open(os.path.join(dirs[i % 20], f"f{i:04d}.txt"), "w") as f:
        f.write(body)
print(time.perf_counter() - t)
"""


def burst_write(root: Path, n: int, size: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", BURST_CHILD, str(root), str(n), str(size)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip())


# ---------------------------------------------------------------------------------------------
# load generator for the service row (a second process, raw HTTP/1.1 keep-alive)
# ---------------------------------------------------------------------------------------------
LOAD_CHILD = r"""
import asyncio, json, sys, time
cfg = json.loads(sys.argv[1])
host, port = "127.0.0.1", cfg["port"]
async def worker(i, deadline, counts):
    r, w = await asyncio.open_connection(host, port)
    n = 0
    while time.perf_counter() < deadline:
        if cfg["kind"] == "counter":
            req = (f"GET /v1/memory_store_counters?ids={cfg['ids']} HTTP/1.1\r\nHost: x\r\n"
                   f"x-api-key: {cfg['key']}\r\nanthropic-beta: agent-memory-2026-07-22\r\n\r\n").encode()
        else:
            mid = cfg["mids"][(i + n * cfg["conc"]) % len(cfg["mids"])]
            body = json.dumps({"content": f"write {i} {n} {time.time()}\n" + "y" * 1000}).encode()
            req = (f"POST /v1/memory_stores/{cfg['store']}/memories/{mid} HTTP/1.1\r\nHost: x\r\n"
                   f"x-api-key: {cfg['key']}\r\nanthropic-beta: agent-memory-2026-07-22\r\n"
                   f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body
        w.write(req)
        await w.drain()
        status = await r.readline()
        length = 0
        while True:
            line = await r.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode().partition(":")
            if k.lower() == "content-length":
                length = int(v)
        await r.readexactly(length)
        code = int(status.split()[1])
        counts["ok" if code < 300 else "err"] += 1
        n += 1
    w.close()
async def main():
    counts = {"ok": 0, "err": 0}
    t0 = time.perf_counter()
    deadline = t0 + cfg["seconds"]
    await asyncio.gather(*(worker(i, deadline, counts) for i in range(cfg["conc"])))
    counts["seconds"] = time.perf_counter() - t0
    print(json.dumps(counts))
asyncio.run(main())
"""


def load(cfg: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", LOAD_CHILD, json.dumps(cfg)],
        capture_output=True,
        text=True,
        check=True,
        timeout=cfg["seconds"] + 60,
    )
    return json.loads(out.stdout)
