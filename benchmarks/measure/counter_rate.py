"""Counter reads (or memory writes) per second on one `memfs serve` process, from a raw client.

    .venv/bin/python -m benchmarks.measure.counter_rate [--seconds 5] [--connections 4] [--memories 0]
        [--db sqlite|postgresql|URL] [--writes] [--watches N]

`--writes`: each connection POSTs 1 KiB updates of its own memory (a new version, a commit, each)
instead of counter reads (8 connections is what the bench used). `--watches N`: hold N watches
on one store, print the service's RSS, then wake them all with one write and count the answers.

Starts its own service on a loopback port (a temp dir), creates one store (optionally with
`--memories` memories: the counter's cost must not depend on them; on PostgreSQL the seeded
tables are then vacuumed and analyzed, not left to autovacuum mid-measurement), then each connection sends
`GET /v1/memory_stores/{id}/counter` back to back on one socket for the duration (bounded) and
counts answers. The client is plain sockets in one thread each, so what is measured is the
service's per-request stack, not an HTTP client library. With `--db postgresql` it also prints
the throwaway cluster's CPU per request (its backends run on the same cores as the service).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.support.service import ServiceProcess


def _read_response(sock: socket.socket, buf: bytearray) -> bytes:
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        rest += chunk
    buf[:] = rest[length:]
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.split(b"\r\n")[0].decode())
    return rest[:length]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cluster_cpu_seconds(cluster) -> float:
    """utime + stime of a throwaway PostgreSQL cluster: its postmaster and every process it
    started (the backends serving the service, the background writers), from /proc."""
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    total = cpu_seconds(postmaster)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        if int(fields[1]) == postmaster:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _counter_request(store: str, key: str, i: int, n: int) -> bytes:
    return (
        f"GET /v1/memory_stores/{store}/counter HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        f"x-api-key: {key}\r\nanthropic-beta: agent-memory-2026-07-22\r\n\r\n"
    ).encode()


def _write_request(memory_ids: list[str]):
    def build(store: str, key: str, i: int, n: int) -> bytes:
        body = json.dumps({"content": f"{n}\n" + "x" * 1020}).encode()  # differs each time: a version
        return (
            f"POST /v1/memory_stores/{store}/memories/{memory_ids[i]} HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            f"x-api-key: {key}\r\nanthropic-beta: agent-memory-2026-07-22\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode() + body

    return build


def measure(
    port: int, store: str, key: str, seconds: float, connections: int, build=_counter_request
) -> float:
    counts = [0] * connections
    start = threading.Barrier(connections + 1)
    deadline = [0.0]

    def worker(i: int) -> None:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray()
        start.wait()
        n = 0
        max_requests = 10_000_000  # a bound on the loop whatever the clock does
        while n < max_requests and time.monotonic() < deadline[0]:
            sock.sendall(build(store, key, i, n))
            json.loads(_read_response(sock, buf))
            n += 1
        counts[i] = n
        sock.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    deadline[0] = time.monotonic() + seconds
    t0 = time.monotonic()
    start.wait()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _watches(svc: ServiceProcess, pid: int, store: str, n: int) -> int:
    """Hold `n` watches (one socket each), report RSS, wake them with one write, count answers."""
    req = (
        f"GET /v1/memory_store_watch?known={store}:0&wait=60 HTTP/1.1\r\nhost: x\r\n"
        f"x-api-key: {svc.admin_key}\r\nanthropic-beta: agent-memory-2026-07-22\r\n\r\n"
    ).encode()
    socks: list[socket.socket] = []
    try:
        rss_before = _rss_mib(pid)
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", svc.port))
            s.sendall(req)
            socks.append(s)
        held = f"memfs_watches_held {float(n)}"
        with svc.admin_client() as c:
            deadline = time.monotonic() + 60
            while held not in c.get("/metrics").text and time.monotonic() < deadline:
                time.sleep(0.2)
            if held not in c.get("/metrics").text:
                print(f"not all {n} watches were held within 60 s", file=sys.stderr)
                return 1
            rss = _rss_mib(pid)
            t0 = time.monotonic()
            c.post(f"/v1/memory_stores/{store}/memories", json={"path": "/wake", "content": "x"})
        answered = 0
        for s in socks:
            s.settimeout(30)
            data = b""
            while b'"status"' not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            answered += b'"status":"changed"' in data
        woke_s = time.monotonic() - t0
    finally:
        for s in socks:
            s.close()
        svc.stop()
    print(
        f"{n} watches held: service RSS {rss:.1f} MiB ({rss_before:.1f} MiB before them); one write "
        f"answered {answered} of them in {woke_s * 1000:.0f} ms; load average {os.getloadavg()[0]:.1f}"
    )
    return 0 if answered == n else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--memories", type=int, default=0)
    ap.add_argument(
        "--db",
        default="sqlite",
        help="sqlite (a temp file), postgresql (a throwaway cluster, tests/support/postgres.py) "
        "or a postgresql:// URL",
    )
    ap.add_argument("--writes", action="store_true", help="measure 1 KiB memory updates instead")
    ap.add_argument("--watches", type=int, default=0, help="hold this many watches and report RSS")
    args = ap.parse_args()
    cluster = None
    db_url = None if args.db == "sqlite" else args.db
    if args.db == "postgresql":
        from tests.support.postgres import PostgresCluster

        cluster = PostgresCluster()
        db_url = cluster.create_database("rate")
    with tempfile.TemporaryDirectory() as tmp:
        svc = ServiceProcess(Path(tmp), db_url=db_url)
        try:
            assert svc.proc is not None
            pid = svc.proc.pid
            store = svc.create_store("rate")["id"]
            with svc.admin_client() as c:
                for i in range(args.memories):
                    c.post(f"/v1/memory_stores/{store}/memories", json={"path": f"/m/{i}.md", "content": "x"})
            if args.memories and db_url is not None:
                # What autovacuum would do to the seeded tables at a moment of its choosing (in
                # the middle of the measurement, on the same cores), done now: the counter's
                # statement reads none of them, so what is measured is the counter's cost alone.
                import psycopg

                with psycopg.connect(db_url, autocommit=True) as conn:
                    conn.execute("VACUUM (ANALYZE)")
            if args.watches:
                return _watches(svc, pid, store, args.watches)
            build = _counter_request
            if args.writes:
                with svc.admin_client() as c:
                    ids = [c.post(f"/v1/memory_stores/{store}/memories",
                                  json={"path": f"/w/{i}.md", "content": "0"}).json()["id"]
                           for i in range(args.connections)]  # fmt: skip
                build = _write_request(ids)
            measure(svc.port, store, svc.admin_key, 1.0, args.connections, build)  # warm-up
            db0 = cluster_cpu_seconds(cluster) if cluster is not None else 0.0
            cpu0, t0 = cpu_seconds(pid), time.monotonic()
            rate = measure(svc.port, store, svc.admin_key, args.seconds, args.connections, build)
            requests = rate * (time.monotonic() - t0)
            cpu_per_request = (cpu_seconds(pid) - cpu0) / requests
            db_cpu = (
                f"; database CPU {(cluster_cpu_seconds(cluster) - db0) / requests * 1e6:.0f} us/request"
                if cluster is not None
                else ""
            )
        finally:
            svc.stop()
            if cluster is not None:
                cluster.stop()
    what = "memory writes/s" if args.writes else "counter reads/s"
    print(f"{what}: {rate:.0f} ({args.connections} keep-alive connections, {args.seconds:g} s, "
          f"{args.memories} memories, db={args.db.split('://')[0]}); "
          f"service CPU {cpu_per_request * 1e6:.0f} us/request, i.e. {1 / cpu_per_request:.0f}/s per core"
          f"{db_cpu}; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
