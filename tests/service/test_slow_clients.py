"""A slow client is cut after the configured time, and the connection cap answers the next one
(docs/OPERATIONS.md#security). Real `memfs serve`, real sockets.

Before, a connection that sent part of its headers, nothing, or part of a body stayed open for
ever, unauthenticated, and nothing capped how many there were.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from tests.support.service import ServiceProcess

pytestmark = pytest.mark.timeout(60)

MEMORY_BETA = "anthropic-beta: agent-memory-2026-07-22\r\n"
BETA = {"anthropic-beta": "agent-memory-2026-07-22"}


def head(key: str | None, length: int, path: str = "/v1/memory_stores") -> bytes:
    """A POST's line and headers, `key` as its x-api-key (None: no credential)."""
    cred = f"x-api-key: {key}\r\n" if key is not None else ""
    return (
        f"POST {path} HTTP/1.1\r\nhost: x\r\n{cred}{MEMORY_BETA}content-type: application/json\r\n"
        f"content-length: {length}\r\n\r\n"
    ).encode()


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
    # the hosted API's type for a timeout (not invalid_request_error: nothing is wrong with the request)
    assert status == 408 and body["error"]["type"] == "timeout_error", answer
    assert body["request_id"] and b"request-id: " + body["request_id"].encode() in head
    assert took < 8, took  # cut by the 1 s timeout, not by the client giving up


def test_a_client_that_stalls_in_its_body_is_cut_after_the_body_timeout(quick_service):
    with connect(quick_service) as sock:
        sock.sendall(head(quick_service.admin_key, 1024 * 1024) + b"x" * 100_000)
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
    # the hosted API's type for "busy, retry later" (not invalid_request_error)
    assert status == 503 and body["error"]["type"] == "overloaded_error", answer
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


def drip(sock: socket.socket, every: float, until: float) -> None:
    """One byte every `every` seconds until `until` (monotonic) or the service closes."""
    while time.monotonic() < until:
        try:
            sock.sendall(b" ")
        except OSError:
            return
        time.sleep(every)


def test_a_body_dripped_by_an_authenticated_client_is_cut_at_the_total_deadline(quick_service):
    """A byte every 0.5 s (inside the 1 s --body-timeout each time): before, every byte re-armed the
    timer and the connection was held for as long as the client dripped. Now the body has a
    deadline (1 s, plus 1 s per 64 KiB received), and the answer is the hosted API's."""
    with connect(quick_service) as sock:
        sock.sendall(head(quick_service.admin_key, 200))
        started = time.monotonic()
        dripper = threading.Thread(target=drip, args=(sock, 0.5, started + 15), daemon=True)
        dripper.start()
        answer, _ = read_until_closed(sock, limit=20)
        took = time.monotonic() - started
    dripper.join(5)
    assert took < 4, (took, answer)  # cut at ~1 s, not after the 15 s of dripping
    status, body, head_ = envelope(answer)
    assert status == 400 and body["error"]["type"] == "invalid_request_error", answer
    assert body["error"]["details"] == {"error_code": "request_body_timeout"}, answer
    assert b"connection: close" in head_ and b"request-id: req_" in head_
    with httpx.Client(base_url=quick_service.base_url, timeout=10) as c:
        r = c.get("/v1/memory_stores", headers={"x-api-key": quick_service.admin_key, **BETA})
        assert r.status_code == 200 and r.json()["data"] == [], r.text  # nothing was created


def test_a_large_body_at_a_sane_rate_is_not_cut(quick_service):
    """The deadline grows with what arrives (1 s per 64 KiB): 600 KiB at ~200 KiB/s takes ~3 s,
    three times the 1 s --body-timeout, and is read whole and answered by the app."""
    payload = json.dumps({"name": "s", "description": "x" * (600 * 1024)}).encode()
    with connect(quick_service) as sock:
        sock.sendall(head(quick_service.admin_key, len(payload)))
        started = time.monotonic()
        for i in range(0, len(payload), 20 * 1024):
            sock.sendall(payload[i : i + 20 * 1024])
            time.sleep(0.1)
        sent_in = time.monotonic() - started
        sock.sendall(b"")
        sock.settimeout(10)
        answer = sock.recv(65536)
    assert sent_in > 2, sent_in  # slower than the body timeout alone would allow
    status, body, _ = envelope(answer)
    # the app read it and said what is wrong with it (a description that long), not a body timeout
    assert status == 400 and "details" not in body["error"] and "description" in body["error"]["message"], (
        answer
    )


@pytest.fixture
def small_service(tmp_path):
    # 21: a connection counts itself, so 20 held connections leave none for a 21st
    svc = ServiceProcess(tmp_path / "svc", extra_args=("--max-connections", "21", "--body-timeout", "3"))
    yield svc
    svc.stop()


def answered_within(sock: socket.socket, seconds: float) -> bytes:
    """What the service sent before it closed `sock` (b"" if it did not close it in time)."""
    sock.settimeout(seconds)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        return b""
    return data


def test_anonymous_drips_hold_no_connection(small_service):
    """20 clients with no key or a garbage key, each dripping a body a byte every 0.5 s (inside the
    3 s --body-timeout), against --max-connections 21: before, their bodies were read before
    authentication and every byte re-armed the body timeout, so they held every connection and
    each legitimate request was answered 503 for as long as they dripped. Now a body is read only
    once the credential is known to authenticate: each is answered 401 at once and closed."""
    svc = small_service
    stop = time.monotonic() + 8
    drippers, threads = [], []
    for i in range(20):
        sock = connect(svc)
        sock.sendall(head(None if i % 2 else "sk-garbage-key-0123456789", 1000))
        threads.append(threading.Thread(target=drip, args=(sock, 0.5, stop), daemon=True))
        threads[-1].start()
        drippers.append(sock)
    started = time.monotonic()
    answers = [answered_within(sock, max(0.1, started + 3 - time.monotonic())) for sock in drippers]
    statuses = []
    with httpx.Client(base_url=svc.base_url, headers={"x-api-key": svc.admin_key, **BETA}, timeout=10) as c:
        while time.monotonic() < stop - 1:  # while they would still be dripping
            # a new connection each time: the cap is on connections
            statuses.append(c.get("/v1/memory_stores", headers={"connection": "close"}).status_code)
            time.sleep(0.2)
    for t in threads:
        t.join(10)
    for sock in drippers:
        sock.close()
    assert statuses and set(statuses) == {200}, statuses
    for answer in answers:
        assert answer, "a dripping client without a valid key still held its connection after 3 s"
        status, body, head_ = envelope(answer)
        assert status == 401 and body["error"]["type"] == "authentication_error", answer
        assert b"connection: close" in head_
