"""A plain keep-alive HTTP/1.1 GET on trio's sockets, for the listing pages (memfs/client/api.py `StoreClient._get`).

A hosted tick is 216 listing pages for 8 stores of 2,000 memories (SEMANTICS.md#d-no-counter), and
httpcore with h11 cost ~1.1 ms of the daemon's CPU per page once nothing else was left per page:
the pool's bookkeeping, h11's header validation and its event machinery, trio cancel scopes per
layer (PERFORMANCE.md, network section, "fourth pass"). A GET whose answer is read whole needs
none of that: one write of the request, reads until the header block ends, then the body by
`content-length`, chunks, or until the connection closes.

The request is the one httpcore sent: the caller's headers (host, authorization, accept-encoding,
...), HTTP/1.1, the same connections (TLS with httpx's context and ALPN `http/1.1`). At most one
request per connection at a time; the caller's slots bound how many are in flight, and idle
connections are kept (at most `keep` of them) for the next request. A kept connection the server
closed meanwhile (a keep-alive timeout between ticks) is found closed before it is used, or fails
before any byte of the answer arrives: then the GET is sent once more on a new connection (a GET
is safe to repeat). Every other failure is a `PlainHTTPError`, which the caller reports as the
service being unreachable.
"""

from __future__ import annotations

import ssl
from typing import Any

import trio

MAX_HEAD = 64 * 1024  # bytes of status line and headers an answer may have
READ = 256 * 1024  # bytes asked of the socket per read


_BROKEN = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError)


class PlainHTTPError(Exception):
    """The request got no whole answer: connect, send, receive or framing failed, or timed out."""


class _Stale(Exception):
    """A kept connection failed before any byte of the answer came: the server had closed it."""


class _Conn:
    __slots__ = ("stream", "raw", "buf")

    def __init__(self, stream: trio.abc.Stream, raw: trio.SocketStream):
        self.stream = stream
        self.raw = raw  # the TCP stream under TLS (or the stream itself), for the readability test
        self.buf = b""  # bytes received past the answer (a connection with any is not kept)


class PlainGet:
    """Connections to one origin, and the GET over them."""

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int,
        *,
        keep: int,
        ssl_context: ssl.SSLContext | None = None,
    ):
        self._tls = scheme == "https"
        self._host = host
        self._port = port
        self._keep = keep
        self._ssl_context = ssl_context
        self._idle: list[_Conn] = []
        self.connections_opened = 0  # for tests

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await trio.aclose_forcefully(conn.stream)

    async def warm(self, connections: int, timeout: dict[str, Any]) -> None:
        """Open up to `connections` connections now, concurrently, and keep them idle for the
        GETs to come (within `keep`): their handshakes (TCP, TLS) then happen while something
        else is waited for. One that cannot be opened is left to the GET, which says why."""

        async def one() -> None:
            try:
                conn = await self._connect(timeout)
            except PlainHTTPError:
                return
            if len(self._idle) < self._keep:
                self._idle.append(conn)
            else:
                await trio.aclose_forcefully(conn.stream)

        async with trio.open_nursery() as nursery:
            for _ in range(min(connections, self._keep) - len(self._idle)):
                nursery.start_soon(one)

    async def get(
        self, target: bytes, headers: list[tuple[bytes, bytes]], timeout: dict[str, Any]
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """(status, headers with lower-cased names, body) of `GET target`."""
        request = b"".join(
            [b"GET ", target, b" HTTP/1.1\r\n", *[k + b": " + v + b"\r\n" for k, v in headers], b"\r\n"]
        )
        while self._idle:
            conn = self._idle.pop()
            if conn.raw.socket.is_readable():  # closed by the server (or garbage): never reused
                await trio.aclose_forcefully(conn.stream)
                continue
            try:
                return await self._exchange(conn, request, timeout, reused=True)
            except _Stale:
                continue  # the next kept one, or a new connection
        conn = await self._connect(timeout)
        return await self._exchange(conn, request, timeout, reused=False)

    async def _connect(self, timeout: dict[str, Any]) -> _Conn:
        try:
            with _limit(timeout.get("connect")):
                raw = await trio.open_tcp_stream(self._host, self._port)
                stream: trio.abc.Stream = raw
                if self._tls:
                    assert self._ssl_context is not None
                    stream = trio.SSLStream(
                        raw, self._ssl_context, server_hostname=self._host, https_compatible=True
                    )
                    await stream.do_handshake()
        except (*_BROKEN, trio.TooSlowError) as exc:
            raise PlainHTTPError(f"connect: {_say(exc)}") from exc
        self.connections_opened += 1
        return _Conn(stream, raw)

    async def _exchange(
        self, conn: _Conn, request: bytes, timeout: dict[str, Any], *, reused: bool
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        got_any = False
        try:
            with _limit(timeout.get("write")):
                await conn.stream.send_all(request)
            read_limit = timeout.get("read")

            async def receive() -> bytes:
                nonlocal got_any
                with _limit(read_limit):
                    data = await conn.stream.receive_some(READ)
                got_any = got_any or bool(data)
                return bytes(data)

            status, headers, body, reusable = await _answer(conn, receive)
        except BaseException as exc:
            await trio.aclose_forcefully(conn.stream)  # its state is unknown: never used again
            broken = isinstance(exc, (*_BROKEN, _Closed))
            if broken and reused and not got_any:
                raise _Stale() from exc
            if broken or isinstance(exc, ValueError):
                raise PlainHTTPError(_say(exc)) from exc
            if isinstance(exc, trio.TooSlowError):
                raise PlainHTTPError("timed out") from exc
            raise  # a cancellation, or a bug
        # Bytes past the answer were never asked for: such a connection is not used again.
        if reusable and not conn.buf and len(self._idle) < self._keep:
            self._idle.append(conn)
        else:
            await trio.aclose_forcefully(conn.stream)
        return status, headers, body


class _Closed(Exception):
    """The server closed the connection before the answer was whole."""


def _say(exc: BaseException) -> str:
    """`Type: message`, with the cause's when trio's wrapper says nothing (a TLS failure is a bare
    BrokenResourceError caused by the SSLError that names the certificate's fault)."""
    text = f"{type(exc).__name__}: {exc or '(no details)'}"
    cause = exc.__cause__
    if not str(exc) and cause is not None:
        text = f"{type(exc).__name__}: {type(cause).__name__}: {cause}"
    return text


def _limit(seconds: float | None):
    return trio.fail_after(seconds) if seconds is not None else trio.CancelScope()


async def _answer(conn: _Conn, receive) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    """Read one answer: (status, headers, body, whether the connection may be used again)."""
    buf = conn.buf
    conn.buf = b""
    head, rest_bytes = await _head(buf, receive)
    status, headers, length, chunked, reusable = _parse_head(head)
    if status < 200:  # an interim answer: none is asked for (no `expect`), so none is understood
        raise ValueError(f"an unexpected interim answer {status}")
    if status in (204, 304):
        conn.buf = rest_bytes
        return status, headers, b"", reusable
    if chunked:
        body, left = await _chunked(rest_bytes, receive)
        conn.buf = left
        return status, headers, body, reusable
    if length is not None:
        body, conn.buf = await _sized(rest_bytes, length, receive)
        return status, headers, body, reusable
    parts = [rest_bytes]  # neither: the body ends with the connection
    while data := await receive():
        parts.append(data)
    return status, headers, b"".join(parts), False


async def _head(buf: bytes, receive) -> tuple[bytes, bytes]:
    """An answer's head from `buf` on, read until its empty line: (the head, the bytes after it)."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            return buf[:end], buf[end + 4 :]
        if len(buf) > MAX_HEAD:
            raise ValueError("answer headers too large")
        data = await receive()
        if not data:
            raise _Closed("connection closed before the answer's headers")
        buf += data


def _parse_head(head: bytes) -> tuple[int, list[tuple[bytes, bytes]], int | None, bool, bool]:
    """An answer's status line and headers: (status, headers, content-length, chunked, reusable)."""
    lines = head.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or not code.isdigit():
        raise ValueError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
    headers: list[tuple[bytes, bytes]] = []
    length: int | None = None
    chunked = False
    reusable = version == b"HTTP/1.1"
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            raise ValueError(f"a malformed header line: {line[:80]!r}")
        name, value = name.strip().lower(), value.strip()
        headers.append((name, value))
        if name == b"content-length":
            if not value.isdigit() or (length is not None and int(value) != length):
                raise ValueError(f"a bad content-length: {value[:40]!r}")
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = value.lower().endswith(b"chunked")
        elif name == b"connection":
            tokens = {t.strip().lower() for t in value.split(b",")}
            if b"close" in tokens:
                reusable = False
            elif b"keep-alive" in tokens and version == b"HTTP/1.0":
                reusable = True
    return int(code), headers, length, chunked, reusable


async def _sized(buf: bytes, length: int, receive) -> tuple[bytes, bytes]:
    """A body of `length` bytes from `buf` on: (the body, the bytes after it)."""
    parts = [buf]
    have = len(buf)
    while have < length:
        data = await receive()
        if not data:
            raise _Closed("connection closed before the answer's body was whole")
        parts.append(data)
        have += len(data)
    whole = b"".join(parts)
    return whole[:length], whole[length:]


async def _chunked(buf: bytes, receive) -> tuple[bytes, bytes]:
    """A chunked body from `buf` on: (the body, the bytes after it)."""
    parts: list[bytes] = []
    while True:
        while (eol := buf.find(b"\r\n")) < 0:
            if len(buf) > MAX_HEAD:
                raise ValueError("a chunk size line too long")
            data = await receive()
            if not data:
                raise _Closed("connection closed inside a chunked body")
            buf += data
        size_text = buf[:eol].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ValueError(f"a bad chunk size: {size_text[:40]!r}") from None
        buf = buf[eol + 2 :]
        if size == 0:  # trailers, then an empty line
            while (end := buf.find(b"\r\n")) != 0:
                if end > 0:
                    buf = buf[end + 2 :]
                    continue
                if len(buf) > MAX_HEAD:
                    raise ValueError("chunked trailers too large")
                data = await receive()
                if not data:
                    raise _Closed("connection closed inside a chunked body's trailers")
                buf += data
            return b"".join(parts), buf[2:]
        while len(buf) < size + 2:
            data = await receive()
            if not data:
                raise _Closed("connection closed inside a chunk")
            buf += data
        if buf[size : size + 2] != b"\r\n":
            raise ValueError("a chunk not ended by CRLF")
        parts.append(buf[:size])
        buf = buf[size + 2 :]
