"""`memfs serve`: the app on uvicorn (asgi_server.py, the default) or on Hypercorn's trio worker
(`--server hypercorn`, here), with a clean stop on SIGTERM/SIGINT either way."""

from __future__ import annotations

import logging
import os
import secrets
import signal
import ssl
import sys

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from memfs.limits import DEFAULT_MAX_MEMORIES
from memfs.logging_setup import setup_logging
from memfs.service import access_log
from memfs.service.app import create_app
from memfs.service.backend import DatabaseError
from memfs.service.database import DatabaseUrlError, open_storage
from memfs.service.hosted import HostedOptions
from memfs.service.orglimit import DEFAULT_BURST_S, OrgLimits
from memfs.service.ratelimit import RateLimiter
from memfs.service.retention import DEFAULT_INTERVAL_S, DEFAULT_RETENTION_DAYS, Retention, run_periodically

log = logging.getLogger("memfs.service")


def resolve_admin_key(admin_key: str | None) -> tuple[str, bool]:
    """Flag, then MEMFS_ADMIN_KEY, else a fresh key. Returns (key, generated)."""
    key = admin_key or os.environ.get("MEMFS_ADMIN_KEY")
    if key:
        return key, False
    return "memfs_admin_" + secrets.token_urlsafe(32), True


async def _serve(app, config: Config, host: str, retention: Retention, retention_interval_s: float) -> None:
    stop = trio.Event()
    background = trio.CancelScope()  # jobs that end at shutdown, before the server drains

    async def run_background() -> None:
        with background:
            await run_periodically(retention, retention_interval_s)

    async def watch_signals() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                app.watch_hub.close()  # held watches answer now, so the drain takes no 60 s
                stop.set()
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_signals)
        nursery.start_soon(run_background)
        binds = await nursery.start(
            lambda task_status: serve(app, config, shutdown_trigger=stop.wait, task_status=task_status)
        )
        # The line tests and scripts wait for: the socket is bound and accepting.
        url = binds[0] if binds else f"{'https' if config.ssl_enabled else 'http'}://{host}"
        print(f"memfs: listening on {url}", flush=True)
        await stop.wait()
        background.cancel()
        # serve() returns after its graceful shutdown; then the signal watcher is done too.


def check_tls(certfile: str | None, keyfile: str | None) -> str | None:
    """None if the pair is usable (or both absent), else what is wrong: said at start, in one line,
    rather than as a handshake failure on the first connection."""
    if certfile is None and keyfile is None:
        return None
    if certfile is None or keyfile is None:
        return "--certfile and --keyfile go together (TLS needs both)"
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as e:
        return f"cannot use --certfile {certfile} / --keyfile {keyfile}: {e}"
    return None


def _org_limiter(storage, limits: tuple[int, int] | None, burst_s: float) -> OrgLimits | None:
    """The per-organisation limits, shared through the database when it can (PostgreSQL:
    every replica draws on one allowance), else per process."""
    if limits is None:
        return None
    shared = getattr(storage.backend, "org_take", None) if hasattr(storage, "backend") else None
    return OrgLimits(*limits, burst_s, shared=shared)


def run(
    host: str = "127.0.0.1",
    port: int = 8470,
    db_path: str | os.PathLike = "./memfs-data/store.db",  # or sqlite:///PATH, postgresql://…
    admin_key: str | None = None,
    max_memories: int = DEFAULT_MAX_MEMORIES,
    extensions: bool = True,
    retention_days: float = DEFAULT_RETENTION_DAYS,
    retention_interval_s: float = DEFAULT_INTERVAL_S,
    server: str = "uvicorn",
    console: bool = False,
    rate_limit: float = 0.0,  # requests/s per credential; 0: no limit
    rate_burst: int | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    hosted: HostedOptions | None = None,
    org_limits: tuple[int, int] | None = None,  # (reads, writes) a minute; None: no limits
    org_burst_s: float = DEFAULT_BURST_S,
) -> int:
    formatter = setup_logging()
    # one line per request, written in batches (access_log.py: a write per line is ~40 µs)
    access_log.install("memfs.service.access", sys.stderr, formatter)
    tls_problem = check_tls(certfile, keyfile)
    if tls_problem:
        print(f"memfs serve: {tls_problem}", file=sys.stderr)
        return 2
    limiter = RateLimiter(rate_limit, rate_burst) if rate_limit > 0 else None
    key, generated = resolve_admin_key(admin_key)
    try:
        storage = open_storage(db_path)
    except (DatabaseUrlError, DatabaseError) as e:
        print(f"memfs serve: {e}", file=sys.stderr)
        return 2
    if generated:
        # Printed once, by design: there is no other way to learn a generated key.
        print(
            f"memfs: generated admin key (set MEMFS_ADMIN_KEY to choose one): {key}",
            file=sys.stderr,
            flush=True,
        )
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.graceful_timeout = 5.0
    config.accesslog = None  # our own access log has no query strings or headers
    config.errorlog = logging.getLogger("hypercorn.error")
    if certfile and keyfile:
        config.certfile, config.keyfile = certfile, keyfile
    app = create_app(
        storage,
        key,
        max_memories,
        extensions=extensions,
        console=console,
        rate_limiter=limiter,
        hosted=hosted,
        org_limits=_org_limiter(storage, org_limits, org_burst_s),
    )
    if app.org_limits is not None:
        log.info("organisation limits: %s", app.org_limits.describe())
    if limiter is not None:
        log.info(
            "rate limit: %g requests/s per credential, bursts of %d (per process)",
            limiter.rate,
            limiter.burst,
        )
    try:
        retention = Retention(storage.backend, retention_days)
        if server != "hypercorn":
            from memfs.service import asgi_server

            asgi_server.run(
                app, host, port, retention, retention_interval_s, certfile=certfile, keyfile=keyfile
            )
        else:
            trio.run(_serve, app, config, host, retention, retention_interval_s)
    finally:
        storage.close()
    return 0
