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
from collections import Counter
from typing import Any

from memfs.errors import ApiError

WINDOW_HOUR = 3600
WINDOW_MINUTE = 60
HOLD_CAP = 600.0  # seconds: the longest hold honoured (a broken header must not stop a mount for a day)

_STORE = r"/v1/memory_stores/[^/?]+"
# (method or "*", path pattern) -> kind; the first that matches wins.
_KINDS: list[tuple[str, re.Pattern[str], str]] = [
    ("*", re.compile(_STORE + r"/memory_versions"), "versions"),
    ("GET", re.compile(_STORE + r"/memories/?(\?|$)"), "list"),
    ("GET", re.compile(_STORE + r"/memories/[^/?]+"), "get"),
    ("DELETE", re.compile(_STORE + r"/memories/"), "delete"),
    ("POST", re.compile(_STORE + r"/(memories|memory_batch)"), "write"),
    ("*", re.compile(r"/v1/sessions"), "session"),
    ("*", re.compile(r"/v1/memory_store_counters"), "counter"),
    ("*", re.compile(r"/v1/memory_store_watch"), "watch"),
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
