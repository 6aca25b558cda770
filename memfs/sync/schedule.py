"""When the next timed tick is due (SEMANTICS.md#d-when, #d-unreachable, #d-no-counter): the last
attempt, the wait the service asked for, whether the mount is in use, and the safety net's turns
(without a counter: which store's feed is read over the wide window, which store is listed whole)."""

from __future__ import annotations

import logging
import math
import time

import trio

from memfs.client.errors import ApiError
from memfs.records import StoreInfo
from memfs.sync.options import EngineOptions

log = logging.getLogger("memfs.sync")

RETRY_AFTER_CAP = 600.0  # seconds: the longest retry-after a failed tick honours (a broken header must not stop sync for a day)


class PollSchedule:
    def __init__(self, options: EngineOptions, stores: list[StoreInfo]):
        self.interval = options.interval
        self.idle_poll = options.idle_poll
        self.safety_net = options.safety_net
        self.full_listing = options.full_listing
        self.stores = stores
        self.last_attempt: float | None = None  # trio time the last tick (or a failed watch) began
        self.not_before = -math.inf  # trio time the service's retry-after asked us to wait for
        self.used_at = -math.inf  # time.monotonic() of the last `memfs sync`
        self.polled_at = -math.inf  # time.monotonic() the last tick began
        self._next_net = math.inf  # trio time of the next safety-net listing (set by `started`)
        self._net_turn = -1  # index in self.stores of the last store the safety net listed
        self._next_full = math.inf  # trio time of the next full listing of one store (the rare one)
        self._full_turn = -1  # index in self.stores of the last store listed whole

    def started(self) -> None:
        """The download was this interval's pull: the safety net's turns count from it."""
        self.attempted()
        assert self.last_attempt is not None
        self._next_net = self.last_attempt + self.safety_net
        self._next_full = self.last_attempt + self.full_listing

    def attempted(self) -> None:
        """A tick (or a watch) was tried now: a failed one counts (SEMANTICS.md#d-unreachable)."""
        self.last_attempt = trio.current_time()

    def used(self) -> None:
        """A `memfs sync`: the mount is in use."""
        self.used_at = time.monotonic()

    def waiting(self, until: float = -math.inf) -> bool:
        """No request of ours yet: before `until` (trio time) or the wait the service asked for."""
        return trio.current_time() < max(until, self.not_before)

    def due_in(self, *, has_counter: bool | None, in_use: bool) -> float:
        now = trio.current_time()
        if self.last_attempt is None:
            return max(0.0, self.not_before - now)
        interval = self.interval
        if has_counter is False and not in_use:
            interval = max(interval, self.idle_poll)  # nobody used the mount: back off
        return max(0.0, self.last_attempt + interval - now, self.not_before - now)

    def in_use(self, last_activity: float) -> bool:
        """A filesystem request (at `last_activity`) or a `memfs sync` since the last tick began
        (SEMANTICS.md#d-no-counter: without one, a mount against the hosted API backs off its polls)."""
        return max(last_activity, self.used_at) >= self.polled_at

    def turns(
        self, stores: list[StoreInfo], *, has_counter: bool | None, in_use: bool
    ) -> tuple[str | None, str | None]:
        """The safety net of a tick over `stores` (SEMANTICS.md#d-no-counter), only while the mount
        is in use: (the store whose feed is read over the wide window, at most once per
        `safety_net` seconds; the store listed whole, at most once per `full_listing` seconds),
        each round robin."""
        if has_counter is not False or len(stores) != len(self.stores) or not in_use:
            return None, None
        now = trio.current_time()
        wide = full = None
        if now >= self._next_full:
            self._next_full = now + self.full_listing
            self._full_turn = (self._full_turn + 1) % len(self.stores)
            full = self.stores[self._full_turn].store_id
        if now >= self._next_net:
            self._next_net = now + self.safety_net
            self._net_turn = (self._net_turn + 1) % len(self.stores)
            wide = self.stores[self._net_turn].store_id
        return wide, full

    def asked_to_wait(self, exc: Exception) -> None:
        """A refusal that said how long to wait (429 or 5xx with retry-after, longer than a tick
        retries itself): no tick of ours, timed or live, comes before it (SEMANTICS.md#d-unreachable).
        A forced `memfs sync` runs its tick, but the client holds every request until then
        (memfs/client/budget.py, SEMANTICS.md#d-budget): it fails at once, sending nothing."""
        wait = exc.retry_after if isinstance(exc, ApiError) and exc.retryable else None
        if wait:
            until = trio.current_time() + min(wait, RETRY_AFTER_CAP)
            if until > self.not_before:
                self.not_before = until
                log.info(
                    "the service asked to wait %.0fs before the next request", min(wait, RETRY_AFTER_CAP)
                )
