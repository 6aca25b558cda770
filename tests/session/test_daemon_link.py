"""The worker's link to the daemon (memfs/worker/daemon_link.py): one held connection on the
worker's event loop, a short deadline for a stopped daemon, one reconnect after a restart. A
stopped daemon met by a whole item, through either socket (`via`), is a scenario both workers run:
tests/e2e/test_worker_e2e.py."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from memfs.worker.daemon_link import SOCKET_ENV, DaemonLink

pytestmark = pytest.mark.timeout(120)


def test_many_calls_share_one_connection_and_a_restart_is_reconnected(wworld, via):
    def restart() -> None:
        wworld.box.unmount()
        wworld.mount()

    async def main() -> None:
        link = DaemonLink(wworld.root)
        try:
            before = await link.async_status()
            for _ in range(5):
                answer = await link.async_sync(force=False, wait=False, timeout=20)
                assert answer["ok"] and answer["ran"] is False, answer
            held = link._stream
            assert held is not None
            await link.async_sync(force=False, wait=False, timeout=20)
            assert link._stream is held, "each call opened a new connection"
            await anyio.to_thread.run_sync(restart)  # the old daemon closes the held connection
            answer = await link.async_sync(force=False, wait=False, timeout=20)
            assert answer["ok"], answer
            assert link._stream is not held
            assert (await link.async_status())["pid"] != before["pid"]
        finally:
            await link.aclose()

    asyncio.run(main())


class SlowDaemon:
    """A stand-in socket (a real slow tick is hard to order on cue): answers a ping at once on any
    connection, and a sync only after `delay` seconds, like a daemon whose due tick pulls."""

    def __init__(self, path, delay: float):
        import json
        import socketserver
        import threading
        import time

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                for line in self.rfile:
                    op = json.loads(line).get("op")
                    if op == "sync":
                        time.sleep(delay)
                        answer = {"ok": True, "ran": True}
                    else:
                        answer = {"ok": True, "pong": True}
                    self.wfile.write(json.dumps(answer).encode() + b"\n")
                    self.wfile.flush()

        self.server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.timeout(30)
def test_a_busy_daemon_that_answers_its_ping_gets_the_whole_timeout(tmp_path, monkeypatch):
    path = tmp_path / "slow.sock"
    monkeypatch.setenv(SOCKET_ENV, str(path))
    daemon = SlowDaemon(path, delay=0.8)  # longer than the ping deadline given below

    async def main():
        link = DaemonLink(tmp_path / "root")
        try:
            return await link.async_sync(force=False, wait=False, timeout=10, ping_timeout=0.3)
        finally:
            await link.aclose()

    try:
        assert asyncio.run(main()) == {"ok": True, "ran": True}
    finally:
        daemon.close()


def test_concurrent_calls_each_get_their_own_answer_and_a_cancelled_one_costs_nothing(wworld, via):
    """anthropic 2.16 runs calls of several session threads at once (max_concurrent_calls): their
    pre-call syncs share the link. Each must get the answer to its own request, in whatever order
    they run, and one call stopped half-way (the runner cancels a stopped call) must not leave its
    answer to be read by the next."""

    async def main() -> None:
        link = DaemonLink(wworld.root)
        got: dict[int, dict] = {}
        try:

            async def one(i: int) -> None:
                if i % 2:
                    got[i] = await link.async_status()
                else:
                    got[i] = await link.async_sync(force=False, wait=False, timeout=20)

            async def stopped() -> None:
                with anyio.CancelScope() as scope:
                    scope.cancel()  # cancelled at its first await: on the lock, or half-way through
                    await link.async_status()

            for _ in range(3):
                async with anyio.create_task_group() as tg:
                    for i in range(12):
                        tg.start_soon(one, i)
                        if i == 5:
                            tg.start_soon(stopped)
                for i, answer in got.items():
                    assert answer["ok"], answer
                    assert ("stores" in answer) == bool(i % 2), (i, answer)  # status answers list stores
                    assert ("ran" in answer) == (not i % 2), (
                        i,
                        answer,
                    )  # sync answers say whether a tick ran
                got.clear()
        finally:
            await link.aclose()

    asyncio.run(main())
