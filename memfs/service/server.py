"""`memfs serve`: the service's app put together on what `open_serving` opened (serving.py: the
checks, the admin key, the database, the run on uvicorn, shared with the relay)."""

from __future__ import annotations

import logging

from memfs.limits import DEFAULT_MAX_MEMORIES
from memfs.service.app import create_app
from memfs.service.hosted import HostedOptions
from memfs.service.orglimit import DEFAULT_BURST_S, OrgLimits
from memfs.service.ratelimit import RateLimiter
from memfs.service.retention import DEFAULT_INTERVAL_S, DEFAULT_RETENTION_DAYS, Retention
from memfs.service.rules import StoreService
from memfs.service.serving import ServeOptions, open_serving

log = logging.getLogger("memfs.service")


def _org_limiter(storage: StoreService, limits: tuple[int, int] | None, burst_s: float) -> OrgLimits | None:
    """The per-organisation limits, shared through the database when it can (PostgreSQL:
    every replica draws on one allowance), else per process."""
    if limits is None:
        return None
    return OrgLimits(*limits, burst_s, shared=getattr(storage.backend, "org_take", None))


def run(
    options: ServeOptions,
    max_memories: int = DEFAULT_MAX_MEMORIES,
    extensions: bool = True,
    retention_days: float = DEFAULT_RETENTION_DAYS,
    retention_interval_s: float = DEFAULT_INTERVAL_S,
    console: bool = False,
    rate_limit: float = 0.0,  # requests/s per credential; 0: no limit
    rate_burst: int | None = None,
    hosted: HostedOptions | None = None,
    org_limits: tuple[int, int] | None = None,  # (reads, writes) a minute; None: no limits
    org_burst_s: float = DEFAULT_BURST_S,
) -> int:
    serving = open_serving(options, relay_cache=False)
    if serving is None:
        return 2
    with serving:
        limiter = RateLimiter(rate_limit, rate_burst) if rate_limit > 0 else None
        app = create_app(
            serving.storage,
            serving.key,
            max_memories,
            extensions=extensions,
            console=console,
            rate_limiter=limiter,
            hosted=hosted,
            org_limits=_org_limiter(serving.storage, org_limits, org_burst_s),
        )
        if app.org_limits is not None:
            log.info("organisation limits: %s", app.org_limits.describe())
        if limiter is not None:
            log.info(
                "rate limit: %g requests/s per credential, bursts of %d (per process)",
                limiter.rate,
                limiter.burst,
            )
        return serving.run(app, Retention(serving.storage.backend, retention_days), retention_interval_s)
