"""A listing page's GET on trio's sockets (memfs/client/plain_get.py), past httpcore and h11: the same
request and the same outcomes as before (tests/client/test_list_get.py), and the framing a server
may choose: content-length, chunked, a body ended by the connection's close; a kept connection
the server closed meanwhile sent again on a new one; a broken answer Unreachable, never a page.
Real sockets: a `memfs serve --hosted-api` subprocess, or the HTTP stub (tests/support/http_stub.py) writing raw bytes."""

from __future__ import annotations

import json
import socket

import pytest
import trio

from memfs.client import StoreClient, Unreachable
from memfs.client.plain_get import PlainGet, PlainHTTPError
from tests.support.http_stub import HttpStub
from tests.support.service import ServiceProcess
from tests.support.tls import make_cert

pytestmark = [pytest.mark.trio, pytest.mark.timeout(60)]


def _scripted(script: list[tuple[bytes, bool]]) -> HttpStub:
    """Answers each request with the next scripted raw bytes; `close` after it ends that
    connection; with the script done, a connection is closed unanswered."""
    left = list(script)

    def answer(_request, conn) -> bool:
        if not left:
            return True
        data, close = left.pop(0)
        conn.sendall(data)
        return close

    return HttpStub(answer)


def _page(paths: list[str], cursor: str | None = None) -> bytes:
    data = [{"type": "memory", "id": f"mem_{p}", "path": p, "content_sha256": "0" * 64} for p in paths]
    return json.dumps({"data": data, "next_page": cursor}).encode()


def _ok(body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        + extra
        + (b"content-length: %d\r\n\r\n" % len(body))
        + body
    )


def _chunked(body: bytes) -> bytes:
    mid = len(body) // 2
    chunks = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in (body[:mid], body[mid:]))
    return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunks + b"0\r\nx-trailer: t\r\n\r\n"


async def test_pages_go_past_httpx_on_kept_connections_and_list_every_memory(tmp_path, monkeypatch):
    svc = ServiceProcess(tmp_path / "svc", hosted_api=True)
    try:
        sid = svc.create_store("plain")["id"]
        paths = [f"/d{i % 5}/n{i:03d}.md" for i in range(700)]
        with svc.admin_client() as admin:
            for p in paths:
                assert (
                    admin.post(
                        f"/v1/memory_stores/{sid}/memories", json={"path": p, "content": p}
                    ).status_code
                    < 300
                )

        async def no_httpx(*a, **kw):
            raise AssertionError("a listing page went through httpx")

        client = StoreClient(svc.base_url, svc.admin_key, concurrency=4)
        monkeypatch.setattr(client._http, "request", no_httpx)
        try:
            for _ in range(3):
                listing = await client.list_memories(sid, known={"/": 700})
                assert [m["path"] for m in listing.items] == sorted(paths) and not listing.duplicates
            plain = client._pools._plain
            assert plain is not None and plain.connections_opened <= 4  # kept, never more than the slots
            assert client.requests_sent == 3 * listing.requests
        finally:
            await client.aclose()
    finally:
        svc.stop()


async def test_chunked_and_close_delimited_bodies_and_a_closed_kept_connection():
    one, two = _page(["/a.md"]), _page(["/b.md", "/c.md"])
    server = _scripted(
        [
            (_chunked(one), False),
            (_ok(two, b"connection: close\r\n"), True),  # the server says so: not kept
            (b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + one, True),  # ends with the close
            (_ok(two), True),  # kept by the client, then closed by the server: the next is sent anew
            (_ok(one), False),
        ]
    )
    client = StoreClient(server.url, "tok")
    try:
        got = [[m["path"] for m in (await client.list_memories("memstore_x")).items] for _ in range(5)]
    finally:
        await client.aclose()
        server.close()
    assert got == [["/a.md"], ["/b.md", "/c.md"], ["/a.md"], ["/b.md", "/c.md"], ["/a.md"]]
    assert server.connections == 4 and len(server.requests) == 5
    head = server.requests[0].head.decode("latin-1").split("\r\n")
    assert head[0] == "GET /v1/memory_stores/memstore_x/memories?view=basic&limit=100&depth=0 HTTP/1.1"
    fields = dict(line.split(": ", 1) for line in head[1:])
    assert fields["authorization"] == "Bearer tok" and fields["accept-encoding"] == "gzip"
    assert fields["host"] == f"127.0.0.1:{server.port}" and fields["anthropic-beta"]


@pytest.mark.parametrize(
    "answer",
    [
        b'HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n{"data": []',  # cut short
        b'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{"dat',  # a chunk cut short
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",  # not a chunk size
        b"SSH-2.0-OpenSSH\r\n\r\n",  # not HTTP
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}",  # two lengths
        b"",  # closed without a word, on a new connection
    ],
)
async def test_a_broken_answer_is_unreachable_never_a_page(answer):
    server = _scripted([(answer, True)])
    client = StoreClient(server.url, "tok", timeout=5)
    try:
        with pytest.raises(Unreachable):
            await client.list_memories("memstore_x")
    finally:
        await client.aclose()
        server.close()


async def test_a_silent_server_times_out():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts (the kernel does), never reads or answers
    get = PlainGet("http", "127.0.0.1", listener.getsockname()[1], keep=1)
    try:
        with pytest.raises(PlainHTTPError, match="timed out"):
            await get.get(b"/", [(b"host", b"x")], {"connect": 2.0, "read": 0.3, "write": 2.0})
    finally:
        await get.aclose()
        listener.close()


async def test_a_cancelled_get_leaves_no_connection_to_reuse():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    get = PlainGet("http", "127.0.0.1", listener.getsockname()[1], keep=1)
    try:
        with trio.move_on_after(0.2):
            await get.get(b"/", [(b"host", b"x")], {"connect": 2.0, "read": None, "write": 2.0})
        assert get._idle == [] and get.connections_opened == 1
    finally:
        await get.aclose()
        listener.close()


async def test_a_kept_connection_closed_after_the_readability_test_is_sent_anew():
    """The server may close a kept connection between the test and the request's write: the
    write lands in the kernel, the answer is the close. Then the GET is sent on a new connection;
    a failure on a new connection is not retried (the next test)."""
    body = _page(["/a.md"])
    server = _scripted(
        [(_ok(body), True), (_ok(body), False)]
    )  # the first connection closes after its answer
    get = PlainGet("http", "127.0.0.1", server.port, keep=2)
    timeout = {"connect": 5.0, "read": 5.0, "write": 5.0}
    try:
        assert (await get.get(b"/", [(b"host", b"x")], timeout))[2] == body
        assert len(get._idle) == 1
        await trio.sleep(0.2)  # the server's close has arrived
        kept = get._idle[0]

        class NotYet:  # the close is not seen by the test (it comes just after it)
            def __init__(self, sock):
                self._sock = sock

            def is_readable(self):
                return False

        kept.raw = type("Raw", (), {"socket": NotYet(kept.raw.socket)})()
        status, _headers, got = await get.get(b"/", [(b"host", b"x")], timeout)
        assert (status, got) == (200, body) and get.connections_opened == 2
    finally:
        await get.aclose()
        server.close()


async def test_warmed_connections_carry_the_gets_that_follow_and_a_refused_one_is_the_gets_to_report():
    # `PlainGet.warm` (a mount's daemon, while the session is read): the connections are open
    # before the first GET, which then opens none; never more than `keep`.
    body = _page(["/a.md"])
    server = _scripted([(_ok(body), False), (_ok(body), False)])
    get = PlainGet("http", "127.0.0.1", server.port, keep=2)
    timeout = {"connect": 5.0, "read": 5.0, "write": 5.0}
    try:
        await get.warm(5, timeout)
        assert get.connections_opened == 2 and len(get._idle) == 2
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(get.get, b"/", [(b"host", b"x")], timeout)
        assert get.connections_opened == 2 and server.connections == 2
    finally:
        await get.aclose()
        server.close()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens: the warm opens nothing, and says nothing
    refused = PlainGet("http", "127.0.0.1", port, keep=2)
    await refused.warm(2, timeout)
    assert refused.connections_opened == 0 and refused._idle == []
    with pytest.raises(PlainHTTPError, match="connect"):
        await refused.get(b"/", [(b"host", b"x")], timeout)


async def test_a_new_connection_closed_without_an_answer_is_an_error_not_retried():
    server = _scripted([(b"", True), (_ok(_page(["/a.md"])), False)])
    get = PlainGet("http", "127.0.0.1", server.port, keep=2)
    try:
        with pytest.raises(PlainHTTPError):
            await get.get(b"/", [(b"host", b"x")], {"connect": 5.0, "read": 5.0, "write": 5.0})
        assert get.connections_opened == 1
    finally:
        await get.aclose()
        server.close()


async def test_pages_over_https_with_a_private_ca_and_a_refused_certificate(tmp_path, monkeypatch):
    """TLS as httpx does it: its context (SSL_CERT_FILE names the trusted CA), ALPN http/1.1, the
    host's name checked; without the CA the certificate is refused and the listing Unreachable."""
    ca, cert, key = make_cert(tmp_path / "tls")
    svc = ServiceProcess(
        tmp_path / "svc",
        hosted_api=True,
        extra_args=("--certfile", str(cert), "--keyfile", str(key)),
    )
    try:
        assert svc.base_url.startswith("https://")
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        sid = svc.create_store("tls")["id"]
        paths = [f"/t{i % 3}/n{i:03d}.md" for i in range(250)]
        with svc.admin_client() as admin:
            for p in paths:
                assert (
                    admin.post(
                        f"/v1/memory_stores/{sid}/memories", json={"path": p, "content": p}
                    ).status_code
                    < 300
                )
        client = StoreClient(svc.base_url, svc.admin_key, concurrency=4)
        try:
            for _ in range(2):
                listing = await client.list_memories(sid, known={"/": 250})
                assert [m["path"] for m in listing.items] == sorted(paths)
            assert client._pools._plain.connections_opened <= 4
        finally:
            await client.aclose()
        monkeypatch.delenv("SSL_CERT_FILE")
        untrusting = StoreClient(svc.base_url, svc.admin_key)
        try:
            with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
                await untrusting.list_memories(sid)
        finally:
            await untrusting.aclose()
    finally:
        svc.stop()


async def test_bytes_past_an_answer_are_never_read_as_the_next_one():
    one, two = _page(["/a.md"]), _page(["/b.md"])
    forged = _ok(two)  # what a confused server (or a proxy) sent after the answer
    server = _scripted([(_ok(one) + forged, False), (_ok(one), False)])
    get = PlainGet("http", "127.0.0.1", server.port, keep=2)
    timeout = {"connect": 5.0, "read": 5.0, "write": 5.0}
    try:
        assert (await get.get(b"/", [(b"host", b"x")], timeout))[2] == one
        await trio.sleep(0.1)
        assert (await get.get(b"/", [(b"host", b"x")], timeout))[2] == one
        assert get.connections_opened == 2
    finally:
        await get.aclose()
        server.close()
