"""What every server memfs runs shares, `memfs serve` and the relay (`memfs serve --upstream`):
the flags both take (`ServeOptions`), and `open_serving`: the log set up, the TLS pair checked,
the admin key guarded and resolved, the database opened, or why not in one line; then
`Serving.run` on uvicorn (asgi_server.py) until stopped, and the database closed after."""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import ssl
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from memfs import secret_env
from memfs.logging_setup import setup_logging
from memfs.service import access_log, asgi_server, connections
from memfs.service.backend import DatabaseError
from memfs.service.connections import ConnectionLimits
from memfs.service.database import DatabaseUrlError, open_storage
from memfs.service.mirror import Mirror, is_relay_cache
from memfs.service.retention import Retention
from memfs.service.rules import StoreService

log = logging.getLogger("memfs.service")

MIN_ADMIN_KEY_CHARS = 16


@dataclass(frozen=True)
class ServeOptions:
    """The flags of `memfs serve` that every server takes, checked."""

    host: str
    port: int
    db: str | os.PathLike
    admin_key: str | None  # None: $MEMFS_ADMIN_KEY, else one generated
    key_on_command_line: bool  # the key came from --admin-key (ps shows it), not --admin-key-file
    certfile: str | None
    keyfile: str | None
    limits: ConnectionLimits


def serve_options(args: argparse.Namespace, db: str | os.PathLike) -> ServeOptions | str:
    """The options `args` ask for (the database: `db`, each server has its default), or what is
    wrong with them."""
    limits = connections.from_args(args)
    if isinstance(limits, str):
        return limits
    admin_key = args.admin_key
    if args.admin_key_file:
        try:
            admin_key = read_key_file(args.admin_key_file, "--admin-key-file")
        except ValueError as e:
            return str(e)
    return ServeOptions(
        host=args.host,
        port=args.port,
        db=db,
        admin_key=admin_key,
        key_on_command_line=not args.admin_key_file,
        certfile=args.certfile,
        keyfile=args.keyfile,
        limits=limits,
    )


def read_key_file(path: str, flag: str) -> str:
    """A key from a file (not shown by ps), stripped; ValueError saying why it cannot be had."""
    try:
        with open(path) as f:
            key = f.read().strip()
    except OSError as e:
        raise ValueError(f"cannot read {flag} {path}: {e.strerror}") from None
    if not key:
        raise ValueError(f"{flag} {path} is empty")
    return key


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


@dataclass
class Serving:
    """A server ready to start: its admin key and its storage, closed when the `with` block ends."""

    options: ServeOptions
    key: str
    storage: StoreService

    def __enter__(self) -> Serving:
        return self

    def __exit__(self, *exc: object) -> None:
        self.storage.close()

    def run(self, app, retention: Retention, retention_interval_s: float) -> int:
        """Serve `app` until SIGTERM or SIGINT, the retention job beside it; 0 once stopped."""
        o = self.options
        asgi_server.run(
            app,
            o.host,
            o.port,
            retention,
            retention_interval_s,
            certfile=o.certfile,
            keyfile=o.keyfile,
            limits=o.limits,
        )
        return 0


def open_serving(
    options: ServeOptions, *, relay_cache: bool, problems: Iterable[str | None] = ()
) -> Serving | None:
    """The log (one access line per request, written in batches: access_log.py, a write per line
    is ~40 µs), then the checks before anything is opened (the caller's `problems`, the TLS pair),
    the admin key guarded, the key and the storage (`key_and_storage`). None when one of them
    failed, having said why on stderr (`memfs serve` then exits 2)."""
    formatter = setup_logging()
    access_log.install("memfs.service.access", sys.stderr, formatter)
    for problem in (*problems, check_tls(options.certfile, options.keyfile)):
        if problem:
            print(f"memfs serve: {problem}", file=sys.stderr)
            return None
    guard_admin_key(options.admin_key if options.key_on_command_line else None)
    opened = key_and_storage(options.admin_key, options.db, relay_cache=relay_cache)
    if isinstance(opened, str):
        print(f"memfs serve: {opened}", file=sys.stderr)
        return None
    key, storage = opened
    return Serving(options, key, storage)
