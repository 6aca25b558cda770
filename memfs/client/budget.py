"""The client's request budget (SEMANTICS.md#d-budget): what it sent, by kind, in rolling windows,
and the one hold a 429 (or a 5xx with retry-after) puts on every request of the client.

The hosted API is rate-limited per organisation: every request a mount sends is taken from every
other sandbox's and program's allowance. So the mount counts what it sends (`memfs status` shows
the last minute and hour), and a refusal that says how long to wait holds back the whole client,
all stores, pushes and queued requests included, not only the request that met it.
"""

from __future__ import annotations

import email.utils
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


class Pacer:
    """The rate the client sends at once the service has refused it with a 429: additive
    increase, multiplicative decrease on the request rate (TCP's congestion avoidance, on a rate
    rather than a window, since an organisation's limit is a rate).

    Unpaced until the first 429. Then each 429 halves the rate the client was sending at (measured
    over the last RATE_WINDOW seconds), once per event: a 429 of a request sent before the last
    decrease is the same event, not a new one (30 requests in flight meet the same empty bucket).
    From there the rate grows by RATE_GROWTH requests a second each second, and after RATE_FORGET
    seconds without a 429 the client is unpaced again (a mount that met a limit while downloading
    does not space out the few requests of its later ticks). So a client at a limit sends just
    under it, meeting a 429 every ten seconds or so instead of every other request: one mount's
    first download of 8 x 2,000 memories under the hosted limits met 1,479 429s for 2,893
    requests when it only went one at a time after a 429 and widened per answer.

    Times are `trio.current_time()` values passed in, so the rules are tested without a clock."""

    def __init__(self) -> None:
        self._base: float | None = None  # the rate set at the last decrease; None: unpaced
        self._decreased_at = float("-inf")
        self._next = 0.0  # the earliest time the next request may go
        self._sent: deque[float] = deque()  # send times of the last RATE_WINDOW seconds
        self.decreases = 0

    def rate(self, now: float) -> float | None:
        """Requests a second the client may send at `now`; None: unpaced."""
        if self._base is None or now - self._decreased_at > RATE_FORGET:
            return None
        return self._base + RATE_GROWTH * max(0.0, now - self._decreased_at)

    def reserve(self, now: float) -> float:
        """A request is about to go: the seconds it must wait first (0: now). Its turn is taken."""
        rate = self.rate(now)
        at = now if rate is None else max(now, self._next)
        if rate is not None:
            self._next = at + 1.0 / rate
        self._sent.append(at)
        while self._sent and self._sent[0] <= at - RATE_WINDOW:
            self._sent.popleft()
        return at - now

    def limited(self, sent_at: float, now: float) -> None:
        """A request sent at `sent_at` met a 429 (the org's limit) at `now`."""
        if sent_at < self._decreased_at:
            return  # sent before the last decrease: the same event
        recent = sum(1 for t in self._sent if t > now - RATE_WINDOW) / RATE_WINDOW
        rate = self.rate(now)
        base = recent if rate is None else min(rate, recent)
        self._base = max(RATE_FLOOR, base / 2)
        self._decreased_at = now
        self._next = max(self._next, now)
        self.decreases += 1
