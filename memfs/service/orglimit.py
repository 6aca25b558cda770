"""Per-organisation rate limits, as the hosted API enforces them (`memfs serve --hosted-api`).

The hosted API limits an organisation, not a client: read endpoints 1,200 requests a minute and
write endpoints 300 (the Managed Agents reference page), shared by every key, session and
program of the organisation. The emulator is one organisation: every credential on every replica
draws on one allowance per class, so a bench or a test sees what a fleet of sandboxes would meet.

- Class by method: GET (and HEAD) is a read, POST and DELETE are writes. Only `/v1/…` requests
  whose credential authenticates count (the frame checks it first, credential_check.py): an
  anonymous request or a garbage key belongs to no organisation and is a 401 that takes nothing,
  so invalid keys cannot drain the allowance of the legitimate clients (before, six requests
  with garbage keys did, when any credential header counted); health, metrics and the console
  never count.
- A token bucket per class (ratelimit.py's): `rate` a minute, and a burst of `burst_s` seconds'
  worth. Anthropic's docs say limits are enforced over short intervals (60 a minute may be
  enforced as 1 a second), so the burst is small: 3 seconds by default (60 reads, 15 writes).
- Over the limit: 429 `rate_limit_error` with `retry-after` (whole seconds, rounded up) and
  `retry-after-ms`; a refused request takes nothing from the bucket.
- Every counted answer, refused or not, says where its class stands, in the headers the hosted API
  documents (its rate-limits page): `anthropic-ratelimit-requests-limit` (the class's requests a
  minute), `-remaining` (whole requests left in the bucket) and `-reset` (RFC 3339: when the bucket
  is full again), so a client can pace itself at the limit (memfs/client/budget.py `Pacer`).
- It runs in the outermost frame (frame.py `RequestFrame`), after the credential check and the
  body, before the fast paths (counter_path.py, list_path.py), so the requests they answer count
  like any other and they stay on: their answers are the same bytes as the full path's.
- Across replicas: with a `shared` taker (PostgreSQL: one row per class, updated in one statement,
  `postgres_backend.org_take`) the buckets live in the database; else they are per process.
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Callable

import anyio.to_thread

from memfs.protocol import API_PREFIX
from memfs.service.errors import ApiError, rate_limited
from memfs.service.ratelimit import RateLimiter, retry_after_headers

DEFAULT_READS_PER_MIN = 1200
DEFAULT_WRITES_PER_MIN = 300
DEFAULT_BURST_S = 3.0
CLASSES = ("read", "write")
_METHOD_CLASS = {"GET": "read", "HEAD": "read", "POST": "write", "DELETE": "write"}

# (class, rate per second, burst) -> seconds until a token, or None when one was taken
SharedTaker = Callable[[str, float, int], "float | None"]


def parse_limits(value: str) -> tuple[int, int] | None:
    """`READS,WRITES` (requests a minute; 0: that class unlimited) or `off` (None). ValueError
    on anything else."""
    if value.strip().lower() == "off":
        return None
    parts = value.split(",")
    if len(parts) != 2:
        raise ValueError(f"expected READS,WRITES or off, got {value!r}")
    reads, writes = (int(p.strip()) for p in parts)
    if reads < 0 or writes < 0:
        raise ValueError(f"requests a minute must be >= 0, got {value!r}")
    return reads, writes


def burst_for(per_minute: int, burst_s: float) -> int:
    return max(1, math.ceil(per_minute / 60.0 * burst_s))


class OrgLimits:
    def __init__(
        self,
        reads_per_min: int,
        writes_per_min: int,
        burst_s: float = DEFAULT_BURST_S,
        *,
        shared: SharedTaker | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not (burst_s > 0 and math.isfinite(burst_s)):
            raise ValueError(f"burst must be a positive number of seconds (got {burst_s!r})")
        self.per_minute = {"read": reads_per_min, "write": writes_per_min}
        self.burst = {c: burst_for(n, burst_s) for c, n in self.per_minute.items()}
        self._local = {
            c: RateLimiter(n / 60.0, self.burst[c], clock=clock) for c, n in self.per_minute.items() if n > 0
        }
        self._shared = shared
        self.burst_s = burst_s

    @staticmethod
    def classify(scope) -> str | None:
        """The class a request counts in if its credential authenticates, or None when it never
        counts (the frame counts it only once the credential is known to authenticate)."""
        cls = _METHOD_CLASS.get(scope["method"])
        if cls is None or not scope["path"].startswith(API_PREFIX):
            return None
        return cls

    async def take(self, cls: str) -> float | None:
        """Take one request of `cls`: None if it may go on, else the seconds until it may."""
        if cls not in self._local:  # 0: that class is not limited
            return None
        if self._shared is not None:
            return await anyio.to_thread.run_sync(
                self._shared, cls, self.per_minute[cls] / 60.0, self.burst[cls]
            )
        return self._local[cls].take("org")

    def headers(self, cls: str) -> list[tuple[bytes, bytes]]:
        """The hosted API's `anthropic-ratelimit-requests-*` headers for a request of `cls`, after
        it took (or was refused) its token: the limit a minute; with the buckets in this process,
        the whole requests left and when the bucket is full again (RFC 3339, to the millisecond).
        Buckets in the database (`shared`) are not read back: the limit alone."""
        n = self.per_minute[cls]
        if not n:
            return []
        out = [(b"anthropic-ratelimit-requests-limit", str(n).encode())]
        if self._shared is None:
            level = self._local[cls].level("org")
            full_in = (self.burst[cls] - level) / (n / 60.0)
            reset = datetime.datetime.fromtimestamp(time.time() + full_in, datetime.UTC)
            out.append((b"anthropic-ratelimit-requests-remaining", str(int(level)).encode()))
            out.append(
                (
                    b"anthropic-ratelimit-requests-reset",
                    reset.isoformat(timespec="milliseconds").replace("+00:00", "Z").encode(),
                )
            )
        return out

    def refusal(self, cls: str, wait_s: float) -> ApiError:
        what = "read" if cls == "read" else "write"
        return rate_limited(
            f"rate limit exceeded for this organisation: at most {self.per_minute[cls]} {what} requests "
            f"a minute (bursts of {self.burst[cls]}); retry after {wait_s:.3f} s",
            retry_after_headers(wait_s),
        )

    def describe(self) -> str:
        def one(cls: str) -> str:
            n = self.per_minute[cls]
            return f"{cls}s {n}/min (bursts of {self.burst[cls]})" if n else f"{cls}s unlimited"

        where = "shared through the database" if self._shared else "per process"
        return f"{one('read')}, {one('write')}, {where}"
