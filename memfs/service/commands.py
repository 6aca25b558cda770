"""The service's command: `memfs serve` (the admin helpers that talk to a running service are the
store client's: memfs/session/admin_commands.py)."""

from __future__ import annotations

import argparse
import math
import os
import sys

from memfs.limits import DEFAULT_MAX_MEMORIES
from memfs.service import connections


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the reference store service")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    p.add_argument(
        "--port", type=int, default=8470, help="TCP port (0 picks a free one; default %(default)s)"
    )
    p.add_argument(
        "--db",
        default=os.environ.get("MEMFS_DB") or "./memfs-data/store.db",
        help="sqlite:///PATH or a file path (created if missing), or postgresql://… "
        "(default: %(default)s; $MEMFS_DB when set, else ./memfs-data/store.db)",
    )
    p.add_argument("--admin-key", help="admin key (default: $MEMFS_ADMIN_KEY, else generated and printed)")
    p.add_argument(
        "--admin-key-file", metavar="PATH", help="read the admin key from this file (not shown by ps)"
    )
    p.add_argument(
        "--max-memories",
        type=int,
        default=DEFAULT_MAX_MEMORIES,
        help="memories per store (default %(default)s)",
    )
    p.add_argument(
        "--hosted-api",
        action="store_true",
        help="serve only the hosted API: no counter, changes feed or snapshot (to test clients' fallback)",
    )
    p.add_argument(
        "--session-versions",
        choices=("allow", "refuse"),
        default="allow",
        help="whether a session token may read memory_versions (refuse: 403 permission_error; the "
        "hosted API does not document which; clients must work both ways; default %(default)s)",
    )
    p.add_argument(
        "--test-late-versions",
        action="store_true",
        help="tests: a memory write with the header memfs-test-backdate-seconds: S is recorded S "
        "seconds in the past (a version that becomes visible behind later ones)",
    )
    p.add_argument(
        "--test-unavailable",
        action="store_true",
        help="tests: a memory write with the header memfs-test-unavailable: CODE[#LABEL] is answered "
        "503 storage_not_ready (nothing done) or change_outcome_unknown (saved), once per header value",
    )
    p.add_argument(
        "--org-limits",
        default=None,
        metavar="READS,WRITES|off",
        help="per-organisation limits shared by every credential (and, on PostgreSQL, every replica): "
        "reads (GET) and writes (POST, DELETE) a minute, 0 for no limit on a class, or off "
        "(default: 1200,300 with --hosted-api, the hosted API's; else off)",
    )
    p.add_argument(
        "--org-burst",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how many seconds' worth of each --org-limits class may come at once (default 3)",
    )
    p.add_argument(
        "--version-retention-days",
        type=float,
        default=30.0,
        metavar="DAYS",
        help="keep memory versions at least this long (default %(default)s; 0 keeps everything; "
        "fractions allowed); each live memory's current version is always kept",
    )
    p.add_argument(
        "--retention-interval",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how often the retention job runs (default %(default)s)",
    )
    p.add_argument(
        "--console",
        action="store_true",
        help="also serve the web console at /console (sign in with the admin key)",
    )
    p.add_argument(
        "--rate-limit",
        type=float,
        default=0.0,
        metavar="RPS",
        help="requests per second per credential (admin key, session token), answered "
        "429 with retry-after beyond it; per process (default %(default)s; 0: no limit)",
    )
    p.add_argument(
        "--rate-burst",
        type=int,
        default=None,
        metavar="N",
        help="requests a credential may send at once before --rate-limit applies "
        "(default: two seconds' worth, at least 1)",
    )
    p.add_argument(
        "--certfile",
        default=None,
        metavar="PEM",
        help="serve https with this certificate chain (with --keyfile)",
    )
    p.add_argument("--keyfile", default=None, metavar="PEM", help="the private key of --certfile")
    connections.add_args(p)
    p.set_defaults(func=_serve)


# What `pip install memfs` leaves out: the service's stack is the `serve` extra (a sandbox only mounts).
SERVE_EXTRA_HINT = "memfs serve needs the store service's stack: pip install 'memfs[serve]'"


def _serve(args: argparse.Namespace) -> int:
    try:
        from memfs.service.hosted import HostedOptions
        from memfs.service.orglimit import DEFAULT_BURST_S
        from memfs.service.server import run  # imports the server only for this command
        from memfs.service.serving import serve_options
    except ImportError as exc:
        if exc.name is None or exc.name.startswith("memfs"):
            raise  # memfs's own module: a broken install, not a missing extra
        print(f"{SERVE_EXTRA_HINT} ({exc.name} is not installed)", file=sys.stderr)
        return 2

    if args.max_memories < 1:
        print("memfs serve: --max-memories must be at least 1", file=sys.stderr)
        return 2
    if args.version_retention_days < 0 or args.retention_interval <= 0:
        print(
            "memfs serve: --version-retention-days must be >= 0 and --retention-interval > 0", file=sys.stderr
        )
        return 2
    if not (args.rate_limit >= 0 and math.isfinite(args.rate_limit)):  # also refuses nan
        print("memfs serve: --rate-limit must be a number >= 0 (requests/s; 0: no limit)", file=sys.stderr)
        return 2
    if args.rate_burst is not None and (args.rate_burst < 1 or not args.rate_limit):
        print("memfs serve: --rate-burst must be at least 1, and goes with --rate-limit", file=sys.stderr)
        return 2
    options = serve_options(args, args.db)
    if isinstance(options, str):
        print(f"memfs serve: {options}", file=sys.stderr)
        return 2
    try:
        org_limits = _org_limits(args)
    except ValueError as e:
        print(f"memfs serve: {e}", file=sys.stderr)
        return 2
    return run(
        options, args.max_memories, extensions=not args.hosted_api,
        retention_days=args.version_retention_days, retention_interval_s=args.retention_interval,
        console=args.console, rate_limit=args.rate_limit, rate_burst=args.rate_burst,
        hosted=HostedOptions(session_versions=args.session_versions == "allow",
                             late_versions=args.test_late_versions, repeat_conflicts=args.hosted_api,
                             unavailable=args.test_unavailable),
        org_limits=org_limits, org_burst_s=args.org_burst or DEFAULT_BURST_S,
    )  # fmt: skip


def _org_limits(args: argparse.Namespace) -> tuple[int, int] | None:
    """(reads, writes) a minute, or None: no per-organisation limits."""
    from memfs.service.orglimit import DEFAULT_READS_PER_MIN, DEFAULT_WRITES_PER_MIN, parse_limits

    if args.org_burst is not None and not (args.org_burst > 0 and math.isfinite(args.org_burst)):
        raise ValueError("--org-burst must be a number of seconds > 0")
    if args.org_limits is None:
        limits = (DEFAULT_READS_PER_MIN, DEFAULT_WRITES_PER_MIN) if args.hosted_api else None
    else:
        try:
            limits = parse_limits(args.org_limits)
        except ValueError as e:
            raise ValueError(f"--org-limits: {e}") from None
    if args.org_burst is not None and limits is None:
        raise ValueError("--org-burst goes with per-organisation limits (--hosted-api or --org-limits)")
    return limits
