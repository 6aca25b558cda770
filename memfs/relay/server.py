"""`memfs serve --upstream URL`: the relay put together and run (docs/OPERATIONS.md#relay).

The cache is the service's own storage (SQLite, or PostgreSQL shared by several relays), served by
the service's own app as the relay's admin; the front (front.py) decides what reaches it; the
poll (poller.py) runs in a thread of its own. uvicorn serves the front like `memfs serve`.
"""

from __future__ import annotations

import logging
import os
import sys

from memfs.logging_setup import setup_logging
from memfs.relay.access import DEFAULT_GRACE_S, DEFAULT_TTL_S, AccessBook
from memfs.relay.front import RelayFront
from memfs.relay.poller import DEFAULT_INTERVAL_S, Poller
from memfs.relay.upstream import Upstream, url_problem
from memfs.service import access_log, asgi_server
from memfs.service.app import create_app
from memfs.service.connections import ConnectionLimits
from memfs.service.mirror import Mirror
from memfs.service.retention import DEFAULT_INTERVAL_S as RETENTION_EVERY_S
from memfs.service.retention import Retention
from memfs.service.server import check_tls, guard_admin_key, key_and_storage

log = logging.getLogger("memfs.relay")

# The cache keeps a day of its own versions: they serve only the changes feed of mounts that were
# away (longer: a mount lists the store instead), never the history, which is the upstream's.
CACHE_RETENTION_DAYS = 1.0


def run(
    upstream_url: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8470,
    db_path: str | os.PathLike = "./memfs-data/relay.db",
    admin_key: str | None = None,
    interval: float = DEFAULT_INTERVAL_S,
    confirm_every: float = DEFAULT_TTL_S,
    confirm_grace: float = DEFAULT_GRACE_S,
    operator_key: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    limits: ConnectionLimits | None = None,
    key_on_command_line: bool = True,  # False: the admin key came from --admin-key-file
) -> int:
    formatter = setup_logging()
    access_log.install("memfs.service.access", sys.stderr, formatter)
    for problem in (url_problem(upstream_url), check_tls(certfile, keyfile)):
        if problem:
            print(f"memfs serve: {problem}", file=sys.stderr)
            return 2
    # the relay holds its admin key, the operator's key and, in memory, its clients' tokens
    guard_admin_key(admin_key if key_on_command_line else None)
    opened = key_and_storage(admin_key, db_path, relay_cache=True)
    if isinstance(opened, str):
        print(f"memfs serve: {opened}", file=sys.stderr)
        return 2
    key, storage = opened
    backend = storage.backend
    mirror = Mirror(backend)
    poller = Poller(upstream_url, mirror, interval=interval, operator_key=operator_key)
    upstream = Upstream(upstream_url)
    local = create_app(storage, key)
    book = AccessBook(ttl=confirm_every, grace=confirm_grace)
    front = RelayFront(local, key, upstream, poller, mirror, book)
    log.info(
        "relay to %s: a poll per store every %gs while it is used, access confirmed every %gs "
        "(served %gs more while the upstream cannot confirm it)",
        upstream_url,
        interval,
        confirm_every,
        confirm_grace,
    )
    poller.start(mirror.downloaded())
    try:
        asgi_server.run(
            front,
            host,
            port,
            Retention(backend, CACHE_RETENTION_DAYS),
            RETENTION_EVERY_S,
            certfile=certfile,
            keyfile=keyfile,
            limits=limits or ConnectionLimits(),
        )
    finally:
        poller.stop()
        storage.close()
    return 0
