"""The lease watch reads heartbeat answers the way the SDK's heartbeat loop judges them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import anyio

from memfs.worker import lease


def answer(work_id: str, status: int, body: dict | None = None, path: str | None = None):
    content = json.dumps(body or {}).encode()

    async def aread():
        return content

    url = SimpleNamespace(path=path or f"/v1/environments/env_1/work/{work_id}/heartbeat")
    return SimpleNamespace(
        request=SimpleNamespace(url=url),
        status_code=status,
        is_success=200 <= status < 300,
        content=content,
        aread=aread,
    )


def feed(watch: lease.LeaseWatch, *responses) -> None:
    async def main():
        for r in responses:
            await watch.on_response(r)

    anyio.run(main)


def test_a_412_means_lost_and_other_items_and_paths_do_not_count():
    w = lease.LeaseWatch()
    feed(
        w,
        answer("work_a", 200, {"ttl_seconds": 30}),
        answer("work_b", 412),
        answer("work_a", 412, path="/v1/sessions/sesn_1/events"),
    )
    assert not w.lost("work_a") and w.lost("work_b")
    assert w.lost() is True  # the item seen last
    assert not lease.LeaseWatch().lost()  # nothing seen: not lost


def test_failing_heartbeats_mean_lost_only_after_a_whole_ttl(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(lease.time, "monotonic", lambda: clock[0])
    w = lease.LeaseWatch()
    feed(w, answer("work_a", 200, {"ttl_seconds": 10}))
    clock[0] += 5
    feed(w, answer("work_a", 503))
    assert not w.lost("work_a")
    clock[0] += 6  # 11 s since the last success, TTL 10 s
    assert w.lost("work_a")
    feed(w, answer("work_a", 200, {"ttl_seconds": 10}))
    assert not w.lost("work_a")


def test_a_fatal_4xx_heartbeat_is_a_lost_lease_where_the_sdk_says_so(monkeypatch):
    """anthropic 2.16 (lib/environments/_lease.py) counts any 4xx its retry policy will not retry as a
    lost lease; 2.10 only a 412. 408, 409 and 429 are transient under both."""
    for any_4xx in (True, False):
        monkeypatch.setattr(lease, "LEASE_RULES", lease.LEASE_RULES._replace(lost_on_any_fatal_4xx=any_4xx))
        w = lease.LeaseWatch()
        feed(w, *(answer(f"work_{s}", s) for s in (401, 403, 404, 408, 409, 429, 412)))
        assert [w.lost(f"work_{s}") for s in (401, 403, 404)] == [any_4xx] * 3
        assert [w.lost(f"work_{s}") for s in (408, 409, 429, 412)] == [False, False, False, True]


def test_before_the_first_answer_the_sdks_ttl_is_assumed(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(lease.time, "monotonic", lambda: clock[0])
    w = lease.LeaseWatch(installed_at=clock[0])
    clock[0] += lease.DEFAULT_TTL - 1
    feed(w, answer("work_a", 503))
    assert not w.lost("work_a")
    clock[0] += 2
    assert w.lost("work_a")
    assert lease.DEFAULT_TTL == lease.LEASE_RULES.ttl_before_first_answer
