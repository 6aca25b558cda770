"""A listing page's GET (memfs/client/api.py `StoreClient._get`): with the client's own pools it is a plain GET on
trio's sockets (memfs/client/plain_get.py, tests/client/test_plain_get.py), past httpx's client layers and
httpcore (PERFORMANCE.md, network section), and must still be the same
request with the same outcomes: the client's headers, gzip decoded, an unasked encoding refused,
a short retry-after retried, a broken connection Unreachable, any prefix name carried as itself.
Real sockets: a `memfs serve --hosted-api` subprocess, or the HTTP stub (tests/support/http_stub.py)."""

from __future__ import annotations

import gzip
import json

import pytest

from memfs.client import StoreClient, Unreachable
from memfs.protocol import COUNTER_HEADER
from tests.support.http_stub import answering
from tests.support.service import ServiceProcess

pytestmark = [pytest.mark.trio, pytest.mark.timeout(60)]

ODD = ["/a b/", "/a&b=c/", "/p+q/", "/h#1/", "/pct%41/", "/q?x/", "/ünï/", "/a&b=c/x y+z%/"]


async def test_listing_pages_skip_httpxs_client_and_list_every_memory_once(tmp_path, monkeypatch):
    svc = ServiceProcess(tmp_path / "svc", hosted_api=True)
    try:
        admin = svc.admin_client()
        sid = svc.create_store("odd")["id"]
        paths = []
        for prefix in ODD:
            for i in range(130 if prefix == "/a&b=c/x y+z%/" else 12):  # one prefix over a page
                paths.append(f"{prefix}n{i:03d}.md")
        for p in paths:
            r = admin.post(f"/v1/memory_stores/{sid}/memories", json={"path": p, "content": p})
            assert r.status_code < 300, r.text
        admin.close()

        async def no_httpx(*a, **kw):
            raise AssertionError("a listing page went through httpx's client")

        client = StoreClient(svc.base_url, svc.admin_key)
        monkeypatch.setattr(client._http, "request", no_httpx)
        try:
            listing = await client.list_memories(sid, known={"/": len(paths)})
        finally:
            await client.aclose()
        assert sorted(m["path"] for m in listing.items) == sorted(paths)
        assert not listing.duplicates and listing.requests >= len(ODD)
        assert listing.counters == set()  # the hosted API sends no counter header
    finally:
        svc.stop()


def _page(paths: list[str]) -> bytes:
    data = [
        {"type": "memory", "id": f"mem_{i}", "path": p, "content_sha256": "0" * 64}
        for i, p in enumerate(paths)
    ]
    return json.dumps({"data": data, "next_page": None}).encode()


async def test_a_gzip_page_is_decoded_with_the_clients_headers_and_an_unasked_encoding_is_refused():
    server = answering(
        [
            (
                200,
                {"content-encoding": "gzip", COUNTER_HEADER: "7"},
                gzip.compress(_page(["/a.md", "/b.md"])),
            ),
            (200, {"content-encoding": "br"}, b"\x00\x01"),
        ]
    )
    client = StoreClient(server.url, "tok-123")
    try:
        listing = await client.list_memories("memstore_x")
        assert [m["path"] for m in listing.items] == ["/a.md", "/b.md"] and listing.counters == {7}
        with pytest.raises(Unreachable, match="encoding"):
            await client.list_memories("memstore_x")
    finally:
        await client.aclose()
        server.close()
    asked = server.requests[0].headers
    assert asked["authorization"] == "Bearer tok-123" and asked["anthropic-beta"]
    assert asked["host"] == server.url.removeprefix("http://") and asked["accept-encoding"] == "gzip"


async def test_a_short_retry_after_on_a_page_is_retried_and_a_dropped_connection_is_unreachable():
    busy = json.dumps(
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    ).encode()
    server = answering(
        [
            (429, {"retry-after": "0.1", "content-type": "application/json"}, busy),
            (200, {}, _page(["/c.md"])),
            (
                404,
                {"content-type": "application/json"},
                b'{"type":"error","error":{"type":"not_found_error","message":"no"}}',
            ),
            ("reset", {}, b""),
        ]
    )
    client = StoreClient(server.url, "tok", timeout=5)
    try:
        listing = await client.list_memories("memstore_x")
        assert [m["path"] for m in listing.items] == ["/c.md"] and client.retried == 1
        with pytest.raises(Exception) as err:
            await client.list_memories("memstore_x")
        assert getattr(err.value, "status", None) == 404 and err.value.type == "not_found_error"
        with pytest.raises(Unreachable):
            await client.list_memories("memstore_x")
    finally:
        await client.aclose()
        server.close()
