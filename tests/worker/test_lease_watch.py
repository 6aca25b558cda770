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
