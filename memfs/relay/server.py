"""`memfs serve --upstream URL`: the relay put together and run (docs/OPERATIONS.md#relay).

The cache is the service's own storage (SQLite, or PostgreSQL shared by several relays), served by
the service's own app as the relay's admin; the front (front.py) decides what reaches it; the
poll (poller.py) runs in a thread of its own. uvicorn serves the front like `memfs serve`.
"""

from __future__ import annotations

import logging

from memfs.relay.access import DEFAULT_GRACE_S, DEFAULT_TTL_S, AccessBook
from memfs.relay.front import RelayFront
from memfs.relay.poller import DEFAULT_INTERVAL_S, Poller
from memfs.relay.upstream import Upstream, url_problem
from memfs.service.app import create_app
from memfs.service.mirror import Mirror
from memfs.service.retention import DEFAULT_INTERVAL_S as RETENTION_EVERY_S
from memfs.service.retention import Retention
from memfs.service.serving import ServeOptions, open_serving

log = logging.getLogger("memfs.relay")

# The cache keeps a day of its own versions: they serve only the changes feed of mounts that were
# away (longer: a mount lists the store instead), never the history, which is the upstream's.
CACHE_RETENTION_DAYS = 1.0


def run(
    upstream_url: str,
    options: ServeOptions,
    *,
    interval: float = DEFAULT_INTERVAL_S,
    confirm_every: float = DEFAULT_TTL_S,
    confirm_grace: float = DEFAULT_GRACE_S,
    operator_key: str | None = None,
) -> int:
    # the relay holds its admin key, the operator's key and, in memory, its clients' tokens
    serving = open_serving(options, relay_cache=True, problems=(url_problem(upstream_url),))
    if serving is None:
        return 2
    with serving:
        mirror = Mirror(serving.storage.backend)
        poller = Poller(upstream_url, mirror, interval=interval, operator_key=operator_key)
        local = create_app(serving.storage, serving.key)
        book = AccessBook(ttl=confirm_every, grace=confirm_grace)
        front = RelayFront(local, serving.key, Upstream(upstream_url), poller, mirror, book)
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
            return serving.run(
                front, Retention(serving.storage.backend, CACHE_RETENTION_DAYS), RETENTION_EVERY_S
            )
        finally:
            poller.stop()
