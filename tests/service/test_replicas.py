"""Three `memfs serve` on one PostgreSQL behind a round-robin proxy; one is SIGKILLed mid-run (docs/SEMANTICS.md#d-storage).

Writers and readers go through the proxy on a fresh connection per request, so consecutive
requests land on different replicas. Shown: no acknowledged write is lost, each store's counter
takes every value once (1..N, in the order each writer's writes were acknowledged), readers never
see a counter go back, and the changes feed is the same from every replica afterwards.
"""

from __future__ import annotations

import itertools
import socket
import threading

import httpx
import pytest

from tests.service.dbcheck import rows
from tests.support.service import ServiceProcess

pytestmark = pytest.mark.timeout(180)
MEMORY = {"anthropic-beta": "agent-memory-2026-07-22"}


class RoundRobinProxy:
    """A TCP proxy on a free loopback port: each client connection goes to the next upstream that
    accepts one (a dead replica is skipped), bytes piped both ways until either side closes."""

    def __init__(self, ports: list[int]):
        self.ports = ports
        self._next = itertools.cycle(range(len(ports)))
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._conns: set[socket.socket] = set()
        self._spawn(self._accept)

    def _spawn(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self._threads.append(t)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            self._spawn(self._connect, client)

    def _connect(self, client: socket.socket) -> None:
        for _ in range(len(self.ports)):
            with self._lock:
                port = self.ports[next(self._next)]
            try:
                up = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                continue  # that replica is down: the next one
            up.settimeout(None)
            with self._lock:
                self._conns |= {client, up}
            self._spawn(self._pipe, client, up)
            self._pipe(up, client)
            return
        client.close()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
                with self._lock:
                    self._conns.discard(s)

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        with self._lock:
            conns = list(self._conns)
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(5)


@pytest.fixture
def pg_db(pg_cluster):
    url = pg_cluster.create_database("replicas")
    try:
        yield url
    finally:
        pg_cluster.drop_database(url)


def test_three_replicas_one_killed_lose_nothing_acknowledged(tmp_path, pg_db):
    replicas = [ServiceProcess(tmp_path / f"r{i}", db_url=pg_db) for i in range(3)]
    proxy = RoundRobinProxy([r.port for r in replicas])
    try:
        stores = [replicas[0].create_store(f"store {i}")["id"] for i in range(2)]
        acked: dict[str, list[tuple[str, str, str]]] = {}  # writer -> [(store, memory id, version id)]
        seen: dict[str, list[int]] = {}  # reader -> counters seen, per store in turn
        failures: list[str] = []
        stop, killed, enough = threading.Event(), threading.Event(), threading.Event()
        lock = threading.Lock()

        def client() -> httpx.Client:
            # no keep-alive: every request is a new connection, so the proxy spreads them
            return httpx.Client(
                base_url=proxy.url,
                headers={"x-api-key": replicas[0].admin_key, **MEMORY, "connection": "close"},
                timeout=10,
                limits=httpx.Limits(max_keepalive_connections=0),
            )

        def writer(name: str, store: str) -> None:
            mine = acked.setdefault(name, [])
            with client() as c:
                for i in range(400):
                    if stop.is_set():
                        return
                    try:
                        r = c.post(f"/v1/memory_stores/{store}/memories",
                                   json={"path": f"/{name}/{i}", "content": f"{name} {i}"})  # fmt: skip
                    except httpx.HTTPError:
                        continue  # the replica died under us: not acknowledged, may or may not exist
                    if r.status_code != 200:
                        with lock:
                            failures.append(f"{name}: {r.status_code} {r.text[:200]}")
                        continue
                    mine.append((store, r.json()["id"], r.json()["memory_version_id"]))
                    if sum(len(v) for v in acked.values()) >= 60:
                        enough.set()

        def reader(name: str) -> None:
            last = dict.fromkeys(stores, 0)
            with client() as c:
                while not stop.is_set():
                    try:
                        r = c.get("/v1/memory_store_counters", params={"ids": ",".join(stores)})
                    except httpx.HTTPError:
                        continue
                    if r.status_code != 200:
                        continue
                    for item in r.json()["data"]:
                        sid, value = item["memory_store_id"], item["counter"]
                        if value < last[sid]:
                            with lock:
                                failures.append(f"{name}: counter of {sid} went from {last[sid]} to {value}")
                        last[sid] = value
                    seen.setdefault(name, []).append(sum(last.values()))

        threads = [threading.Thread(target=writer, args=(f"w{k}", stores[k % 2])) for k in range(4)]
        threads += [threading.Thread(target=reader, args=(f"r{k}",)) for k in range(2)]
        for t in threads:
            t.start()
        assert enough.wait(60), "the writers did not get going"
        replicas[1].kill()  # SIGKILL, mid-run
        killed.set()
        before = sum(len(v) for v in acked.values())
        while sum(len(v) for v in acked.values()) < before + 60 and all(t.is_alive() for t in threads[:4]):
            threading.Event().wait(0.1)
        stop.set()
        for t in threads:
            t.join(30)
        assert not failures, failures[:5]
        assert sum(len(v) for v in acked.values()) >= before + 60  # writes went on without replica 1

        replicas[1].start()  # back on the same port: every replica answers again
        counters = dict(rows(replicas[0], "SELECT id, counter FROM versions"))
        for sid in stores:
            ordered = [
                c
                for (c,) in rows(
                    replicas[0], "SELECT counter FROM versions WHERE store_id = ? ORDER BY counter", (sid,)
                )
            ]
            assert ordered == list(range(1, len(ordered) + 1))  # every value once, none skipped
        for writes in acked.values():
            # one writer's acknowledged writes got increasing counters, in the order acknowledged
            for sid in stores:
                mine = [counters[v] for s, _, v in writes if s == sid]
                assert mine == sorted(mine) and len(set(mine)) == len(mine)
        feeds = []
        for r in replicas:
            with r.admin_client() as c:
                feed = {}
                for sid in stores:
                    body = c.get(f"/v1/memory_stores/{sid}/changes", params={"since": 0}).json()
                    feed[sid] = (body["counter"], body["changes"])
                feeds.append(feed)
                for writes in acked.values():
                    for sid, mid, vid in writes:
                        m = c.get(f"/v1/memory_stores/{sid}/memories/{mid}").json()
                        assert m["memory_version_id"] == vid  # acknowledged: there, as acknowledged
        assert feeds[0] == feeds[1] == feeds[2]
        for sid in stores:
            assert feeds[0][sid][0] == len(feeds[0][sid][1])  # one create per counter value
    finally:
        proxy.close()
        for r in replicas:
            r.stop()
