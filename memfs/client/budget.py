"""The client's request budget (SEMANTICS.md#d-budget): what it sent, by kind, in rolling windows,
and the one hold a 429 (or a 5xx with retry-after) puts on every request of the client.

The hosted API is rate-limited per organisation: every request a mount sends is taken from every
other sandbox's and program's allowance. So the mount counts what it sends (`memfs status` shows
the last minute and hour), and a refusal that says how long to wait holds back the whole client,
all stores, pushes and queued requests included, not only the request that met it.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import re
import time
from collections import Counter, deque
from typing import Any

from memfs.client.errors import ApiError
from memfs.protocol import COUNTERS_PATH, SESSIONS_PATH, STORES_PATH, WATCH_PATH

WINDOW_HOUR = 3600
WINDOW_MINUTE = 60
HOLD_CAP = 600.0  # seconds: the longest hold honoured (a broken header must not stop a mount for a day)
RATE_FLOOR = 1.0  # requests a second: the slowest a paced client goes
RATE_WINDOW = 2.0  # seconds of sends the rate at a 429 is measured over
RATE_GROWTH = 1.0  # requests a second added each second after a 429
RATE_FORGET = 60.0  # seconds without a 429 after which the client is unpaced again

_STORE = re.escape(STORES_PATH) + r"/[^/?]+"
# (method or "*", path pattern) -> kind; the first that matches wins.
_KINDS: list[tuple[str, re.Pattern[str], str]] = [
    ("*", re.compile(_STORE + r"/memory_versions"), "versions"),
    ("GET", re.compile(_STORE + r"/memories/?(\?|$)"), "list"),
    ("GET", re.compile(_STORE + r"/memories/[^/?]+"), "get"),
    ("DELETE", re.compile(_STORE + r"/memories/"), "delete"),
    ("POST", re.compile(_STORE + r"/(memories|memory_batch)"), "write"),
    ("*", re.compile(re.escape(SESSIONS_PATH)), "session"),
    ("*", re.compile(re.escape(COUNTERS_PATH)), "counter"),
    ("*", re.compile(re.escape(WATCH_PATH)), "watch"),
    ("*", re.compile(_STORE + r"/changes"), "changes"),
    ("*", re.compile(_STORE + r"/snapshot"), "snapshot"),
]


def retry_after(resp: Any) -> float | None:
    """Seconds the service asks us to wait (`retry-after-ms`, `retry-after`: seconds or a date)."""
    ms = resp.headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = resp.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def kind_of(method: str, path: str) -> str:
    """A request's kind for the budget (`list`, `versions`, `get`, `write`, ...; `other`)."""
    for m, pattern, kind in _KINDS:
        if (m == "*" or m == method) and pattern.search(path):
            return kind
    return "other"


class RequestBudget:
    """Requests sent, per second and kind, for the last hour; and the client-wide hold.

    Counts are kept per wall-clock second (at most 3,600 small counters): a mount sends at most a
    few hundred requests a minute, and `memfs status` sums them when asked."""

    def __init__(self) -> None:
        self._seconds: dict[int, Counter[str]] = {}
        self.total = 0
        self.hold_until = 0.0  # time.monotonic() before which no request is sent
        self.held = 0  # requests that met the hold (waited, or failed without being sent)
        self.paced = 0  # requests that waited for their paced turn (memfs/client/turns.py)

    def count(self, kind: str) -> None:
        now = int(time.time())
        bucket = self._seconds.get(now)
        if bucket is None:
            bucket = self._seconds[now] = Counter()
            if len(self._seconds) > WINDOW_HOUR:
                for second in [s for s in self._seconds if s <= now - WINDOW_HOUR]:
                    del self._seconds[second]
        bucket[kind] += 1
        self.total += 1

    def window(self, seconds: int) -> dict[str, int]:
        since = int(time.time()) - seconds
        out: Counter[str] = Counter()
        for second, bucket in self._seconds.items():
            if second > since:
                out.update(bucket)
        return dict(sorted(out.items()))

    def snapshot(self) -> dict[str, object]:
        """`memfs status --json`'s `requests`."""
        return {
            "last_minute": self.window(WINDOW_MINUTE),
            "last_hour": self.window(WINDOW_HOUR),
            "total": self.total,
            "held": self.held,  # requests that met a hold: waited, or failed unsent
            "paced": self.paced,  # requests that waited for their turn at the service's rate
            "held_for": round(max(0.0, self.hold_until - time.monotonic()), 1),
        }

    def hold(self, seconds: float) -> None:
        """The service asked to wait `seconds`: no request of this client goes out before."""
        until = time.monotonic() + min(max(seconds, 0.0), HOLD_CAP)
        self.hold_until = max(self.hold_until, until)

    def wait_for(self, within: float) -> float:
        """Seconds a request must wait before it is sent (0: now). Longer than `within` (what
        the client retries inside a tick): an ApiError 429 without sending it, so the tick fails
        as if the service had refused it (SEMANTICS.md#d-unreachable) and nothing is sent sooner."""
        wait = self.hold_until - time.monotonic()
        if wait <= 0:
            return 0.0
        self.held += 1
        if wait > within:
            raise ApiError(
                429,
                "rate_limit_error",
                f"held back: the service asked this client to wait {wait:.0f}s more (a 429 met by another request)",
                None,
                wait,
            )
        return wait


# What the client knows of a service's limit before it has said anything: the hosted API's
# documented defaults (the Managed Agents reference: 1,200 reads and 300 writes a minute per
# organisation) for the hosted API's own hosts; nothing for any other service (a `memfs serve`
# without limits must not be slowed to them). Its burst is not documented: "limits are enforced
# over short intervals", so 3 seconds' worth is assumed (what `memfs serve --hosted-api` applies)
# until the service's `anthropic-ratelimit-requests-*` headers say better.
HOSTED_HOSTS = ("api.anthropic.com",)
HOSTED_PER_MINUTE = {"read": 1200, "write": 300}
ASSUMED_BURST_S = 3.0
# Tokens the mirror keeps below the service's bucket. The mirror trails the service by itself:
# an answer's `remaining` is whole requests (rounded down), the refill since the service counted
# is taken from half the round trip, and a request the mirror lets go is counted a forward trip
# later, the bucket refilling meanwhile. One token more covers what that leaves: an answer whose
# forward trip was slower than the next request's by up to 1/rate (50 ms at 20 a second), or a
# request sent just before an answered one and counted after it. Three (min(3, burst / 10), the
# first mirror's) left ~0.15 s of every paced download unused and met no 429 either way
# (docs/PERFORMANCE.md, the first download's rows).
MARGIN = 1.0
LIMIT_HEADER = "anthropic-ratelimit-requests-limit"
REMAINING_HEADER = "anthropic-ratelimit-requests-remaining"
RESET_HEADER = "anthropic-ratelimit-requests-reset"
RATE_HEADERS = (LIMIT_HEADER, REMAINING_HEADER, RESET_HEADER)  # what `Pacer.heard` reads
_WRITE_METHODS = frozenset(("POST", "DELETE", "PUT", "PATCH"))
_STORE_ID = re.compile(re.escape(STORES_PATH) + r"/([^/?]+)")


def class_of(method: str) -> str:
    """The limit a request draws on: `read` (GET, HEAD) or `write`, as the hosted API classes them."""
    return "write" if method.upper() in _WRITE_METHODS else "read"


def store_of(path: str) -> str:
    """The store a request is for ("" for none: the session, the counters): whose turn it takes."""
    m = _STORE_ID.search(path)
    return m.group(1) if m else ""


def is_hosted(base_url: str) -> bool:
    host = re.sub(r"^[a-z]+://", "", base_url.lower()).split("/", 1)[0].rsplit(":", 1)[0]
    return host in HOSTED_HOSTS


class Bucket:
    """A mirror of the service's token bucket for one class of requests: `capacity` tokens (its
    burst less a margin), refilled at `rate` a second, one taken per request sent. Turns may be
    reserved ahead of the tokens (`level` below zero: requests waiting their time), as a GCRA
    schedules them; `due` is when the next request may go."""

    def __init__(self, rate: float, burst: float, now: float):
        self.rate = rate
        self.burst = burst  # the service's, as known
        self.capacity = self._capacity(burst)
        self.level = self.capacity
        self.at = now

    @staticmethod
    def _capacity(burst: float) -> float:
        return max(1.0, burst - MARGIN)

    def refill(self, now: float) -> None:
        if now > self.at:
            self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
            self.at = now

    def due(self, now: float) -> float:
        """Seconds until a token is there (0: now)."""
        self.refill(now)
        return 0.0 if self.level >= 1.0 else (1.0 - self.level) / self.rate

    def take(self, now: float) -> float:
        """A request's turn: the seconds it must wait for its token (0: now); the token is taken."""
        wait = self.due(now)
        self.level -= 1.0
        return wait

    def learn(
        self, per_minute: float, burst: float | None, level: float | None, now: float, *, exact: bool = False
    ) -> None:
        """What the service said: its rate, its burst (None: not said), and an estimate of its
        bucket's level now (None: not said). The mirror never holds more than the service does:
        an estimate brings it down; an `exact` one (`Pacer.heard`) sets it, up too."""
        self.refill(now)
        self.rate = per_minute / 60.0
        if burst is not None and burst != self.burst:
            self.burst = burst
            self.capacity = self._capacity(burst)
            self.level = min(self.level, self.capacity)
        if level is not None:
            self.level = min(self.capacity, level - MARGIN) if exact else min(self.level, level - MARGIN)


class Pacer:
    """The rate the client sends at (SEMANTICS.md#d-budget): a mirror of the service's limit
    where it is known, the rate a 429 taught where it is not.

    **Known** (the hosted API's documented defaults for its hosts; what a service's
    `anthropic-ratelimit-requests-{limit,remaining,reset}` headers say, on any answer, for the
    class of the request they answered): a token bucket per class (reads, writes) like the
    service's, from the first request: its burst at once, then its rate, each answer's
    `remaining` bringing the mirror down to what the service holds (others of the organisation
    spend it too). So a download runs at the limit, not into it, and meets no 429 while it has the
    organisation to itself.

    **Not known** (a service that says nothing): unpaced until the first 429. Then each 429 halves
    the rate the client was sending at (measured over the last RATE_WINDOW seconds), once per event:
    a 429 of a request sent before the last decrease is the same event, not a new one (30 requests
    in flight meet the same empty bucket). From there the rate grows by RATE_GROWTH requests a
    second each second, and after RATE_FORGET seconds without a 429 the client is unpaced again (a
    mount that met a limit while downloading does not space out the few requests of its later
    ticks): additive increase, multiplicative decrease on the request rate (TCP's congestion
    avoidance, on a rate rather than a window, since an organisation's limit is a rate). One
    mount's first download of 8 x 2,000 memories under the hosted limits met 1,479 429s for
    2,893 requests when it only went one at a time after a 429 and widened per answer.

    Times are `trio.current_time()` values passed in, so the rules are tested without a clock."""

    def __init__(self, known: dict[str, float] | None = None, now: float = 0.0) -> None:
        """`known`: requests a minute per class assumed before the service says (the hosted API's)."""
        self.buckets: dict[str, Bucket] = {
            cls: Bucket(n / 60.0, n / 60.0 * ASSUMED_BURST_S, now) for cls, n in (known or {}).items()
        }
        self.told: set[str] = set()  # classes whose limit the service's headers gave
        self._base: float | None = None  # the rate set at the last decrease; None: unpaced
        self._decreased_at = float("-inf")
        self._next = 0.0  # the earliest time the next request may go
        self._sent: deque[tuple[float, str]] = deque()  # (time, class) of the last RATE_WINDOW s's sends
        self.decreases = 0

    @classmethod
    def for_service(cls, base_url: str, now: float = 0.0) -> Pacer:
        return cls(dict(HOSTED_PER_MINUTE) if is_hosted(base_url) else None, now)

    def known_rate(self, cls: str) -> float | None:
        """Requests a second the service's limit of `cls` allows, where it is known."""
        bucket = self.buckets.get(cls)
        return bucket.rate if bucket is not None else None

    def rate(self, now: float) -> float | None:
        """Requests a second a 429 taught (not known limits); None: not paced by 429s."""
        if self._base is None or now - self._decreased_at > RATE_FORGET:
            return None
        return self._base + RATE_GROWTH * max(0.0, now - self._decreased_at)

    def paced(self, now: float, cls: str = "read") -> bool:
        """Whether a request of `cls` waits for a turn at all (else it goes at once)."""
        return cls in self.buckets or self.rate(now) is not None

    def reserve(self, now: float, cls: str = "read") -> float:
        """A request is about to go: the seconds it must wait first (0: now). Its turn is taken."""
        at = now
        bucket = self.buckets.get(cls)
        if bucket is not None:
            at = now + bucket.take(now)
        rate = self.rate(now)
        if rate is not None and cls not in self.told:
            at = max(at, self._next)
            self._next = at + 1.0 / rate
        self._sent.append((at, cls))
        while self._sent and self._sent[0][0] <= at - RATE_WINDOW:
            self._sent.popleft()
        return at - now

    def heard(self, cls: str, header: Any, sent_at: float, now: float) -> None:
        """An answer to a request of `cls` sent at `sent_at` came at `now`; `header(name)` gives
        its headers (None when absent). Its `anthropic-ratelimit-requests-*` headers, when there,
        set the class's mirror: the limit a minute (the rate), the burst (`remaining` plus what
        the bucket lacks until `reset`, the time it is full again, RFC 3339), and its level: what
        remained then, less the requests sent since, plus what refilled meanwhile (half the round
        trip: when the service counted is not known better)."""
        try:
            limit = float(header(LIMIT_HEADER) or 0)
        except ValueError:
            return
        if limit <= 0:
            return
        rate = limit / 60.0
        remaining = burst = None
        try:
            value = header(REMAINING_HEADER)
            remaining = float(value) if value is not None else None
        except ValueError:
            pass
        reset = _rfc3339(header(RESET_HEADER))
        if remaining is not None:
            lacking = max(0.0, reset - time.time()) * rate if reset is not None else 0.0
            burst = min(limit, max(remaining + 1.0, math.floor(remaining + lacking + 0.5)))
        bucket = self.buckets.get(cls)
        if bucket is None:
            bucket = self.buckets[cls] = Bucket(rate, burst or rate * ASSUMED_BURST_S, now)
        level = None
        exact = False
        if remaining is not None:
            since = sum(1 for t, c in self._sent if t > sent_at and c == cls)
            level = remaining - since + rate * max(0.0, now - sent_at) / 2
            # Exact when no other request went out near this one: none sent in the half turn
            # before it (the rate's spacing: one sent earlier is counted earlier) nor after it
            # until its answer; the turns reserved since have not left yet. Then `remaining`
            # counted every request but those, and the estimate may also raise the mirror.
            # Otherwise (requests in flight together: a burst, concurrent chains) the service may
            # have counted some before this one and some after, and an estimate only lowers it:
            # from those alone the mirror ratcheted down to the most pessimistic of dozens of
            # answers and stayed 2-3 tokens below the service for the rest of a download.
            before = sum(1 for t, c in self._sent if c == cls and sent_at - 0.5 / rate < t <= sent_at)
            after = sum(1 for t, c in self._sent if c == cls and sent_at < t <= now)
            exact = before <= 1 and not after  # the one before: this request's own turn
        bucket.learn(limit, burst, level, now, exact=exact)
        self.told.add(cls)

    def limited(self, sent_at: float, now: float, cls: str = "read") -> None:
        """A request sent at `sent_at` met a 429 (the org's limit) at `now`. Where the service
        told its limit, its headers (`remaining` 0) have brought the mirror down already, and
        the retry-after holds the client: the rate is not halved on top."""
        if cls in self.told:
            return
        if sent_at < self._decreased_at:
            return  # sent before the last decrease: the same event
        recent = sum(1 for t, _c in self._sent if t > now - RATE_WINDOW) / RATE_WINDOW
        rate = self.rate(now)
        base = recent if rate is None else min(rate, recent)
        self._base = max(RATE_FLOOR, base / 2)
        self._decreased_at = now
        self._next = max(self._next, now)
        self.decreases += 1


def _rfc3339(value: str | None) -> float | None:
    """A `...-reset` header's time (RFC 3339, e.g. 2026-12-04T22:50:01.250Z) as a Unix time."""
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
