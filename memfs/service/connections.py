"""How long a request may take to arrive, and how many connections the service holds
(docs/OPERATIONS.md#security): the `memfs serve` flags and their checks.

Without these a client that sends part of its headers, nothing at all, or part of a body held its
connection (and the body read so far) for ever, unauthenticated. The HTTP server's own settings
are used where it has them (uvicorn: `timeout_keep_alive`, `limit_concurrency`); the arrival of
a request's head and body is bounded in memfs/service/_uvicorn.py, where uvicorn has no setting
for it.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float = 10.0  # from a request's first byte (or the connection) to its last header
    # a body must arrive within this of its headers, plus a second per `min_body_rate` bytes that
    # arrived: a deadline, not a pause (a byte every few seconds re-armed a pause's timer for ever)
    body_timeout: float = 30.0
    min_body_rate: float = 64 * 1024  # bytes a second: a body this fast is never cut (the 256 MiB import)
    keep_alive: float = 75.0  # an idle keep-alive connection (nginx's default; mounts tick every 5-15 s)
    # beyond it a request is answered 503 and its connection closed. Room for the thousand held
    # watches one process must serve (each a connection and a task) and as many requests beside them.
    max_connections: int = 2048
    max_header_bytes: int = 64 * 1024  # request line and headers; beyond it 431


DEFAULTS = ConnectionLimits()


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--header-timeout",
        type=float,
        default=DEFAULTS.header_timeout,
        metavar="SECONDS",
        help="a request's line and headers must arrive within this (default %(default)s; else 408, closed)",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=DEFAULTS.body_timeout,
        metavar="SECONDS",
        help="a request body must arrive within this of its headers, plus 1 s per 64 KiB received "
        "(default %(default)s; else 400 request_body_timeout, connection closed)",
    )
    p.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=DEFAULTS.keep_alive,
        metavar="SECONDS",
        help="close a keep-alive connection idle this long (default %(default)s)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULTS.max_connections,
        metavar="N",
        help="connections held at once; a request beyond it is answered 503 (default %(default)s: a thousand held watches and as many requests; uvicorn only)",
    )
    p.add_argument(
        "--max-header-bytes",
        type=int,
        default=DEFAULTS.max_header_bytes,
        metavar="BYTES",
        help="the longest request line and headers (default %(default)s; else 431)",
    )


def from_args(args: argparse.Namespace) -> ConnectionLimits | str:
    """The limits the flags ask for, or what is wrong with them."""
    times = (args.header_timeout, args.body_timeout, args.keep_alive_timeout)
    if not all(math.isfinite(t) and t > 0 for t in times):
        return "--header-timeout, --body-timeout and --keep-alive-timeout must be positive seconds"
    if args.max_connections < 1 or args.max_header_bytes < 1024:
        return "--max-connections must be at least 1 and --max-header-bytes at least 1024"
    return ConnectionLimits(
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        keep_alive=args.keep_alive_timeout,
        max_connections=args.max_connections,
        max_header_bytes=args.max_header_bytes,
    )
