"""The client's request budget (SEMANTICS.md#d-budget): requests counted by kind in rolling windows,
and the one hold a refusal puts on every request of the client."""

from __future__ import annotations

import pytest

from memfs.budget import RequestBudget, kind_of
from memfs.errors import ApiError

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
