"""The watch (docs/SEMANTICS.md#d-counter): `GET /v1/memory_store_watch?known=ID:N,…&wait=S`, on both backends.

Real `memfs serve` processes: one, and two on one database (the second process's commit must
wake a watch held on the first: LISTEN/NOTIFY on PostgreSQL, the change marker on SQLite).
"""

from __future__ import annotations

import base64
import json
import signal
import socket
import threading
import time

import httpx
import pytest
import trio

from memfs.client import StoreClient
from tests.support.service import ServiceProcess

pytestmark = pytest.mark.timeout(90)
WOKEN_WITHIN_S = (
    0.5  # the promised ~100 ms (docs/SEMANTICS.md#d-counter), with room for a loaded two-core test machine
)


def watch(c: httpx.Client, known: dict[str, int], wait: float) -> httpx.Response:
    params = {"known": ",".join(f"{s}:{n}" for s, n in known.items()), "wait": str(wait)}
    return c.get("/v1/memory_store_watch", params=params, timeout=wait + 10)


def write_later(svc: ServiceProcess, store: str, path: str, delay: float, done: dict) -> threading.Thread:
    def go() -> None:
        time.sleep(delay)
        with svc.admin_client() as c:
            r = c.post(f"/v1/memory_stores/{store}/memories", json={"path": path, "content": "x"})
        done["at"] = time.monotonic()
        done["status"] = r.status_code

    t = threading.Thread(target=go)
    t.start()
    return t


def test_answers_at_once_when_a_counter_differs_and_unchanged_after_the_wait(service):
    a, b = service.create_store("a")["id"], service.create_store("b")["id"]
    with service.admin_client() as c:
        c.post(f"/v1/memory_stores/{b}/memories", json={"path": "/x", "content": "1"})
        started = time.monotonic()
        r = watch(c, {a: 0, b: 0}, 30)
        assert time.monotonic() - started < 5  # not held
        assert r.status_code == 200, r.text
        assert r.json() == {
            "type": "memory_store_watch",
            "status": "changed",
            "data": [
                {"type": "memory_store_counter", "memory_store_id": a, "counter": 0},
                {"type": "memory_store_counter", "memory_store_id": b, "counter": 1},
            ],
        }
        started = time.monotonic()
        r = watch(c, {a: 0, b: 1}, 0.3)
        assert r.json()["status"] == "unchanged" and time.monotonic() - started >= 0.3


def test_a_held_watch_wakes_when_one_store_moves(service):
    a, b = service.create_store("a")["id"], service.create_store("b")["id"]
    done: dict = {}
    with service.admin_client() as c:
        writer = write_later(service, b, "/new", 0.5, done)
        r = watch(c, {a: 0, b: 0}, 30)
        woken = time.monotonic()
        writer.join()
    assert done["status"] == 200
    assert r.json()["status"] == "changed"
    assert [d["counter"] for d in r.json()["data"]] == [0, 1]
    assert woken - done["at"] < WOKEN_WITHIN_S, woken - done["at"]


def test_a_commit_on_another_process_wakes_the_watch(tmp_path, service_db):
    """Two `memfs serve` on one database: a watch held on the first, the write on the second."""
    db = service_db or f"sqlite:///{tmp_path}/shared/store.db"
    one = ServiceProcess(tmp_path / "one", db_url=db)
    two = ServiceProcess(tmp_path / "two", db_url=db)
    try:
        store = one.create_store("shared")["id"]
        for round_ in range(3):  # several wake-ups on one process, the listener stays live
            done: dict = {}
            with one.admin_client() as c:
                writer = write_later(two, store, f"/from-two-{round_}", 0.4, done)
                r = watch(c, {store: round_}, 30)
                woken = time.monotonic()
                writer.join()
            assert r.json()["status"] == "changed" and r.json()["data"][0]["counter"] == round_ + 1
            assert woken - done["at"] < WOKEN_WITHIN_S, (round_, woken - done["at"])
    finally:
        one.stop()
        two.stop()


def test_sigterm_ends_held_watches_at_once(tmp_path, service_db):
    svc = ServiceProcess(tmp_path / "svc", db_url=service_db)
    try:
        store = svc.create_store("s")["id"]
        out: dict = {}

        def held() -> None:
            with svc.admin_client() as c:
                out["r"] = watch(c, {store: 0}, 60)

        t = threading.Thread(target=held)
        t.start()
        time.sleep(0.5)  # the watch is held by now (nothing writes)
        started = time.monotonic()
        svc.proc.send_signal(signal.SIGTERM)
        t.join(timeout=10)
        assert svc.proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 2.0
        assert out["r"].status_code == 200 and out["r"].json()["status"] == "unchanged"
    finally:
        svc.stop()


def test_deleting_a_watched_store_ends_the_watch_with_404(service):
    store = service.create_store("doomed")["id"]
    out: dict = {}

    def held() -> None:
        with service.admin_client() as c:
            out["r"] = watch(c, {store: 0}, 30)

    t = threading.Thread(target=held)
    t.start()
    time.sleep(0.5)
    with service.admin_client() as c:
        assert c.delete(f"/v1/memory_stores/{store}").status_code == 200
    deleted = time.monotonic()
    t.join(timeout=40)
    assert out["r"].status_code == 404
    assert time.monotonic() - deleted < 5


@pytest.mark.timeout(120)
def test_a_thousand_held_watches_fit_in_100_mib_and_all_wake(service):
    store = service.create_store("many")["id"]
    req = (
        f"GET /v1/memory_store_watch?known={store}:0&wait=60 HTTP/1.1\r\nhost: x\r\n"
        f"x-api-key: {service.admin_key}\r\nanthropic-beta: agent-memory-2026-07-22\r\n\r\n"
    ).encode()
    socks = []
    try:
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", service.port))
            s.sendall(req)
            socks.append(s)
        deadline = time.monotonic() + 30
        with service.admin_client() as c:
            while time.monotonic() < deadline:  # bounded: until every request is held
                if "memfs_watches_held 1000.0" in c.get("/metrics").text:
                    break
                time.sleep(0.2)
            assert "memfs_watches_held 1000.0" in c.get("/metrics").text
            rss_mib = rss_of(service.proc.pid)
            assert rss_mib < 100, rss_mib
            c.post(f"/v1/memory_stores/{store}/memories", json={"path": "/a", "content": "x"})
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
        assert answered == 1000
    finally:
        for s in socks:
            s.close()


def rss_of(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_bad_watches_and_scopes(service):
    a = service.create_store("a")["id"]
    b = service.create_store("b")["id"]
    session = service.create_session([(a, "read_only")])
    with service.admin_client() as c:
        for params in (
            {},
            {"known": ""},
            {"known": a},
            {"known": f"{a}:x"},
            {"known": f"{a}:-1"},
            {"known": f"{a}:1,{a}:2"},
            {"known": f"{a}:0", "wait": "61"},
            {"known": f"{a}:0", "wait": "-1"},
            {"known": f"{a}:0", "wait": "nan"},
            {"known": f"{a}:0", "wait": "soon"},
        ):
            r = c.get("/v1/memory_store_watch", params=params)
            assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", (
                params,
                r.text,
            )
        r = c.get("/v1/memory_store_watch", params={"known": "memstore_nope:0", "wait": "0"})
        assert r.status_code == 404
        assert (
            c.get("/v1/memory_store_watch", params={"known": f"{a}:0", "wait": "0"}).json()["status"]
            == "unchanged"
        )
    token = json.loads(base64.urlsafe_b64decode(session["work_secret"]))["sessions_token"]
    headers = {"authorization": f"Bearer {token}", "anthropic-beta": "agent-memory-2026-07-22"}
    with httpx.Client(base_url=service.base_url, headers=headers) as s:
        assert s.get("/v1/memory_store_watch", params={"known": f"{a}:0", "wait": "0"}).status_code == 200
        assert (
            s.get("/v1/memory_store_watch", params={"known": f"{a}:0,{b}:0", "wait": "0"}).status_code == 404
        )


def test_the_client_method(service):
    a = service.create_store("a")["id"]

    async def main() -> tuple:
        async with StoreClient(service.base_url, service.admin_key) as client:
            first = await client.watch({a: 0}, wait=0.2)
            async with trio.open_nursery() as nursery:
                out = {}

                async def held() -> None:
                    out["r"] = await client.watch({a: 0}, wait=30)

                nursery.start_soon(held)
                await trio.sleep(0.3)
                await trio.to_thread.run_sync(
                    lambda: service.admin_client().post(f"/v1/memory_stores/{a}/memories",
                                                        json={"path": "/p", "content": "c"})
                )  # fmt: skip
            return first, out["r"]

    first, second = trio.run(main)
    assert first == (False, {a: 0})
    assert second == (True, {a: 1})


def test_no_watch_on_a_hosted_api_service(tmp_path):
    svc = ServiceProcess(tmp_path / "h", hosted_api=True)
    try:
        store = svc.create_store("h")["id"]

        async def main():
            async with StoreClient(svc.base_url, svc.admin_key) as client:
                return await client.watch({store: 0}, wait=1)

        assert trio.run(main) is None
    finally:
        svc.stop()


def test_a_watch_checks_the_token_as_it_is_now(service):
    """Watches are held by the counter fast path (counter_path.py), whose first read checks the
    token in the database: an archived session's token is refused at once, with the full path's
    envelope, and a watch with the token still works before that."""
    a = service.create_store("a")["id"]
    session = service.create_session([(a, "read_only")])
    token = json.loads(base64.urlsafe_b64decode(session["work_secret"]))["sessions_token"]
    headers = {"authorization": f"Bearer {token}", "anthropic-beta": "agent-memory-2026-07-22"}
    with httpx.Client(base_url=service.base_url, headers=headers) as s:
        r = watch(s, {a: 0}, 0)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.headers["request-id"].startswith("req_")
        assert r.json() == {
            "type": "memory_store_watch",
            "status": "unchanged",
            "data": [{"type": "memory_store_counter", "memory_store_id": a, "counter": 0}],
        }
        with service.admin_client() as c:
            assert (
                c.post(f"/v1/memory_stores/{a}/memories", json={"path": "/x", "content": "1"}).status_code
                == 200
            )
        assert watch(s, {a: 0}, 5).json()["data"][0]["counter"] == 1  # changed: answered at once
        with service.admin_client("managed-agents-2026-04-01") as admin:
            assert admin.post(f"/v1/sessions/{session['id']}/archive").status_code == 200
        r = watch(s, {a: 1}, 5)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert r.json()["request_id"] == r.headers["request-id"]
