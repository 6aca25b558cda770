"""`memfs serve` (default; `--server uvicorn`): the app on uvicorn, asyncio (uvloop + httptools), one process.

Why the default: the counter path's cost is the per-request stack, not the database. Measured
here with benchmarks/measure/counter_rate.py (4 keep-alive connections, a loaded two-core machine) uvicorn
answered 1,850-2,340 counter reads/s with the fast path (counter_path.py) where Hypercorn's trio
worker answered 430-700. Only the mount must run on trio; the app is plain ASGI with anyio
(`anyio.to_thread` for storage, anyio in the watch hub and the retention job), so it runs on
either loop; `--server hypercorn` stays available.

Shutdown (SIGTERM/SIGINT): the held watches are answered first (`watch_hub.close()`), then uvicorn
stops accepting, drains in-flight requests (at most 5 s) and runs the lifespan's shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from memfs.service.retention import Retention, run_periodically

log = logging.getLogger("memfs.service")
GRACEFUL_TIMEOUT_S = 5


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


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app) -> None:
        super().__init__(config)
        self._memfs_app = app
        self._loop: asyncio.AbstractEventLoop | None = None

    def handle_exit(self, sig: int, frame) -> None:
        if not self.should_exit:
            log.info("received %s, shutting down", signal.Signals(sig).name)
            if self._loop is not None:
                # A signal handler runs between two bytecodes: wake the watches from the loop itself.
                self._loop.call_soon_threadsafe(self._memfs_app.watch_hub.close)
        super().handle_exit(sig, frame)


async def serve(
    app,
    host: str,
    port: int,
    retention: Retention,
    retention_interval_s: float,
    certfile: str | None = None,
    keyfile: str | None = None,
) -> None:
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="none",  # we run the loop (uvloop, in run())
        http=_CoalescingHttpTools,
        lifespan="on",
        access_log=False,  # our own access log has no query strings or headers
        log_config=None,
        server_header=False,
        date_header=True,
        timeout_graceful_shutdown=GRACEFUL_TIMEOUT_S,
        ssl_certfile=certfile,
        ssl_keyfile=keyfile,
        # uvicorn's default (5 s) closes the connection of a client that ticks every 5-15 s between
        # two ticks: a new TCP connection per tick. 75 s is nginx's default.
        timeout_keep_alive=75,
    )
    server = _Server(config, app)
    server._loop = asyncio.get_running_loop()
    serving = asyncio.create_task(server.serve())
    while not server.started:  # bounded by serve() itself: it ends (and we raise) if it fails
        if serving.done():
            serving.result()
            raise RuntimeError("the HTTP server stopped before it started")
        await asyncio.sleep(0.01)
    sockname = server.servers[0].sockets[0].getsockname()
    bound = f"[{sockname[0]}]:{sockname[1]}" if ":" in sockname[0] else f"{sockname[0]}:{sockname[1]}"
    # The line tests and scripts wait for: the socket is bound and accepting.
    print(f"memfs: listening on {'https' if config.is_ssl else 'http'}://{bound}", flush=True)
    background = asyncio.create_task(run_periodically(retention, retention_interval_s))
    try:
        await serving
    finally:
        background.cancel()
        try:
            await background
        except asyncio.CancelledError:
            pass


def _stopped(_sig, _frame) -> None:
    pass


def run(
    app,
    host: str,
    port: int,
    retention: Retention,
    retention_interval_s: float,
    certfile: str | None = None,
    keyfile: str | None = None,
) -> None:
    import uvloop

    # uvicorn restores the handlers it found and raises the signal again once it has shut down
    # gracefully; a handler that does nothing makes that a normal exit (status 0, as before).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stopped)
    uvloop.run(serve(app, host, port, retention, retention_interval_s, certfile, keyfile))
