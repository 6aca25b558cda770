"""A mount against a rate-limited service. Its pushes all land, a tick that still fails
is an attempt (SEMANTICS.md#d-unreachable), and a retry-after is waited out by the whole client, not hammered.

A real `memfs serve --rate-limit`, a real mount, and the loopback proxy of tests/support/proxy.py
in between to count (and, where said, answer) the mount's requests.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from memfs.client import CONCURRENCY, RATE_RETRIES
from tests.support.api import Api
from tests.support.proxy import Proxy
from tests.support.sandbox import Sandbox, SandboxWorld
from tests.support.service import ServiceProcess
from tests.support.world import StoreSpec

SLUG = "limited-notes"
CREATE = r"/memories$"


@contextmanager
def mounted_through(
    tmp: Path, *serve_args: str, mount_args: tuple[str, ...] = ()
) -> Iterator[tuple[Sandbox, Proxy, Api, ServiceProcess, str]]:
    world = SandboxWorld.serving(tmp, [StoreSpec("Limited Notes")], extra_args=serve_args)
    try:
        proxy = world.proxy()
        # One request per change, as against the hosted API: these tests count single creates. (A
        # batch route answered 404 is, to the mount, a service without one: it sends singles.)
        proxy.add("POST", r"/memory_batch$", "status", code=404)
        box = world.sandbox("box", base_url=proxy.url)
        box.mount(*mount_args)
        yield box, proxy, world.api, world.service, world.rw
    finally:
        world.close()


def landed(api: Api, store: str) -> set[str]:
    """Paths on the store, in one request (the admin key has its own bucket of the same limit)."""
    r = api.http.get(f"/v1/memory_stores/{store}/memories", params={"limit": 100},
                     headers={"anthropic-beta": "agent-memory-2026-07-22"})  # fmt: skip
    return {m["path"] for m in r.json()["data"]} if r.status_code == 200 else set()


def limited_count(svc: ServiceProcess) -> float:
    text = Api(svc.base_url, svc.admin_key).http.get("/metrics").text
    m = re.search(r'^memfs_rate_limited_requests_total\{credential="session"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def not_creates(proxy: Proxy) -> int:
    """Requests the proxy has logged that are not creates (one copy of its log: a create logged
    meanwhile does not split the count)."""
    return sum(1 for e in list(proxy.log) if not (e.method == "POST" and re.search(CREATE, e.path)))


def token_of(session: dict) -> str:
    return json.loads(base64.urlsafe_b64decode(session["work_secret"]))["sessions_token"]


@pytest.mark.timeout(180)
def test_pushes_through_a_real_rate_limit_all_land_and_failed_ticks_are_attempts(tmp_path):
    files = {f"/batch/f{i:02d}.md": f"file {i}\n" for i in range(24)}
    # Polling only: the bound below counts ticks by their counters requests, and a live mount's
    # push waves take their counters from the watch (no request), so they would go uncounted.
    with mounted_through(
        tmp_path, "--rate-limit", "2", "--rate-burst", "4", mount_args=("--live", "off")
    ) as (box, proxy, api, svc, store):
        top = box.root / SLUG
        (top / "batch").mkdir()
        for path, text in files.items():
            (top / path.lstrip("/")).write_text(text)
        proxy.reset_counts()
        # A short retry-after is paced within the tick (SEMANTICS.md#d-budget); one longer than a
        # tick waits out (client.RETRY_WITHIN) fails it: the first create meets one.
        proxy.add("POST", CREATE, "status", code=429, retry_after=6, times=1)
        results = [box.sync(check=False)]  # one tick: 24 creates against 4 tokens and 2 a second
        saw_attempt_rule = False
        deadline = time.monotonic() + 120
        while landed(api, store) != set(files) and time.monotonic() < deadline:
            if results[-1].get("ok") is False and not saw_attempt_rule:
                # SEMANTICS.md#d-unreachable: that failed tick was this interval's attempt. Asked again at once
                # (not forced), the mount sends nothing.
                # Counted where it is exact: the mount's client counts each request as it sends it
                # (`memfs status`: requests.total). The proxy logs a request only once its loop has
                # read it: the failed tick's creates go out at once, and those written before the
                # injected 429 came back are on the wire when the tick fails; on a loaded machine the
                # proxy read 19 of them after the tick had answered (CI: `assert 26 == 7`, the
                # tick's counters, batch and 24 creates). At the wire, nothing but those creates
                # arrives in the window (a tick begins with a counters request).
                sent = box.status()["requests"]["total"]
                other = not_creates(proxy)
                again = box.sync(force=False, wait=False, check=False)
                assert again.get("ran") is False, again
                assert box.status()["requests"]["total"] == sent
                assert not_creates(proxy) == other
                saw_attempt_rule = True
            time.sleep(1.0)
            results.append(box.sync(force=False, check=False))  # runs when the interval has passed
        time.sleep(3)  # a full admin bucket for the checks below
        assert api.contents(store) == files  # every push landed, exactly once
        assert limited_count(svc) > 0, "the service never refused a request: nothing was tested"
        assert saw_attempt_rule, results
        assert not box.status()["stores"][0]["staged"]
        # Bounded: each create is sent at most RATE_RETRIES + 1 times per tick (a 429 with a short
        # retry-after is paced and sent again up to RATE_RETRIES times). Every tick (ours and the
        # daemon's own timer's) begins with one counters request: their number bounds the ticks.
        ticks = proxy.count("GET", r"/memory_store_counters$")
        assert proxy.count("POST", CREATE) <= len(files) * (RATE_RETRIES + 1) * ticks


@pytest.mark.timeout(120)
def test_a_retry_after_is_waited_out_not_hammered(tmp_path):
    """Every create of a push wave wider than the push concurrency is refused once with
    `retry-after: 1`. Before that second has passed the mount sends nothing more: no create sent
    again at once, and the creates waiting for a push slot wait too (the refused ones hold theirs
    while they wait). Then each is sent again once, and all land in the same tick."""
    n = CONCURRENCY + 8
    files = {f"/wave/f{i:02d}.md": f"wave {i}\n" for i in range(n)}
    with mounted_through(tmp_path) as (box, proxy, api, _svc, store):
        top = box.root / SLUG
        (top / "wave").mkdir()
        for path, text in files.items():
            (top / path.lstrip("/")).write_text(text)
        proxy.reset_counts()
        rule = proxy.add("POST", CREATE, "status", code=429, retry_after=1, times=n)
        answer = box.sync(check=False)
        assert rule.hits == n
        assert answer["ok"], answer  # short waits are retried within the tick
        assert api.contents(store) == files
        posts = sorted(e.at for e in proxy.log if e.method == "POST" and re.search(CREATE, e.path))
        first_429 = posts[0]
        early = [t for t in posts if t < first_429 + 0.9]
        # The first wave is at most one request per slot; nothing more within the retry-after.
        assert len(early) <= CONCURRENCY, (len(early), [round(t - first_429, 3) for t in posts])
        assert len(posts) == 2 * n  # each create refused once, sent again once: no hammering
