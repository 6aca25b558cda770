"""The client's request budget (SEMANTICS.md#d-budget): requests counted by kind in rolling windows,
and the one hold a refusal puts on every request of the client."""

from __future__ import annotations

import datetime
import time
from itertools import pairwise

import pytest

from memfs.client.budget import (
    ASSUMED_BURST_S,
    LIMIT_HEADER,
    MARGIN,
    RATE_FLOOR,
    RATE_FORGET,
    RATE_GROWTH,
    REMAINING_HEADER,
    RESET_HEADER,
    Pacer,
    RequestBudget,
    kind_of,
)
from memfs.client.errors import ApiError

S = "/v1/memory_stores/memstore_x"


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("GET", f"{S}/memories", "list"),
        ("GET", f"{S}/memories?view=basic&limit=100&depth=1", "list"),
        ("GET", f"{S}/memories/mem_1", "get"),
        ("POST", f"{S}/memories", "write"),
        ("POST", f"{S}/memories/mem_1", "write"),
        ("POST", f"{S}/memory_batch", "write"),
        ("DELETE", f"{S}/memories/mem_1", "delete"),
        ("GET", f"{S}/memory_versions", "versions"),
        ("GET", "/v1/sessions/sesn_1", "session"),
        ("GET", "/v1/memory_store_counters", "counter"),
        ("GET", "/v1/memory_store_watch", "watch"),
        ("GET", f"{S}/changes", "changes"),
        ("GET", f"{S}/snapshot", "snapshot"),
    ],
)
def test_each_request_has_its_kind(method, path, kind):
    assert kind_of(method, path) == kind


def test_counts_by_kind_in_the_last_minute_and_hour():
    b = RequestBudget()
    for kind in ["versions", "versions", "get", "list"]:
        b.count(kind)
    snap = b.snapshot()
    assert snap["last_minute"] == snap["last_hour"] == {"get": 1, "list": 1, "versions": 2}
    assert snap["total"] == 4 and snap["held_for"] == 0


def test_a_hold_is_waited_out_when_short_and_fails_the_request_unsent_when_long():
    b = RequestBudget()
    assert b.wait_for(4.0) == 0.0
    b.hold(2.0)
    assert 1.5 < b.wait_for(4.0) <= 2.0  # short: wait where it stands
    b.hold(30.0)
    with pytest.raises(ApiError) as err:
        b.wait_for(4.0)
    assert err.value.status == 429 and err.value.retryable and 25 < (err.value.retry_after or 0) <= 30
    b.hold(1.0)  # a shorter refusal never shortens the hold
    assert b.snapshot()["held_for"] > 25
    b.hold(10**9)  # capped: a broken header must not stop the mount for a day
    assert b.snapshot()["held_for"] <= 600


def test_the_pacer_sends_at_once_until_a_429():
    p = Pacer()
    assert [p.reserve(10.0) for _ in range(50)] == [0.0] * 50
    assert p.rate(10.0) is None


def _limited_at_20_a_second() -> Pacer:
    p = Pacer()
    for i in range(40):  # 20 a second for 2 s
        p.reserve(i * 0.05)
    p.limited(sent_at=1.95, now=2.0)
    return p


def test_a_429_halves_the_rate_sent_at_and_spaces_the_next_requests():
    p = _limited_at_20_a_second()
    assert p.rate(2.0) == pytest.approx(10.0, rel=0.1)
    waits = [p.reserve(2.0) for _ in range(4)]  # four requests at once, one every 1/rate
    assert waits[0] == 0.0
    for a, b in pairwise(waits):
        assert b - a == pytest.approx(0.1, rel=0.15)


def test_requests_in_flight_at_the_decrease_do_not_halve_again():
    p = _limited_at_20_a_second()
    rate = p.rate(2.01)
    for _ in range(30):  # the other requests of the same burst meet the same empty bucket
        p.limited(sent_at=1.9, now=2.01)
    assert p.rate(2.01) == rate and p.decreases == 1
    p.reserve(2.5)
    p.limited(sent_at=2.5, now=2.55)  # one sent after the decrease: a new event
    assert p.decreases == 2 and p.rate(2.55) < rate


def test_the_rate_grows_a_request_a_second_each_second_then_the_client_is_unpaced():
    p = _limited_at_20_a_second()
    start = p.rate(2.0)
    assert p.rate(12.0) == pytest.approx(start + 10 * RATE_GROWTH)
    assert p.rate(2.0 + RATE_FORGET + 1) is None
    assert p.reserve(2.0 + RATE_FORGET + 1) == 0.0 and p.reserve(2.0 + RATE_FORGET + 1) == 0.0


def test_the_rate_never_drops_below_the_floor():
    p = Pacer()
    p.reserve(0.0)
    p.limited(sent_at=0.0, now=50.0)  # nothing sent recently: a limit met on others' requests
    assert p.rate(50.0) == RATE_FLOOR


def _headers(limit: int, remaining: int, full_in: float) -> dict[str, str]:
    """What `memfs serve --hosted-api` (and the hosted API) send: the limit a minute, the whole
    requests left, when the bucket is full again."""
    reset = datetime.datetime.fromtimestamp(time.time() + full_in, datetime.UTC)
    return {
        LIMIT_HEADER: str(limit),
        REMAINING_HEADER: str(remaining),
        RESET_HEADER: reset.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }


def test_the_hosted_api_is_paced_from_the_first_request_at_its_documented_limits():
    p = Pacer.for_service("https://api.anthropic.com")
    burst = 1200 / 60 * ASSUMED_BURST_S
    waits = [p.reserve(0.0, "read") for _ in range(100)]
    at_once = sum(1 for w in waits if w == 0.0)
    assert at_once == burst - MARGIN  # the burst (less a margin) at once
    for a, b in pairwise(waits[at_once:]):
        assert b - a == pytest.approx(1 / 20)  # then 1,200 a minute
    assert p.reserve(0.0, "write") == 0.0 and p.paced(0.0, "write")  # writes have a bucket of their own
    other = Pacer.for_service("http://127.0.0.1:8080")  # a service that has said nothing: unpaced
    assert not other.paced(0.0) and [other.reserve(0.0) for _ in range(100)] == [0.0] * 100


def test_the_services_headers_set_the_mirror_of_its_bucket():
    p = Pacer()
    # 600 a minute (10/s); 9 left after this request; full again in 0.1 s: a burst of 10
    p.heard("read", _headers(600, 9, 0.1).get, 0.0, 0.0)
    assert p.paced(0.0, "read") and not p.paced(0.0, "write")
    bucket = p.buckets["read"]
    assert bucket.burst == 10 and bucket.rate == 10.0
    waits = [p.reserve(0.0, "read") for _ in range(20)]
    assert waits[: int(bucket.capacity) - 1] == [0.0] * (int(bucket.capacity) - 1)
    assert waits[-1] == pytest.approx(waits[-2] + 0.1)


def test_what_remains_at_the_service_brings_the_mirror_down():
    """Others of the organisation spend its allowance too: an answer saying 0 remain leaves the
    next request waiting for a token, and a 429 then does not halve the rate on top."""
    p = Pacer()
    p.heard("read", _headers(600, 9, 0.1).get, 0.0, 0.0)
    p.heard("read", _headers(600, 0, 1.0).get, 1.0, 1.0)
    assert p.reserve(1.0, "read") > 0.0
    p.limited(sent_at=1.0, now=1.0, cls="read")
    assert p.decreases == 0 and p.rate(1.0) is None


def test_headers_that_say_nothing_usable_change_nothing():
    p = Pacer()
    for bad in ({}, {LIMIT_HEADER: "lots"}, {LIMIT_HEADER: "0"}):
        p.heard("read", bad.get, 0.0, 0.0)
    assert not p.paced(0.0)
    p.heard("read", {LIMIT_HEADER: "120", RESET_HEADER: "yesterday"}.get, 0.0, 0.0)  # no remaining
    assert p.buckets["read"].rate == 2.0 and p.buckets["read"].burst == 2.0 * ASSUMED_BURST_S


def test_an_answer_to_a_request_alone_in_flight_sets_the_mirror_up_as_well_as_down():
    """Answers to requests sent together may each have been counted before or after the others,
    so they only bring the mirror down; one to a request that went out alone (none sent in the
    half turn before it, none until its answer) is exact, and lifts a mirror they left too low."""
    p = Pacer()
    p.heard("read", _headers(1200, 59, 0.05).get, 0.0, 0.0)  # 20 a second, a burst of 60
    p.reserve(0.0, "read")
    for _ in range(29):
        p.reserve(0.001, "read")  # 29 right after it
    # The service counted the 29 before the first: "remaining 30", and the mirror takes the 29
    # sent after it for not counted yet. Too low, but not exact: down it goes.
    p.heard("read", _headers(1200, 30, 1.5).get, 0.0, 0.04)
    assert p.buckets["read"].level == pytest.approx(30 - 29 + 20 * 0.02 - MARGIN)
    # A request sent alone a second later hears what is true: 60 - 31 + 20 = 49 left, or 48
    # with it; it lifts the mirror there (less the margin).
    p.reserve(1.0, "read")
    p.heard("read", _headers(1200, 48, 0.6).get, 1.0, 1.04)
    assert p.buckets["read"].level == pytest.approx(48 + 20 * 0.02 - MARGIN)
    # Not alone (another sent while it was in flight): it lowers, never lifts.
    p.reserve(1.5, "read")
    p.reserve(1.51, "read")
    before = p.buckets["read"].level
    p.heard("read", _headers(1200, 59, 0.05).get, 1.5, 1.54)
    assert p.buckets["read"].level <= before + 20 * 0.04
