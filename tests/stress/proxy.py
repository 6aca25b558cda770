"""A small fault-injecting HTTP/1.1 proxy for loopback tests (threads, no dependencies).

    with FaultProxy(service.base_url) as proxy:
        proxy.add("POST", r"/memories$", "lose_answer", times=1)
        ... point the mount at proxy.url ...

Each client request is read whole (headers + Content-Length body), matched against the rules
(first rule with `times` left wins) and then:

- ``forward``      — sent to the service on a fresh connection (``Connection: close``), answer relayed.
- ``delay``        — like forward, after sleeping ``seconds``.
- ``status``       — answered by the proxy with ``code`` (429/500/503...) in the API's error envelope;
                     the service never sees it.
- ``reset``        — the connection is reset (RST) before the request reaches the service.
- ``lose_answer``  — the request *reaches the service*, its answer is dropped and the client's
                     connection reset: a write that happened whose answer was lost.
- ``reset_mid_body`` — forwarded; the answer's headers and half of its body are relayed, then RST.
- ``blackhole``    — accepted and read, never answered (held until the proxy stops or ``release()``).

Every request is logged in ``proxy.log`` as (time, method, path, action) so tests can count ticks.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

ACTIONS = ("forward", "delay", "status", "reset", "lose_answer", "reset_mid_body", "blackhole")


@dataclass
class Rule:
    method: str  # "*" for any
    path: re.Pattern
    action: str
    times: int | None = None  # None: forever
    code: int = 503
    seconds: float = 0.0
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        return (self.method == "*" or self.method == method) and bool(self.path.search(path))


@dataclass
class Entry:
    at: float
    method: str
    path: str
    action: str


@dataclass
class FaultProxy:
    upstream: str
    rules: list[Rule] = field(default_factory=list)
    log: list[Entry] = field(default_factory=list)

    def __post_init__(self) -> None:
        u = urlsplit(self.upstream)
        self._up = (u.hostname or "127.0.0.1", u.port or 80)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._generation = 0  # bumped by release(): black holes of older generations let go
        self._socks: set[socket.socket] = set()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)
        self._thread.start()

    # -- control ----------------------------------------------------------------------------
    def add(self, method: str, path: str, action: str, *, times: int | None = None, code: int = 503,
            seconds: float = 0.0) -> Rule:
        assert action in ACTIONS, action
        rule = Rule(method, re.compile(path), action, times, code, seconds)
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()
        self.release()

    def release(self) -> None:
        """Let black-holed connections go (they are closed without an answer)."""
        with self._lock:
            self._generation += 1

    def faults(self) -> int:
        """How many requests got something other than a plain forward."""
        with self._lock:
            return sum(1 for e in self.log if e.action != "forward")

    def count(self, method: str, path_re: str, *, since: float = 0.0) -> int:
        pat = re.compile(path_re)
        with self._lock:
            return sum(1 for e in self.log if e.at >= since and e.method == method and pat.search(e.path))

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() (close alone does not)
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        self._thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._socks.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _pick(self, method: str, path: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, path):
                    if rule.times is not None:
                        rule.times -= 1
                    rule.hits += 1
                    return rule
        return None

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        try:
            while not self._stop.is_set():
                request, buf = _read_request(conn, buf)
                if request is None:
                    return
                head, body = request
                method, target = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")[:2]
                path = urlsplit(target).path
                rule = self._pick(method, path)
                action = rule.action if rule else "forward"
                with self._lock:
                    self.log.append(Entry(time.monotonic(), method, path, action))
                if action == "blackhole":
                    generation = self._generation
                    while not self._stop.wait(0.1) and self._generation == generation:
                        pass
                    return
                if action == "reset":
                    _rst(conn)
                    return
                if action == "status":
                    conn.sendall(_error_response(rule.code))
                    continue
                if action == "delay":
                    time.sleep(rule.seconds)
                answer = self._forward(head, body)
                if answer is None:  # the service is down: what a client sees is a reset
                    _rst(conn)
                    return
                if action == "lose_answer":
                    _rst(conn)
                    return
                if action == "reset_mid_body":
                    split = answer.find(b"\r\n\r\n") + 4
                    cut = split + max(1, (len(answer) - split) // 2)
                    conn.sendall(answer[:cut])
                    time.sleep(0.05)
                    _rst(conn)
                    return
                conn.sendall(answer)
                if b"\r\nconnection: close" in answer.split(b"\r\n\r\n", 1)[0].lower():
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._socks.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def _forward(self, head: bytes, body: bytes) -> bytes | None:
        lines = head.split(b"\r\n")
        kept = [ln for ln in lines[1:] if ln and not ln.lower().startswith((b"connection:", b"keep-alive:"))]
        raw = b"\r\n".join([lines[0], *kept, b"Connection: close"]) + b"\r\n\r\n" + body
        try:
            up = socket.create_connection(self._up, timeout=30)
        except OSError:
            return None
        try:
            up.sendall(raw)
            answer = _read_response(up)
        except (OSError, ValueError):
            return None
        finally:
            up.close()
        if not answer:
            return None
        # We asked the service to close; tell the client the same so framing stays simple.
        head_end = answer.find(b"\r\n\r\n")
        if head_end < 0:
            return answer
        head_lines = [ln for ln in answer[:head_end].split(b"\r\n")
                      if not ln.lower().startswith(b"connection:")]
        return b"\r\n".join([*head_lines, b"connection: close"]) + answer[head_end:]


def _read_request(conn: socket.socket, buf: bytes) -> tuple[tuple[bytes, bytes] | None, bytes]:
    while b"\r\n\r\n" not in buf:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b""
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b""
        rest += chunk
    return (head, rest[:length]), rest[length:]


def _read_response(up: socket.socket) -> bytes:
    """One whole HTTP/1.1 response as raw bytes (the service may keep the connection open)."""
    buf = b""

    def need(pred) -> None:
        nonlocal buf
        while not pred():
            chunk = up.recv(65536)
            if not chunk:
                raise ValueError("upstream closed mid-response")
            buf += chunk

    need(lambda: b"\r\n\r\n" in buf)
    head_end = buf.index(b"\r\n\r\n") + 4
    headers = {}
    for line in buf[:head_end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip().lower()
    if b"content-length" in headers:
        total = head_end + int(headers[b"content-length"])
        need(lambda: len(buf) >= total)
        return buf[:total]
    if headers.get(b"transfer-encoding") == b"chunked":
        pos = head_end
        while True:
            need(lambda pos=pos: b"\r\n" in buf[pos:])
            line_end = buf.index(b"\r\n", pos)
            size = int(buf[pos:line_end].split(b";")[0], 16)
            pos = line_end + 2 + size + 2
            need(lambda pos=pos: len(buf) >= pos)
            if size == 0:
                return buf[:pos]
    while True:  # no framing: the body ends when the service closes
        chunk = up.recv(65536)
        if not chunk:
            return buf
        buf += chunk


def _error_response(code: int) -> bytes:
    kind = {429: "rate_limit_error", 500: "api_error", 503: "overloaded_error"}.get(code, "api_error")
    body = json.dumps({"type": "error", "error": {"type": kind, "message": f"injected {code}"},
                       "request_id": "req_proxy"}).encode()
    reason = {429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}.get(code, "Error")
    head = (f"HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"request-id: req_proxy\r\n" + ("retry-after: 1\r\n" if code == 429 else "") + "\r\n")
    return head.encode() + body


def _rst(conn: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), what a crashed peer or middlebox looks like."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        conn.close()
