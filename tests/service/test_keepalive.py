"""A keep-alive connection never stalls, whatever a handler did with the request body (docs/SEMANTICS.md#d-security).

Every case sends a body the handler does not read (or reads only after an early error), then a GET
on the same client. The client allows one connection and a 1 s timeout: a stalled connection is a
`httpx.ReadTimeout`, not a slow assertion. The service may close the connection instead of
draining it; the client then reconnects, which is fine: the point is that the next request is
answered.
"""

from __future__ import annotations

import httpx
import pytest

MEMORY = {"anthropic-beta": "agent-memory-2026-07-22"}
BODY_600K = b"x" * (600 * 1024)


@pytest.fixture
def one_connection(service):
    client = httpx.Client(
        base_url=service.base_url,
        headers={"x-api-key": service.admin_key, **MEMORY},
        timeout=1.0,
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
    )
    yield client
    client.close()


def _memory(service, store: str) -> str:
    with service.admin_client() as c:
        r = c.post(f"/v1/memory_stores/{store}/memories", json={"path": "/a.md", "content": "a"})
    assert r.status_code == 200, r.text
    return r.json()["id"]


def test_archive_with_a_large_body_then_get_20_times(service, one_connection):
    store = service.create_store("keepalive")["id"]
    for i in range(20):
        r = one_connection.post(f"/v1/memory_stores/{store}/archive", content=BODY_600K)
        assert r.status_code == 200, (i, r.text)
        r = one_connection.get(f"/v1/memory_stores/{store}")
        assert r.status_code == 200, (i, r.text)
        assert r.json()["archived_at"] is not None


def test_get_and_delete_with_bodies(service, one_connection):
    store = service.create_store("keepalive")["id"]
    mem = _memory(service, store)
    for i in range(5):
        r = one_connection.request("GET", f"/v1/memory_stores/{store}/memories/{mem}", content=BODY_600K)
        assert r.status_code == 200, (i, r.text)
        r = one_connection.request("GET", f"/v1/memory_stores/{store}/memories", content=BODY_600K)
        assert r.status_code == 200, (i, r.text)
        r = one_connection.get(f"/v1/memory_stores/{store}/counter")
        assert r.status_code == 200, (i, r.text)
    r = one_connection.request("DELETE", f"/v1/memory_stores/{store}/memories/{mem}", content=BODY_600K)
    assert r.status_code == 200, r.text
    r = one_connection.get(f"/v1/memory_stores/{store}/memories/{mem}")
    assert r.status_code == 404, r.text


def test_errors_raised_before_the_body_is_read(service, one_connection):
    store = service.create_store("keepalive")["id"]
    url = f"/v1/memory_stores/{store}/memories"
    cases = [
        ({"x-api-key": "wrong"}, 401),  # authentication fails before the body is read
        ({"anthropic-beta": "nope"}, 400),  # the beta header check comes first
        ({}, 400),  # read, then refused: not JSON
    ]
    for i in range(4):
        for headers, status in cases:
            r = one_connection.post(url, content=BODY_600K, headers=headers)
            assert r.status_code == status, (i, headers, r.text)
            r = one_connection.get(f"/v1/memory_stores/{store}")
            assert r.status_code == 200, (i, headers, r.text)
        # no such endpoint, and a method the route does not allow
        r = one_connection.post("/v1/nowhere", content=BODY_600K)
        assert r.status_code == 404, r.text
        r = one_connection.put(f"/v1/memory_stores/{store}", content=BODY_600K)
        assert r.status_code == 405, r.text
        r = one_connection.get(f"/v1/memory_stores/{store}")
        assert r.status_code == 200, r.text


def test_bodies_over_1_mib_are_413_on_every_endpoint(service, one_connection):
    store = service.create_store("keepalive")["id"]
    big = b"x" * (2 * 1024 * 1024)
    for method, url in (
        ("POST", f"/v1/memory_stores/{store}/archive"),
        ("GET", f"/v1/memory_stores/{store}"),
        ("POST", f"/v1/memory_stores/{store}/memories"),
    ):
        r = one_connection.request(method, url, content=big, timeout=10.0)
        assert r.status_code == 413, (method, url, r.text)
        assert r.json()["error"]["type"] == "request_too_large"
        r = one_connection.get(f"/v1/memory_stores/{store}")
        assert r.status_code == 200, r.text
        assert r.json()["archived_at"] is None  # the refused archive did nothing


def test_chunked_bodies_without_a_length(service, one_connection):
    """A body with no Content-Length that a handler ignores: drained (small) or refused (large)."""
    store = service.create_store("keepalive")["id"]

    def chunks(total: int, size: int = 64 * 1024):
        sent = 0
        while sent < total:
            n = min(size, total - sent)
            sent += n
            yield b"y" * n

    for _ in range(3):
        r = one_connection.post(f"/v1/memory_stores/{store}/archive", content=chunks(600 * 1024))
        assert r.status_code == 200, r.text
        r = one_connection.get(f"/v1/memory_stores/{store}")
        assert r.status_code == 200, r.text
    store2 = service.create_store("keepalive-2")["id"]
    r = one_connection.post(
        f"/v1/memory_stores/{store2}/archive", content=chunks(2 * 1024 * 1024), timeout=10.0
    )
    assert r.status_code == 413, r.text
    r = one_connection.get(f"/v1/memory_stores/{store2}")
    assert r.status_code == 200, r.text
    assert r.json()["archived_at"] is None
