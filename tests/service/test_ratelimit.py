"""The token bucket of memfs/service/ratelimit.py, on an injected clock (nothing sleeps)."""

from __future__ import annotations

import pytest

from memfs.service.ratelimit import SWEEP_EVERY_S, RateLimiter, default_burst, retry_after_headers


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_passes_then_the_next_request_waits_for_one_token():
    clock = Clock()
    limiter = RateLimiter(2.0, 3, clock=clock)
    assert [limiter.take("a") for _ in range(3)] == [None, None, None]
    assert limiter.take("a") == pytest.approx(0.5)  # one token at 2/s
    clock.now += 0.25
    assert limiter.take("a") == pytest.approx(0.25)  # half a token there: half the wait left
    clock.now += 0.25
    assert limiter.take("a") is None
    assert limiter.take("a") == pytest.approx(0.5)


def test_refused_requests_take_nothing():
    clock = Clock()
    limiter = RateLimiter(1.0, 1, clock=clock)
    assert limiter.take("a") is None
    for _ in range(100):  # a runaway client hammering: its wait does not grow
        assert limiter.take("a") == pytest.approx(1.0)
    clock.now += 1.0
    assert limiter.take("a") is None


def test_credentials_have_their_own_buckets():
    clock = Clock()
    limiter = RateLimiter(1.0, 2, clock=clock)
    assert limiter.take("runaway") is None
    assert limiter.take("runaway") is None
    assert limiter.take("runaway") is not None
    assert limiter.take("other") is None
    assert limiter.take("other") is None


def test_refill_is_capped_at_the_burst():
    clock = Clock()
    limiter = RateLimiter(10.0, 5, clock=clock)
    limiter.take("a")
    clock.now += 3600
    assert [limiter.take("a") for _ in range(5)] == [None] * 5
    assert limiter.take("a") is not None


def test_a_clock_that_steps_back_drains_nothing():
    clock = Clock()
    limiter = RateLimiter(1.0, 2, clock=clock)
    assert limiter.take("a") is None
    clock.now -= 50
    assert limiter.take("a") is None
    assert limiter.take("a") == pytest.approx(1.0)


def test_the_sweep_drops_only_full_buckets():
    clock = Clock()
    limiter = RateLimiter(1.0, 10, clock=clock)
    for key in ("idle", "busy"):
        limiter.take(key)
    assert len(limiter) == 2
    clock.now += SWEEP_EVERY_S - 5
    for _ in range(10):
        limiter.take("busy")  # drained now
    clock.now += 5  # a sweep is due: "idle" has long refilled, "busy" has 5 of 10 tokens
    limiter.take("new")
    assert len(limiter) == 2  # "busy" and "new"
    # Dropping a full bucket changes nothing: "idle" still has its whole burst.
    assert [limiter.take("idle") for _ in range(10)] == [None] * 10
    assert limiter.take("idle") is not None


@pytest.mark.parametrize("rate, burst", [(0, 1), (-1, 1), (float("nan"), 1), (float("inf"), 1), (1, 0)])
def test_bad_settings_are_refused(rate, burst):
    with pytest.raises(ValueError):
        RateLimiter(rate, burst)


def test_defaults_and_headers():
    assert default_burst(0.2) == 1
    assert default_burst(5) == 10
    assert RateLimiter(2.5).burst == 5
    # whole seconds rounded up (never early), at least 1; ms for clients that read them
    assert retry_after_headers(0.2) == {"retry-after": "1", "retry-after-ms": "200"}
    assert retry_after_headers(2.0001) == {"retry-after": "3", "retry-after-ms": "2001"}
