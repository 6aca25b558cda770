"""One loopback HTTP/1.1 proxy for the tests and the benchmark: latency, faults, counts.

memfs-independent, standard library only (asyncio). Two ways to run it:

    with Proxy(service.base_url, rtt=0.040) as proxy:   # a thread of this process (tests)
        proxy.add("POST", r"/memories$", "lose_answer", times=1)
        ... point the mount at proxy.url ...
    p = ProxyProcess(service.base_url, rtt=0.040)      # its own process (the bench: it must not
    p.counts(); p.stop()                                # share a GIL with the client it measures)

**Latency** (`rtt`, seconds): a userspace stand-in for `tc netem`, which these kernels lack. Every
chunk read from either side is delivered half a round trip after it arrived, in order; a new
connection waits one round trip before its first byte is read (the TCP handshake). The proxy
sleeps until 1 ms before a chunk is due (epoll rounds timeouts *up* to the next
millisecond), so the delay it adds beyond `rtt` is a fraction of a millisecond per chunk
(`python -m tests.support.proxy --measure` prints it).

**Faults**: each client request is read whole (headers + Content-Length body) and matched against
the rules (the first rule with `times` left wins):

- ``forward``      — relayed to the service over this connection's own keep-alive upstream
                     connection; the answer is streamed back chunk by chunk as it arrives.
- ``delay``        — like forward, after sleeping ``seconds``.
- ``status``       — answered by the proxy with ``code`` (429/500/503...) in the API's error
                     envelope, with a ``retry-after`` header when ``retry_after`` is given; the
                     service never sees it.
- ``reset``        — the connection is reset (RST) before the request reaches the service.
- ``lose_answer``  — the request *reaches the service*, its answer is dropped and the client's
                     connection reset: a write that happened whose answer was lost.
- ``reset_mid_body`` — forwarded; the answer's headers and half of its body are relayed, then RST.
- ``blackhole``    — accepted and read, never answered (held until the proxy stops or ``release()``).

**Counts**: every request is logged in ``proxy.log`` as (time, method, path, action); bytes both
ways, connections opened, and the most requests ever in flight at once (``max_in_flight``) — what
a test asserts to prove a client's concurrency is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import multiprocessing
import os
import re
import signal
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

ACTIONS = ("forward", "delay", "status", "reset", "lose_answer", "reset_mid_body", "blackhole")
HIGH_WATER = 4 * 1024 * 1024  # bytes waiting toward one client before the relay waits (drain)
EARLY = 0.001  # wake this much early: epoll rounds its timeout up to the next ms; measured here, a
# sleep of asyncio then ends ~0.2 ms after the rounded time, so this centres the error on zero


@dataclass
class Rule:
    method: str  # "*" for any
    path: re.Pattern
    action: str
    times: int | None = None  # None: forever
    code: int = 503
    seconds: float = 0.0
    retry_after: str | None = None
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
    head: bytes = b""  # the request line and headers as they came (what a test asserts was sent)


@dataclass
class Counts:
    up: int = 0  # bytes client -> service
    down: int = 0  # bytes service -> client
    conns: int = 0
    requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0


class _Reset(Exception):
    """Close the client connection with a TCP reset."""


@dataclass
class _Core:
    """The proxy's state and logic; runs on one asyncio loop (a thread or a process of its own)."""

    upstream: str
    rtt: float = 0.0
    rules: list[Rule] = field(default_factory=list)
    log: list[Entry] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)

    def __post_init__(self) -> None:
        u = urlsplit(self.upstream)
        self._up = (u.hostname or "127.0.0.1", u.port or 80)
        self._lock = threading.Lock()
        self._generation = 0  # bumped by release(): black holes of older generations let go
        self._stopping = False
        self._tasks: set[asyncio.Task] = set()

    # -- control (any thread) ---------------------------------------------------------------
    def add(
        self,
        method: str,
        path: str,
        action: str,
        *,
        times: int | None = None,
        code: int = 503,
        seconds: float = 0.0,
        retry_after: float | str | None = None,
    ) -> Rule:
        assert action in ACTIONS, action
        rule = Rule(
            method,
            re.compile(path),
            action,
            times,
            code,
            seconds,
            None if retry_after is None else str(retry_after),
        )
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
            return sum(
                1
                for e in self.log
                if e.at >= since and (method == "*" or e.method == method) and pat.search(e.path)
            )

    def reset_counts(self) -> None:
        with self._lock:
            in_flight = self.counts.in_flight
            self.counts = Counts(in_flight=in_flight, max_in_flight=in_flight)
            self.log.clear()

    def _pick(self, method: str, path: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, path):
                    if rule.times is not None:
                        rule.times -= 1
                    rule.hits += 1
                    return rule
        return None

    # -- the loop ---------------------------------------------------------------------------
    async def serve(self, sock: socket.socket) -> None:
        server = await asyncio.start_server(self._client, sock=sock)
        async with server:
            await server.serve_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # stop() cancels: not an error to log
            await self._connection(reader, writer)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        with contextlib.suppress(Exception):
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self.counts.conns += 1
        inbound = _DelayedReader(reader, self.rtt / 2, self.rtt, self._count_up)
        outbound = _DelayedWriter(writer, self.rtt / 2, self._count_down)
        up: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while not self._stopping:
                request = await inbound.read_request()
                if request is None:
                    break
                head, body, method, path, client_close = request
                rule = self._pick(method, path)
                action = rule.action if rule else "forward"
                with self._lock:
                    self.log.append(Entry(time.monotonic(), method, path, action, head))
                    self.counts.requests += 1
                    self.counts.in_flight += 1
                    self.counts.max_in_flight = max(self.counts.max_in_flight, self.counts.in_flight)
                try:
                    up, close = await self._answer(rule, action, head, body, up, outbound)
                finally:
                    with self._lock:
                        self.counts.in_flight -= 1
                if close or client_close:
                    break
            await outbound.close()
        except _Reset:
            await outbound.close(reset=True)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            await outbound.close(reset=True)
        finally:
            inbound.stop()
            outbound.stop()
            if up is not None:
                up[1].close()
            self._tasks.discard(task)

    async def _answer(self, rule: Rule | None, action: str, head: bytes, body: bytes, up, outbound):
        """Answer one request; returns (upstream connection to keep, close the client after)."""
        if action == "blackhole":
            generation = self._generation
            while not self._stopping and self._generation == generation:
                await asyncio.sleep(0.05)
            raise _Reset
        if action == "reset":
            raise _Reset
        if action == "status":
            assert rule is not None
            outbound.write(_error_response(rule.code, rule.retry_after))
            return up, False
        if action == "delay":
            assert rule is not None
            await asyncio.sleep(rule.seconds)
        relay = action in ("forward", "delay")
        for attempt in range(2):
            fresh = up is None
            if up is None:
                try:
                    up = await asyncio.open_connection(*self._up)
                except OSError:
                    raise _Reset from None  # the service is down: what a client sees is a reset
                with contextlib.suppress(Exception):
                    up[1].get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            r, w = up
            framing = _Framing(head.split(b" ", 1)[0] == b"HEAD")
            got = 0
            kept: list[bytes] = []
            try:
                w.write(head + body)
                await w.drain()
                while not framing.done:
                    chunk = await r.read(65536)
                    if not chunk:
                        if framing.until_close and got:
                            framing.done = True
                            break
                        raise ConnectionResetError("service closed mid-answer")
                    got += len(chunk)
                    framing.feed(chunk)
                    if relay:
                        outbound.write(chunk)
                        await outbound.drain()
                    else:
                        kept.append(chunk)
            except OSError:
                w.close()
                up = None
                if got == 0 and not fresh and attempt == 0:
                    continue  # a keep-alive connection the service had closed: once more, fresh
                raise _Reset from None
            break
        if framing.close or framing.until_close:
            w.close()
            up = None
        if action == "lose_answer":
            raise _Reset
        if action == "reset_mid_body":
            answer = b"".join(kept)
            split = answer.find(b"\r\n\r\n") + 4
            outbound.write(answer[: split + max(1, (len(answer) - split) // 2)])
            await asyncio.sleep(0.05)
            raise _Reset
        return up, framing.close or framing.until_close

    def _count_up(self, n: int) -> None:
        with self._lock:
            self.counts.up += n

    def _count_down(self, n: int) -> None:
        with self._lock:
            self.counts.down += n

    async def stop(self) -> None:
        self._stopping = True
        self.release()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0)  # let the writers' close() callbacks run


class _DelayedReader:
    """Reads a client's bytes as they arrive (a background task) and hands each chunk on
    `delay` seconds after it arrived, in order; nothing before `setup` seconds from the start.

    Each chunk is handed on by a timer of the event loop (`call_at`), not by a queue and a sleep
    per chunk: that was most of the proxy's own CPU (~0.1 s per hosted tick of 216 pages, on the
    cores the client and the service it stands between share). Timers of one connection are
    strictly increasing (`_Timeline`), so they run in order."""

    def __init__(self, reader: asyncio.StreamReader, delay: float, setup: float, count) -> None:
        self._loop = asyncio.get_running_loop()
        self._delay = delay
        self._ready = self._loop.time() + setup
        self._count = count
        self._timeline = _Timeline(self._loop)
        self._buf = b""
        self._eof = False
        self._waiter: asyncio.Future | None = None
        self._task = self._loop.create_task(self._pump(reader))

    async def _pump(self, reader: asyncio.StreamReader) -> None:
        loop = self._loop
        try:
            while True:
                chunk = await reader.read(65536)
                self._timeline.at(max(loop.time(), self._ready) + self._delay, self._deliver, chunk)
                if not chunk:
                    return
                self._count(len(chunk))
        except (OSError, asyncio.CancelledError):
            self._timeline.at(loop.time(), self._deliver, b"")  # after what arrived before it

    def _deliver(self, chunk: bytes) -> None:
        if chunk:
            self._buf += chunk
        else:
            self._eof = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _more(self) -> bool:
        """Wait for the next delivered chunk; False at the end of the connection."""
        if self._eof:
            return False
        self._waiter = self._loop.create_future()
        await self._waiter
        return True

    async def read_request(self):
        """(head, body, method, path, client asked to close) or None at the end of the connection."""
        while b"\r\n\r\n" not in self._buf:
            if not await self._more():
                return None
        head, rest = self._buf.split(b"\r\n\r\n", 1)
        length = 0
        close = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value.strip())
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        while len(rest) < length:
            before = len(self._buf)
            if not await self._more():
                return None
            rest += self._buf[before:]
        self._buf = rest[length:]
        method, target = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")[:2]
        return head + b"\r\n\r\n", rest[:length], method, urlsplit(target).path, close

    def stop(self) -> None:
        self._task.cancel()
        self._timeline.cancel()


class _DelayedWriter:
    """Sends each chunk `delay` seconds after it was handed over, in order, by a timer of the
    event loop per chunk (see `_DelayedReader`). `drain()` holds the relay back while more than
    `HIGH_WATER` bytes wait (scheduled or in the socket's buffer), as awaiting each write did."""

    def __init__(self, writer: asyncio.StreamWriter, delay: float, count) -> None:
        self._writer = writer
        self._loop = asyncio.get_running_loop()
        self._delay = delay
        self._count = count
        self._timeline = _Timeline(self._loop)
        self._waiting = 0  # bytes scheduled, not yet handed to the socket
        self._reset = False
        self._closed = self._loop.create_future()

    def write(self, chunk: bytes) -> None:
        self._waiting += len(chunk)
        self._timeline.at(self._loop.time() + self._delay, self._send, chunk)

    def _send(self, chunk: bytes) -> None:
        self._waiting -= len(chunk)
        if self._closed.done():
            return
        try:
            self._writer.write(chunk)
        except (OSError, RuntimeError):
            self._finish()
            return
        self._count(len(chunk))

    async def drain(self) -> None:
        while not self._closed.done() and self._waiting + self._buffered() > HIGH_WATER:
            await asyncio.sleep(0.001)

    def _buffered(self) -> int:
        transport = self._writer.transport
        return transport.get_write_buffer_size() if not transport.is_closing() else 0

    def _finish(self) -> None:
        if self._closed.done():
            return
        if self._reset:
            with contextlib.suppress(OSError, AttributeError):
                self._writer.get_extra_info("socket").setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
        self._writer.close()
        self._closed.set_result(None)

    def stop(self) -> None:
        self._timeline.cancel()
        self._finish()

    async def close(self, *, reset: bool = False) -> None:
        """Close after everything queued so far is delivered (with a TCP reset if asked)."""
        self._reset = reset
        self._timeline.at(self._loop.time() + self._delay, self._finish)
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.shield(self._closed)


class _Timeline:
    """One direction's timers: each runs at its time, later ones strictly after earlier ones
    (asyncio runs timers due at the same time in no set order), `EARLY` ahead of it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._last = 0.0
        self._handles: collections.deque[asyncio.TimerHandle] = collections.deque()

    def at(self, due: float, fn, *args) -> None:
        due = max(due - EARLY, self._last + 1e-6)
        self._last = due
        handles = self._handles
        while handles and handles[0].when() < self._loop.time():  # ran (or cancelled) long ago
            handles.popleft()
        handles.append(self._loop.call_at(due, fn, *args))

    def cancel(self) -> None:
        for handle in self._handles:
            handle.cancel()
        self._handles.clear()


class _Framing:
    """Follows one HTTP/1.1 response as its bytes go by, to know where it ends."""

    def __init__(self, head_request: bool = False) -> None:
        self._buf = b""
        self._state = "head"
        self._remaining = 0
        self._head_request = head_request
        self.done = False
        self.close = False  # the service said `connection: close`
        self.until_close = False  # no framing: the body ends when the service closes

    def feed(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        self._buf = b""
        while not self.done:
            st = self._state
            if st == "head":
                i = buf.find(b"\r\n\r\n")
                if i < 0:
                    self._buf = buf
                    return
                lines = buf[:i].split(b"\r\n")
                buf = buf[i + 4 :]
                status = int(lines[0].split()[1])
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    headers[name.strip().lower()] = value.strip().lower()
                self.close = headers.get(b"connection") == b"close"
                if 100 <= status < 200:
                    continue  # an interim answer; the real head follows
                if self._head_request or status in (204, 304):
                    self.done = True
                elif b"content-length" in headers:
                    self._remaining = int(headers[b"content-length"])
                    self._state = "length"
                elif b"chunked" in headers.get(b"transfer-encoding", b""):
                    self._state = "size"
                else:
                    self.until_close = True
                    return
            elif st in ("length", "data"):
                take = min(len(buf), self._remaining)
                self._remaining -= take
                buf = buf[take:]
                if self._remaining:
                    return
                if st == "length":
                    self.done = True
                else:
                    self._state = "size"
            elif st == "size":
                i = buf.find(b"\r\n")
                if i < 0:
                    self._buf = buf
                    return
                size = int(buf[:i].split(b";")[0], 16)
                buf = buf[i + 2 :]
                if size == 0:
                    self._state = "trailer"
                else:
                    self._remaining = size + 2  # the data and its CRLF
                    self._state = "data"
            elif st == "trailer":
                i = buf.find(b"\r\n")
                if i < 0:
                    self._buf = buf
                    return
                line, buf = buf[:i], buf[i + 2 :]
                if not line:
                    self.done = True


def _error_response(code: int, retry_after: str | None) -> bytes:
    kind = {429: "rate_limit_error", 500: "api_error", 503: "overloaded_error"}.get(code, "api_error")
    body = json.dumps(
        {"type": "error", "error": {"type": kind, "message": f"injected {code}"}, "request_id": "req_proxy"}
    ).encode()
    reason = {429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}.get(
        code, "Error"
    )
    head = (
        f"HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "request-id: req_proxy\r\n"
        + (f"retry-after: {retry_after}\r\n" if retry_after is not None else "")
        + "\r\n"
    )
    return head.encode() + body


def _listener(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(256)
    sock.setblocking(False)
    return sock


class Proxy:
    """The proxy on an asyncio loop in a daemon thread of this process (for tests)."""

    def __init__(self, upstream: str, *, rtt: float = 0.0) -> None:
        self._core = _Core(upstream, rtt)
        self._sock = _listener()
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._main: asyncio.Future | None = None
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._main = self._loop.create_task(self._core.serve(self._sock))
            self._loop.call_soon(started.set)
            with contextlib.suppress(asyncio.CancelledError):
                self._loop.run_until_complete(self._main)
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

        self._thread = threading.Thread(target=run, name="proxy", daemon=True)
        self._thread.start()
        started.wait(10)

    # the rules, the log and the counts live in the core
    def add(self, *a, **kw) -> Rule:
        return self._core.add(*a, **kw)

    def clear(self) -> None:
        self._core.clear()

    def release(self) -> None:
        self._core.release()

    def faults(self) -> int:
        return self._core.faults()

    def count(self, method: str, path_re: str, *, since: float = 0.0) -> int:
        return self._core.count(method, path_re, since=since)

    def reset_counts(self) -> None:
        self._core.reset_counts()

    @property
    def log(self) -> list[Entry]:
        return self._core.log

    @property
    def counts(self) -> Counts:
        return self._core.counts

    def close(self) -> None:
        if not self._thread.is_alive():
            return

        async def stop() -> None:
            await self._core.stop()
            if self._main is not None:
                self._main.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop)
        self._thread.join(5)

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _process_main(upstream: str, rtt: float, sock: socket.socket, ctl: socket.socket) -> None:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    core = _Core(upstream, rtt)

    async def control(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).strip()
        if line == b"reset":
            core.reset_counts()
        with core._lock:
            writer.write(json.dumps(vars(core.counts)).encode())
        await writer.drain()
        writer.close()

    async def main() -> None:
        ctl_server = await asyncio.start_server(control, sock=ctl)
        async with ctl_server:
            await core.serve(sock)

    with contextlib.suppress(SystemExit, KeyboardInterrupt):
        asyncio.run(main())


def counts_at(ctl_port: int, *, reset: bool = False) -> dict[str, int]:
    """A `ProxyProcess`'s counts asked over its control port: from any process that knows only the
    port (the bench's official worker runs in a child of its own)."""
    with socket.create_connection(("127.0.0.1", ctl_port), timeout=10) as c:
        c.sendall(b"reset\n" if reset else b"counts\n")
        data = b""
        while chunk := c.recv(65536):
            data += chunk
    return json.loads(data)


class ProxyProcess:
    """The proxy in a process of its own; `counts()` asks it over a control port."""

    def __init__(self, upstream: str, *, rtt: float = 0.0) -> None:
        sock, ctl = _listener(), _listener()
        self.port, self.ctl_port = sock.getsockname()[1], ctl.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.rtt = rtt
        self.proc = multiprocessing.get_context("fork").Process(
            target=_process_main, args=(upstream, rtt, sock, ctl), daemon=True
        )
        self.proc.start()
        sock.close()
        ctl.close()
        self.counts()  # answers once its loop runs

    def counts(self, *, reset: bool = False) -> dict[str, int]:
        return counts_at(self.ctl_port, reset=reset)

    def bytes(self) -> int:
        c = self.counts()
        return c["up"] + c["down"]

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


def measure(rtt: float, rounds: int = 200) -> dict[str, float]:
    """What the proxy adds beyond `rtt`: request/answer round trips through it to a tiny
    keep-alive HTTP server, compared with the same round trips straight to that server."""
    server = socket.create_server(("127.0.0.1", 0))
    answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"

    def serve() -> None:  # one keep-alive connection at a time, one send per answer
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with conn:
                buf = b""
                while chunk := conn.recv(65536):
                    buf += chunk
                    while b"\r\n\r\n" in buf:
                        _, buf = buf.split(b"\r\n\r\n", 1)
                        conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}"

    def rounds_of(port: int) -> list[float]:
        out = []
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(rounds):
                t = time.perf_counter()
                s.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
                data = b""
                while not data.endswith(b"ok"):
                    data += s.recv(65536)
                out.append(time.perf_counter() - t)
        return out

    try:
        direct = sorted(rounds_of(server.getsockname()[1]))
        p = ProxyProcess(url, rtt=rtt)
        try:
            via = sorted(rounds_of(p.port)[1:])  # the first pays the connection's round trip
        finally:
            p.stop()
    finally:
        server.close()
    med = lambda xs: xs[len(xs) // 2]  # noqa: E731
    return {
        "rtt_ms": rtt * 1000,
        "direct_median_ms": med(direct) * 1000,
        "via_median_ms": med(via) * 1000,
        "added_median_ms": (med(via) - med(direct) - rtt) * 1000,
        "added_p90_ms": (via[int(len(via) * 0.9)] - med(direct) - rtt) * 1000,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="measure what the delay proxy adds beyond the round trip")
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--rtt", type=float, default=0.040, help="seconds")
    args = ap.parse_args()
    for rtt in sorted({0.0, args.rtt}):
        print(json.dumps(measure(rtt)))
