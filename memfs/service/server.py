"""`memfs serve`: the checks before the service starts (TLS pair, admin key, database), the app
put together, then run on uvicorn (asgi_server.py), the service's one HTTP server."""

from __future__ import annotations

import logging
import os
import secrets
import ssl
import sys

from memfs import secret_env
from memfs.limits import DEFAULT_MAX_MEMORIES
from memfs.logging_setup import setup_logging
from memfs.service import access_log, asgi_server
from memfs.service.app import create_app
from memfs.service.backend import DatabaseError
from memfs.service.connections import ConnectionLimits
from memfs.service.database import DatabaseUrlError, open_storage
from memfs.service.hosted import HostedOptions
from memfs.service.mirror import Mirror, is_relay_cache
from memfs.service.orglimit import DEFAULT_BURST_S, OrgLimits
from memfs.service.ratelimit import RateLimiter
from memfs.service.retention import DEFAULT_INTERVAL_S, DEFAULT_RETENTION_DAYS, Retention
from memfs.service.rules import StoreService

log = logging.getLogger("memfs.service")


MIN_ADMIN_KEY_CHARS = 16


def resolve_admin_key(admin_key: str | None) -> tuple[str, bool]:
    """Flag, then MEMFS_ADMIN_KEY, else a fresh key. Returns (key, generated)."""
    key = admin_key or os.environ.get("MEMFS_ADMIN_KEY")
    if key:
        return key, False
    return "memfs_admin_" + secrets.token_urlsafe(32), True


def admin_key_problem(key: str) -> str | None:
    """Why `key` cannot be the admin key: it is every store's credential, so a guessable one is refused."""
    if len(key) < MIN_ADMIN_KEY_CHARS:
        return (
            f"the admin key must be at least {MIN_ADMIN_KEY_CHARS} characters (got {len(key)}); "
            "make one with `openssl rand -hex 24`, or set none and one is generated"
        )
    return None


def guard_admin_key(admin_key: str | None) -> None:
    """The admin key given as a flag is in /proc/<pid>/cmdline, which `ps` shows every local user:
    hidden there now (and said so), and the process made non-dumpable, as every memfs process
    that holds a credential is (memfs/secret_env.py)."""
    secret_env.make_non_dumpable()
    if admin_key:
        secret_env.hide_in_cmdline(admin_key)
        log.warning(
            "--admin-key is readable by every local user (ps) until the service starts: "
            "prefer MEMFS_ADMIN_KEY or --admin-key-file"
        )


def key_and_storage(
    admin_key: str | None, db_path: str | os.PathLike, *, relay_cache: bool
) -> tuple[str, StoreService] | str:
    """The admin key (given, or generated and printed once: there is no other way to learn it) and
    the database opened, or why not in one line. `relay_cache`: the database is (or becomes) a
    relay's cache, else it must not be one (memfs/service/mirror.py `claim_database`)."""
    key, generated = resolve_admin_key(admin_key)
    key_problem = admin_key_problem(key)
    if key_problem:
        return key_problem
    try:
        storage = open_storage(db_path)
    except (DatabaseUrlError, DatabaseError) as e:
        return str(e)
    if relay_cache:
        problem = Mirror(storage.backend).claim_database()
        if problem:
            storage.close()
            return f"{db_path}: {problem}"
    elif is_relay_cache(storage.backend):
        storage.close()
        return f"{db_path} is a relay's cache (memfs serve --upstream): it is served only by a relay"
    if generated:
        print(
            f"memfs: generated admin key (set MEMFS_ADMIN_KEY to choose one): {key}",
            file=sys.stderr,
            flush=True,
        )
    return key, storage


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
    console: bool = False,
    rate_limit: float = 0.0,  # requests/s per credential; 0: no limit
    rate_burst: int | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    limits: ConnectionLimits | None = None,
    key_on_command_line: bool = True,  # False: admin_key came from --admin-key-file
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
    guard_admin_key(admin_key if key_on_command_line else None)
    opened = key_and_storage(admin_key, db_path, relay_cache=False)
    if isinstance(opened, str):
        print(f"memfs serve: {opened}", file=sys.stderr)
        return 2
    key, storage = opened
    limits = limits or ConnectionLimits()
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
        asgi_server.run(
            app,
            host,
            port,
            retention,
            retention_interval_s,
            certfile=certfile,
            keyfile=keyfile,
            limits=limits,
        )
    finally:
        storage.close()
    return 0
