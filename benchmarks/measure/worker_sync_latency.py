"""The worker's pre-call sync, timed: median and p99 over N calls with no tick due.

A real `memfs serve`, a real mount (sync interval of an hour, so no tick is ever due) and the
worker's `DaemonLink` on an asyncio loop, as `memfs_tools()` calls it before each tool call; once
against the full control socket (found through --root), once against the sync-only socket
(MEMFS_SYNC_SOCKET); each next to the way it was done before (a new connection per call, on a
thread), in interleaved rounds. Prints two lines per socket. Shared machines are noisy: compare
the two lines of one run, not runs of different minutes. Run with the worktree's venv:

    .venv/bin/python -m benchmarks.measure.worker_sync_latency [calls]
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.support.api import Api
from tests.support.sandbox import Sandbox
from tests.support.service import ServiceProcess


async def timed_calls(link, calls: int) -> list[float]:
    """The worker's own pre-call sync (memfs_tools() calls exactly this)."""
    from memfs.worker.daemon_link import PRE_CALL_TIMEOUT

    took = []
    for _ in range(calls):
        started = time.perf_counter()
        answer = await link.async_sync(force=False, wait=False, timeout=PRE_CALL_TIMEOUT)
        took.append(time.perf_counter() - started)
        assert answer.get("ok") and not answer.get("ran"), answer
    if hasattr(link, "aclose"):
        await link.aclose()
    return took


async def timed_calls_per_connection(link, calls: int) -> list[float]:
    """How the worker did it before: a blocking call on a new connection, run on a worker thread."""
    import anyio

    from memfs.session import control

    path = link.socket_path()
    request = {"op": "sync", "force": False, "wait": False}
    if path.name == control.SOCKET_NAME:

        def once():
            return control.call(path.parent, request, timeout=20)
    else:

        def once():
            return call_on_new_connection(path, request, 20)

    took = []
    for _ in range(calls):
        started = time.perf_counter()
        answer = await anyio.to_thread.run_sync(once)
        took.append(time.perf_counter() - started)
        assert answer.get("ok") and not answer.get("ran"), answer
    return took


def call_on_new_connection(sock_path: Path, request: dict, timeout: float) -> dict:
    """One request on a fresh connection to a socket given by its own path (the sync-only one),
    as the worker's blocking call did it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(sock_path))
        s.sendall(json.dumps(request).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


ROUNDS = 5


def report(label: str, took: list[float]) -> None:
    took = sorted(took)
    p99 = took[min(len(took) - 1, int(len(took) * 0.99))]
    print(
        f"{label:<62} calls={len(took)} median={statistics.median(took) * 1e3:.3f} ms "
        f"p99={p99 * 1e3:.3f} ms max={took[-1] * 1e3:.3f} ms"
    )


def main() -> int:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    with tempfile.TemporaryDirectory(prefix="memfs-latency-") as tmp:
        base = Path(tmp)
        service = ServiceProcess(base / "service")
        box = None
        try:
            api = Api(service.base_url, service.admin_key)
            store = api.create_store("Latency")
            api.create(store, "/a.md", "a\n")
            session = api.create_session([(store, "read_write")])
            box = Sandbox(
                base,
                "sandbox",
                base_url=service.base_url,
                session_id=session["id"],
                work_secret=session["work_secret"],
            )
            sync_sock = base / "sync" / "sync.sock"
            box.env["MEMFS_SYNC_SOCKET"] = str(sync_sock)
            box.mount("--sync-interval", "3600")
            os.environ["MEMFS_RUNTIME_DIR"] = box.env["MEMFS_RUNTIME_DIR"]
            from memfs.worker.daemon_link import SOCKET_ENV, DaemonLink

            # Interleaved, so a machine busy with other work weighs on both ways alike.
            for label, sock in (("full control socket", None), ("sync-only socket", str(sync_sock))):
                if sock is None:
                    os.environ.pop(SOCKET_ENV, None)
                else:
                    os.environ[SOCKET_ENV] = sock
                old: list[float] = []
                new: list[float] = []
                for _ in range(ROUNDS):
                    old += asyncio.run(timed_calls_per_connection(DaemonLink(box.root), calls // ROUNDS))
                    new += asyncio.run(timed_calls(DaemonLink(box.root), calls // ROUNDS))
                report(f"{label}, connection per call on a thread (before)", old)
                report(f"{label}, held connection on the loop (now)", new)
            api.close()
        finally:
            if box is not None:
                box.close()
            service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
