"""`memfs serve`: the app on uvicorn, asyncio (uvloop + httptools), one process: the service's one
HTTP server.

Why uvicorn: the counter path's cost is the per-request stack, not the database. Measured here
with benchmarks/measure/counter_rate.py (4 keep-alive connections, a loaded two-core machine)
uvicorn answered 1,850-2,340 counter reads/s with the fast path (counter_path.py) where
Hypercorn's trio worker, the second server memfs had, answered 430-700; nothing needed that one,
so it is gone. Only the mount must run on trio; the app is plain ASGI with anyio (`anyio.to_thread`
for storage, anyio in the watch hub and the retention job), so it runs on either loop (the tests
run it in process under trio).

uvicorn's internals (its HTTP protocol subclassed: coalesced writes and the slow-client guard; its
Server, woken at SIGTERM) are in _uvicorn.py, its fence; here only uvicorn's public `Config`.

Shutdown (SIGTERM/SIGINT): the held watches are answered first (`watch_hub.close()`), then uvicorn
stops accepting, drains in-flight requests (at most 5 s) and runs the lifespan's shutdown.
"""

from __future__ import annotations

import asyncio
import math
import signal

import uvicorn

from memfs.service._uvicorn import Server, guarded_protocol
from memfs.service.connections import ConnectionLimits
from memfs.service.retention import Retention, run_periodically

GRACEFUL_TIMEOUT_S = 5


async def serve(
    app,
    host: str,
    port: int,
    retention: Retention,
    retention_interval_s: float,
    certfile: str | None = None,
    keyfile: str | None = None,
    limits: ConnectionLimits | None = None,
) -> None:
    limits = limits or ConnectionLimits()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="none",  # we run the loop (uvloop, in run())
        http=guarded_protocol(limits),
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
        timeout_keep_alive=math.ceil(limits.keep_alive),
        # Connections and tasks at once: beyond it uvicorn answers 503 and closes (a stalled
        # client costs a connection and up to a 1 MiB body; the cap bounds what they can hold).
        limit_concurrency=limits.max_connections,
    )
    server = Server(config, app, asyncio.get_running_loop())
    serving = asyncio.create_task(server.serve())
    while not server.listening():  # bounded by serve() itself: it ends (and we raise) if it fails
        if serving.done():
            serving.result()
            raise RuntimeError("the HTTP server stopped before it started")
        await asyncio.sleep(0.01)
    # The line tests and scripts wait for: the socket is bound and accepting.
    print(f"memfs: listening on {'https' if config.is_ssl else 'http'}://{server.address()}", flush=True)
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
    limits: ConnectionLimits | None = None,
) -> None:
    import uvloop

    # uvicorn restores the handlers it found and raises the signal again once it has shut down
    # gracefully; a handler that does nothing makes that a normal exit (status 0, as before).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stopped)
    uvloop.run(serve(app, host, port, retention, retention_interval_s, certfile, keyfile, limits))
