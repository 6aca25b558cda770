"""The one HTTP stub: a loopback HTTP/1.1 server whose every answer the test writes itself.

For a server no real one can play: an upstream that answers an HTML error page, bytes forged on
purpose (a chunked body with extensions and trailers, a lying content-length), an answer written in
parts with pauses between them, a connection reset in the middle of a keep-alive run. `answer(request,
conn)` gets each request (its method, path, lower-cased headers and body, read by content-length)
and the connection, writes the reply itself (`reply()` makes a whole one) and returns True to close
the connection after it. Requests on one connection come one after another (keep-alive); every
connection has a thread; `close()` stops listening and closes every connection still open, as a
server that goes down does.
"""

from __future__ import annotations

import http
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    head: bytes  # as sent: the request line and the header lines, without the blank line


Answer = Callable[[Request, socket.socket], bool | None]

_MAX_REQUESTS = 1000  # per connection: a bound on a test's loop, not a limit any test meets


def reply(status: int, body: bytes = b"", headers: Mapping[str, str] | None = None) -> bytes:
    """A whole HTTP/1.1 answer with its content-length."""
    lines = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}"]
    lines += [
        f"{name}: {value}" for name, value in {**(headers or {}), "content-length": str(len(body))}.items()
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _parse(head: bytes, body: bytes) -> Request:
    line, *fields = head.decode("latin-1").split("\r\n")
    method, path, _version = line.split(" ", 2)
    headers = {}
    for field in fields:
        name, _, value = field.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Request(method, path, headers, body, head)


class HttpStub:
    def __init__(self, answer: Answer):
        self.answer = answer
        self.requests: list[Request] = []
        self.connections = 0  # accepted so far
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._serve, daemon=True).start()

    def __enter__(self) -> HttpStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            # answers written in parts must leave at once, not when Nagle's algorithm lets them
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.connections += 1
                self._open.add(conn)
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        buf = b""
        try:
            with conn:
                for _ in range(_MAX_REQUESTS):
                    while b"\r\n\r\n" not in buf:
                        data = conn.recv(65536)
                        if not data:
                            return
                        buf += data
                    head, buf = buf.split(b"\r\n\r\n", 1)
                    length = int(_parse(head, b"").headers.get("content-length") or 0)
                    while len(buf) < length:
                        data = conn.recv(65536)
                        if not data:
                            return
                        buf += data
                    request = _parse(head, buf[:length])
                    buf = buf[length:]
                    self.requests.append(request)
                    if self.answer(request, conn):
                        return
        except OSError:  # the client went, or close() closed the connection
            pass
        finally:
            with self._lock:
                self._open.discard(conn)

    def close(self) -> None:
        self.sock.close()
        with self._lock:
            conns = list(self._open)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def answering(answers: list[tuple[int | str, Mapping[str, str], bytes]]) -> HttpStub:
    """A stub answering each request with the next of `answers` (status, headers, body) on kept
    connections; `("reset", ...)` closes without a word, as does a request past the last answer."""
    left = list(answers)

    def answer(_request: Request, conn: socket.socket) -> bool:
        if not left:
            return True
        status, headers, body = left.pop(0)
        if not isinstance(status, int):  # "reset"
            conn.shutdown(socket.SHUT_RDWR)
            return True
        conn.sendall(reply(status, body, headers))
        return False

    return HttpStub(answer)
