"""Per-credential rate limits: one token bucket per caller, answered as 429 with `retry-after`.

Pure and clock-injected (tests drive the clock; nothing here sleeps). A bucket holds up to `burst`
tokens and refills at `rate` tokens a second; a request takes one token or is refused with the
time until one is there. The app keys buckets by who authenticated (the admin key, a session), so
one runaway sandbox exhausts only its own bucket while every other credential on the same
process keeps its full allowance.

Memory: a bucket that has refilled to full is the same as no bucket, so a periodic sweep drops
those; what stays is the credentials active in the last `burst / rate` seconds. Per process: each
replica keeps its own buckets (docs/OPERATIONS.md says what that means behind a load balancer).
Not thread-safe: the app calls it from its event loop only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio.to_thread

from memfs.service.errors import ApiError, rate_limited
from memfs.service.responses import error_response

SWEEP_EVERY_S = 60.0


@dataclass
class _Bucket:
    tokens: float
    at: float  # clock reading when `tokens` was last brought up to date


class RateLimiter:
    def __init__(self, rate: float, burst: int | None = None, *, clock: Callable[[], float] = time.monotonic):
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"rate must be a positive number of requests per second (got {rate!r})")
        burst = default_burst(rate) if burst is None else burst
        if burst < 1:
            raise ValueError(f"burst must be at least 1 (got {burst!r})")
        self.rate = float(rate)
        self.burst = int(burst)
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._next_sweep = clock() + SWEEP_EVERY_S

    def take(self, key: str) -> float | None:
        """Take one token from `key`'s bucket: None if the request may go on, else the seconds
        until a token will be there (what `retry-after` tells the client)."""
        now = self._clock()
        if now >= self._next_sweep:
            self._sweep(now)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        else:
            self._refill(bucket, now)
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return (1.0 - bucket.tokens) / self.rate

    def level(self, key: str) -> float:
        """Tokens in `key`'s bucket now (a bucket not held is full)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return float(self.burst)
        self._refill(bucket, self._clock())
        return bucket.tokens

    def _refill(self, bucket: _Bucket, now: float) -> None:
        # max(0, …): a clock that steps back never drains a bucket.
        bucket.tokens = min(float(self.burst), bucket.tokens + max(0.0, now - bucket.at) * self.rate)
        bucket.at = now

    def _sweep(self, now: float) -> None:
        for key, bucket in list(self._buckets.items()):
            self._refill(bucket, now)
            if bucket.tokens >= self.burst:
                del self._buckets[key]
        self._next_sweep = now + SWEEP_EVERY_S

    def __len__(self) -> int:
        """Buckets held now (full ones are dropped at the next sweep)."""
        return len(self._buckets)


def default_burst(rate: float) -> int:
    """Two seconds' worth, at least 1: room for a mount's concurrent push wave at a modest rate."""
    return max(1, math.ceil(2 * rate))


def retry_after_headers(wait_s: float) -> dict[str, str]:
    """`retry-after` in whole seconds (HTTP allows no fraction; rounded up so a client that honours
    it is never early), and `retry-after-ms` for clients that read the finer one (the official
    `anthropic` client and memfs's own prefer it)."""
    return {
        "retry-after": str(max(1, math.ceil(wait_s))),
        "retry-after-ms": str(max(1, math.ceil(wait_s * 1000))),
    }


def caller_refusal(limiter: RateLimiter, metrics, session_id: str | None) -> ApiError | None:
    """Take one request from the bucket of the admin key (`session_id` None) or of a session: None,
    or the 429 to answer (counted in `metrics`). The routes (routes/core.py) and the fast paths take the
    limit here, so with the same key, the same count and the same answer."""
    if session_id is None:
        key, kind, who = "admin", "admin", "the admin key"
    else:
        key, kind, who = "session:" + session_id, "session", f"session {session_id}"
    wait = limiter.take(key)
    if wait is None:
        return None
    metrics.rate_limited(kind)
    return rate_limited(
        f"rate limit exceeded for {who}: at most {limiter.rate:g} requests/s (bursts of {limiter.burst}); "
        f"retry after {wait:.2f} s",
        retry_after_headers(wait),
    )


class FastPathLimit:
    """The per-credential limit as a fast path (counter_path.py, list_path.py) takes it: once its
    read has succeeded, as its last step before answering (so a request it leaves to the full path
    is counted there, once), with the full path's key: the admin key, or the id of the session
    holding the token (looked up as the full path looks it up)."""

    def __init__(self, limiter: RateLimiter, metrics, session_for_token: Callable):
        self.limiter = limiter
        self.metrics = metrics
        self.session_for_token = session_for_token  # StoreService.session_for_token

    async def check(self, token_hash: str | None, scope, receive, send) -> str:
        """ "go": answer the request; "sent": its 429 was sent, the bytes the full path sends;
        "full": leave it to the full path (no live session holds the token any more, a storage
        error), which has taken nothing yet."""
        session_id = None
        if token_hash is not None:
            try:
                session = await anyio.to_thread.run_sync(self.session_for_token, token_hash)
            except Exception:  # StorageError, a lost connection: the full path says what
                return "full"
            if session is None:
                return "full"
            session_id = session.id
        err = caller_refusal(self.limiter, self.metrics, session_id)
        if err is None:
            return "go"
        await error_response(err, scope["state"]["request_id"])(scope, receive, send)
        return "sent"
