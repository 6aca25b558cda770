"""`memfs serve --upstream URL`: the relay's flags on `memfs serve`, and the dispatch to it.

The flags are added to the service's `serve` parser (memfs/cli.py calls `extend`); a `serve`
with `--upstream` runs the relay (server.py), any other the service as before. Imports nothing
heavy until the relay runs.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable

SERVICE_DEFAULT_DB = os.environ.get("MEMFS_DB") or "./memfs-data/store.db"  # service/commands.py's default

# Flags of `memfs serve` that make no sense on a relay (it serves the upstream's stores, its rules).
_NOT_WITH_UPSTREAM = ("hosted_api", "console", "test_late_versions", "org_limits", "rate_limit")


def extend(serve: argparse.ArgumentParser) -> None:
    g = serve.add_argument_group("relay (memfs serve --upstream URL)")
    g.add_argument(
        "--upstream",
        default=None,
        metavar="URL",
        help="run as a relay in front of this store service (the hosted API or another memfs serve): "
        "a fleet's mounts share one upstream poll per store (--db holds the cache)",
    )
    g.add_argument(
        "--poll-interval",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="relay: how often each store a client uses is polled upstream (default %(default)s)",
    )
    g.add_argument(
        "--confirm-every",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="relay: a credential's access to a store is confirmed upstream again, with that credential, "
        "after this long (default %(default)s)",
    )
    g.add_argument(
        "--confirm-grace",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="relay: while the upstream cannot confirm a credential (unreachable, 429, 5xx), it is still "
        "served from the cache this long past --confirm-every, never longer; 0: not at all (default %(default)s)",
    )
    g.add_argument(
        "--upstream-key-file",
        default=None,
        metavar="PATH",
        help="relay: poll with the key in this file (else: with a credential that recently proved access; "
        "also $MEMFS_UPSTREAM_KEY)",
    )
    original: Callable[[argparse.Namespace], int] = serve.get_default("func")
    serve.set_defaults(func=lambda args: _serve_relay(args) if args.upstream else original(args))


def _serve_relay(args: argparse.Namespace) -> int:
    for flag in _NOT_WITH_UPSTREAM:
        value = getattr(args, flag, None)
        if value:
            print(f"memfs serve: --{flag.replace('_', '-')} does not go with --upstream", file=sys.stderr)
            return 2
    for name in ("poll_interval", "confirm_every"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0.5):
            print(f"memfs serve: --{name.replace('_', '-')} must be at least 0.5 seconds", file=sys.stderr)
            return 2
    if not (math.isfinite(args.confirm_grace) and args.confirm_grace >= 0):
        print("memfs serve: --confirm-grace must be 0 or more seconds", file=sys.stderr)
        return 2
    from memfs import secret_env
    from memfs.relay.server import run
    from memfs.service.serving import read_key_file, serve_options

    # taken out of the environment once read, as every credential handed over there
    operator_key = secret_env.take(("MEMFS_UPSTREAM_KEY",)).get("MEMFS_UPSTREAM_KEY")
    if args.upstream_key_file:
        try:
            operator_key = read_key_file(args.upstream_key_file, "--upstream-key-file")
        except ValueError as e:
            print(f"memfs serve: {e}", file=sys.stderr)
            return 2
    # Not the service's default database: a relay's cache is its own (`Mirror.claim_database`).
    db = (
        args.db
        if args.db != SERVICE_DEFAULT_DB
        else os.environ.get("MEMFS_RELAY_DB") or "./memfs-data/relay.db"
    )
    options = serve_options(args, db)
    if isinstance(options, str):
        print(f"memfs serve: {options}", file=sys.stderr)
        return 2
    return run(
        args.upstream,
        options,
        interval=args.poll_interval,
        confirm_every=args.confirm_every,
        confirm_grace=args.confirm_grace,
        operator_key=operator_key,
    )
