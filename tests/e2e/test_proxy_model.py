"""The delay proxy's model (tests/support/proxy.py), which the network bench and tests rely on:
each chunk is delivered half a round trip later in each direction, in order and with the spacing
it had; a new connection waits one round trip before its first byte is read. Real sockets, the
HTTP stub (tests/support/http_stub.py) upstream, the proxy in this process (`Proxy`) and in its own (`ProxyProcess`)."""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.http_stub import HttpStub
from tests.support.proxy import Proxy, ProxyProcess

RTT = 0.2
SLACK = 0.06  # a loaded two-core machine's scheduling, never a whole half round trip


class _Upstream:
    """Answers each request with a content-length answer written in three parts 0.1 s apart (not
    chunked), recording when each request arrived."""

    GAP = 0.1

    def __init__(self) -> None:
        self.got: list[float] = []
        self.stub = HttpStub(self._answer)
        self.url = self.stub.url

    def _answer(self, _request, conn) -> None:
        self.got.append(time.monotonic())
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\naa")
        time.sleep(self.GAP)
        conn.sendall(b"bb")
        time.sleep(self.GAP)
        conn.sendall(b"cc")

    def close(self) -> None:
        self.stub.close()


def _exchange(s: socket.socket) -> tuple[float, list[tuple[float, bytes]]]:
    """Send one request; (when sent, [(when each part of the answer arrived, its bytes)])."""
    sent = time.monotonic()
    s.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    parts: list[tuple[float, bytes]] = []
    data = b""
    while not data.endswith(b"cc"):
        chunk = s.recv(65536)
        assert chunk, "the proxy closed the connection"
        parts.append((time.monotonic(), chunk))
        data += chunk
    assert data.endswith(b"\r\n\r\naabbcc")
    return sent, parts


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["thread", "process"])
def test_each_chunk_arrives_half_a_round_trip_later_in_order_and_a_connection_waits_one(kind):
    upstream = _Upstream()
    proxy = Proxy(upstream.url, rtt=RTT) if kind == "thread" else ProxyProcess(upstream.url, rtt=RTT)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port)) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for first in (True, False):
                sent, parts = _exchange(s)
                reached = upstream.got[-1] - sent
                # the request reaches the service half a round trip later (plus the handshake's
                # round trip on a new connection)
                want = RTT / 2 + (RTT if first else 0)
                assert want - 0.005 <= reached <= want + SLACK, (first, reached)
                # the answer's first bytes half a round trip after the service sent them, and the
                # rest with the spacing the service gave them, in order
                assert RTT - 0.01 + (RTT if first else 0) <= parts[0][0] - sent <= want + RTT / 2 + SLACK
                arrivals = [t for t, _ in parts]
                assert len(parts) == 3 and [c[-2:] for _, c in parts] == [b"aa", b"bb", b"cc"]
                for a, b in zip(arrivals, arrivals[1:], strict=False):
                    assert _Upstream.GAP - 0.02 <= b - a <= _Upstream.GAP + SLACK
    finally:
        if kind == "thread":
            proxy.close()
        else:
            proxy.stop()
        upstream.close()
