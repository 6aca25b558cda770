"""Every uvicorn internal memfs relies on, in one place: the service's HTTP protocol and server.

- `_CoalescingHttpTools`: uvicorn's internal `HttpToolsProtocol` (uvicorn.protocols.http.httptools_impl)
  whose writes within one loop step reach the socket in one write(2) (`_CoalescingTransport`).
- `_GuardedHttpTools` (`guarded_protocol`): the slow-client guard of docs/OPERATIONS.md#security,
  overriding the parser callbacks and reading the request cycle's flags (`cycle.response_started`,
  `.disconnected`, `.message_event`) and the flow control's `read_paused`.
- `Server`: `uvicorn.Server` with the watches woken at SIGTERM (`handle_exit`), and where it listens
  (`servers`, `started`).

Checked on uvicorn 0.55.0, pinned to 0.55.x in pyproject.toml; tests/service/test_uvicorn_internals.py
fails, naming what moved, when a release moves any of them. asgi_server.py runs the service with
these through uvicorn's public `Config` only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from memfs.protocol import REQUEST_ID_HEADER
from memfs.service.connections import ConnectionLimits
from memfs.service.request import next_request_id

log = logging.getLogger("memfs.service")

UVICORN_VERSION_CHECKED = "0.55.0"


class _CoalescingTransport:
    """A transport whose writes within one event-loop step reach the socket in one write(2).

    uvicorn writes a response's head and its body separately: two syscalls and two TCP segments
    per request. On loopback a write also runs the receiver's TCP path in the writer's syscall, so
    on the counter path the second write was a large share of the request (cProfile here: the
    writes ~45 % of the service's time). Writes are joined and handed to the real transport at
    the end of the current loop step (`call_soon`), and always before the transport closes, so
    order and content are unchanged; everything else is the real transport's.
    """

    __slots__ = ("_transport", "_loop", "_pending")

    def __init__(self, transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def _flush(self) -> None:
        if self._pending:
            data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
            self._pending = []
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class _CoalescingHttpTools(HttpToolsProtocol):
    def connection_made(self, transport) -> None:
        # duck-typed: every attribute but write/close is the real transport's
        super().connection_made(_CoalescingTransport(transport, asyncio.get_running_loop()))  # type: ignore[arg-type]


def raw_error(status: int, reason: str, type_: str, message: str, error_code: str | None = None) -> bytes:
    """A whole error response (the API's envelope, a request id, `connection: close`) for what
    is refused before the app sees a request: the app's own answers carry the same.
    `error_code`: the hosted API's `error.details.error_code`, when the refusal has one."""
    request_id = next_request_id()
    error: dict = {"type": type_, "message": message}
    if error_code is not None:
        error["details"] = {"error_code": error_code}
    body = json.dumps({"type": "error", "error": error, "request_id": request_id}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n{REQUEST_ID_HEADER}: {request_id}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class _GuardedHttpTools(_CoalescingHttpTools):
    """Bounds how long a request may take to arrive, which uvicorn does not (docs/OPERATIONS.md#security).

    Its head (line and headers) must be complete within `header_timeout` of its first byte (or of
    the connection, for the first request: a client that sends nothing is cut too) and within
    `max_header_bytes`; its body within `body_timeout` of its head, plus one second per
    `min_body_rate` bytes that arrived (a deadline: a byte every few seconds no longer re-arms a
    timer for ever, and a large body at a sane rate is never cut). Time while the server does not
    read (uvicorn stops reading while the app has not taken what arrived) is not the client's.
    A body cut before the app answered gets the hosted API's answer (400 `request_body_timeout`).
    Between requests uvicorn's keep-alive timeout applies; while the app answers, nothing.

    Errors here use the hosted API's types: 408 `timeout_error` (a timeout, the SDK's
    `timeout_error`), 503 `overloaded_error` (retry later: nothing wrong with the request),
    400/431 `invalid_request_error` (the request itself)."""

    limits = ConnectionLimits()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._timer: asyncio.TimerHandle | None = None
        self._body_deadline = 0.0  # loop time by which the body must have arrived
        self._head_bytes = 0
        self._phase = "head"
        self._arm(self.limits.header_timeout, self._head_too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, delay: float, callback) -> None:
        self._disarm()
        self._timer = self.loop.call_later(delay, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def data_received(self, data: bytes) -> None:
        if self._phase != "refused":
            super().data_received(data)

    def _count_head(self, size: int) -> bool:
        self._head_bytes += size
        if self._head_bytes <= self.limits.max_header_bytes:
            return True
        self._refuse(431, "Request Header Fields Too Large", "the request line and headers are too long")
        return False

    def on_url(self, url: bytes) -> None:
        if self._phase != "refused" and self._count_head(len(url)):
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._phase != "refused" and self._count_head(len(name) + len(value) + 4):
            super().on_header(name, value)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._phase == "done":  # the next request on this connection: its own deadline
            self._phase = "head"
            self._head_bytes = 0
            self._arm(self.limits.header_timeout, self._head_too_slow)

    def on_headers_complete(self) -> None:
        if self._phase == "refused":
            return
        # uvicorn's own `limit_concurrency` check, answered with the API's envelope.
        cap = self.limits.max_connections
        if len(self.connections) >= cap or len(self.tasks) >= cap:
            log.warning("%d connections held (--max-connections): answered 503", len(self.connections))
            self._refuse(
                503,
                "Service Unavailable",
                "the service holds too many connections; retry later",
                "overloaded_error",
            )
            return
        self._phase = "body"
        self._body_deadline = self.loop.time() + self.limits.body_timeout
        self._arm(self.limits.body_timeout, self._body_too_slow)
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._phase == "refused":  # the rest of what arrived with a refused request's head
            return
        self._body_deadline += len(body) / self.limits.min_body_rate  # no re-arm: the timer reads it
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._phase == "refused":
            return
        self._phase = "done"
        self._disarm()
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        self._refuse(400, "Bad Request", "the request is not valid HTTP/1.1")

    def _refuse(self, status: int, reason: str, message: str, type_: str = "invalid_request_error") -> None:
        self._disarm()
        self._phase = "refused"
        if not self.transport.is_closing():
            self.transport.write(raw_error(status, reason, type_, message))
            self.transport.close()

    def _head_too_slow(self) -> None:
        self._timer = None
        self._refuse(
            408,
            "Request Timeout",
            f"the request's headers did not arrive within {self.limits.header_timeout:g} s",
            "timeout_error",
        )

    def _body_too_slow(self) -> None:
        self._timer = None
        now = self.loop.time()
        if now < self._body_deadline:  # what arrived meanwhile bought time
            self._arm(self._body_deadline - now, self._body_too_slow)
            return
        if self.flow.read_paused:  # the server is not reading: not the client's delay
            self._body_deadline = now + self.limits.body_timeout
            self._arm(self.limits.body_timeout, self._body_too_slow)
            return
        log.info("closed a connection whose request body did not arrive in time")
        self._phase = "refused"
        cycle: RequestResponseCycle | None = self.cycle  # None before a connection's first request
        if cycle is not None and not cycle.response_started and not self.transport.is_closing():
            # The app has not answered (it waits for the body): the hosted API's answer, and the
            # app sees a disconnect at once, so it can never write after this answer.
            cycle.disconnected = True
            cycle.message_event.set()
            self.transport.write(
                raw_error(
                    400,
                    "Bad Request",
                    "invalid_request_error",
                    f"the request body did not arrive in time ({self.limits.body_timeout:g} s, "
                    f"plus 1 s per {self.limits.min_body_rate / 1024:g} KiB received); nothing was done",
                    "request_body_timeout",
                )
            )
        self.transport.close()


def guarded_protocol(limits: ConnectionLimits) -> type[_GuardedHttpTools]:
    return type("GuardedHttpTools", (_GuardedHttpTools,), {"limits": limits})


class Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(config)
        self._memfs_app = app
        self._loop = loop  # where the watches are woken from a signal handler

    def handle_exit(self, sig: int, frame) -> None:
        if not self.should_exit:
            log.info("received %s, shutting down", signal.Signals(sig).name)
            # A signal handler runs between two bytecodes: wake the watches from the loop itself.
            self._loop.call_soon_threadsafe(self._memfs_app.watch_hub.close)
        super().handle_exit(sig, frame)

    def listening(self) -> bool:
        """Bound and accepting (uvicorn's `started`)."""
        return self.started

    def address(self) -> str:
        """host:port it listens on ([host]:port for IPv6)."""
        sockname = self.servers[0].sockets[0].getsockname()
        return f"[{sockname[0]}]:{sockname[1]}" if ":" in sockname[0] else f"{sockname[0]}:{sockname[1]}"
