"""A slow client is cut after the configured time, and the connection cap answers the next one
(docs/OPERATIONS.md#security). Real `memfs serve`, real sockets.

Before, a connection that sent part of its headers, nothing, or part of a body stayed open for
ever, unauthenticated, and nothing capped how many there were.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.support.service import ServiceProcess

pytestmark = pytest.mark.timeout(60)

HEAD = "POST /v1/memory_stores HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\ncontent-type: application/json\r\n"


@pytest.fixture
def quick_service(tmp_path):
    svc = ServiceProcess(
        tmp_path / "svc",
        extra_args=("--header-timeout", "1", "--body-timeout", "1", "--max-header-bytes", "8192"),
    )
    yield svc
    svc.stop()


@pytest.fixture
def capped_service(tmp_path):
    svc = ServiceProcess(tmp_path / "svc", extra_args=("--max-connections", "4", "--header-timeout", "30"))
    yield svc
    svc.stop()


def connect(svc) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", svc.port), timeout=10)
    return sock


def read_until_closed(sock: socket.socket, limit: float = 10) -> tuple[bytes, float]:
    """Everything the service sends until it closes the connection, and how long that took."""
    start = time.monotonic()
    sock.settimeout(limit)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data, time.monotonic() - start


def envelope(answer: bytes) -> tuple[int, dict, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body), head.lower()


@pytest.mark.parametrize(
    "sent",
    [b"", b"GET /v1/memory_stores HTTP/1.1\r\nhost: x\r\nx-api-k"],
    ids=["nothing", "part-of-the-headers"],
)
def test_a_client_slow_with_its_headers_is_cut_after_the_header_timeout(quick_service, sent):
    with connect(quick_service) as sock:
        sock.sendall(sent)
        answer, took = read_until_closed(sock)
    status, body, head = envelope(answer)
    assert status == 408 and body["error"]["type"] == "invalid_request_error", answer
    assert body["request_id"] and b"request-id: " + body["request_id"].encode() in head
    assert took < 8, took  # cut by the 1 s timeout, not by the client giving up


def test_a_client_that_stalls_in_its_body_is_cut_after_the_body_timeout(quick_service):
    with connect(quick_service) as sock:
        sock.sendall((HEAD + f"content-length: {1024 * 1024}\r\n\r\n").encode() + b"x" * 100_000)
        answer, took = read_until_closed(sock)
    assert took < 8, (took, answer)


def test_headers_past_the_cap_are_refused_with_the_envelope(quick_service):
    with connect(quick_service) as sock:
        sock.sendall(b"GET /v1/memory_stores?q=" + b"a" * 100_000 + b" HTTP/1.1\r\nhost: x\r\n\r\n")
        answer, _ = read_until_closed(sock)
    status, body, _ = envelope(answer)
    assert status == 431 and body["type"] == "error", answer


def test_malformed_http_gets_the_error_envelope(quick_service):
    with connect(quick_service) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nbad header line\r\n\r\n")
        answer, _ = read_until_closed(sock)
    status, body, head = envelope(answer)
    assert status == 400 and body["error"]["type"] == "invalid_request_error", answer
    assert b"request-id: req_" in head


def test_the_connection_cap_answers_the_next_one_and_frees_with_them(capped_service):
    stalled = [connect(capped_service) for _ in range(4)]
    for sock in stalled:
        sock.sendall(b"GET /v1/memory_stores HTTP/1.1\r\nhost: x\r\n")  # and nothing more
    time.sleep(0.3)
    with connect(capped_service) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        answer, _ = read_until_closed(sock)
    status, body, _ = envelope(answer)
    assert status == 503 and body["type"] == "error", answer
    for sock in stalled:
        sock.close()
    deadline = time.monotonic() + 10
    while True:
        with connect(capped_service) as sock:
            sock.sendall(b"GET /v1/memory_stores HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            answer, _ = read_until_closed(sock)
        if not answer.startswith(b"HTTP/1.1 503") or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert answer.startswith(b"HTTP/1.1 400") and b"agent-memory" in answer, answer  # the app answers
