"""A first download at an organisation's limit, not into it (SEMANTICS.md#d-budget): the client
mirrors the emulator's bucket from what its answers say (`anthropic-ratelimit-requests-*`), so the
mount's requests, counted where they reach the service, never exceed the limit by more than its
burst, meet at most a handful of 429s, and still go several at a time (the round trip is long
against the rate: one at a time would take much longer than the limit's floor).

A real `memfs serve --hosted-api` with small limits, a real mount, the loopback proxy between them
(a round trip, and the log of what the mount sent when).
"""

from __future__ import annotations

import re
import time

import httpx
import pytest

from tests.support.mounts import store_files
from tests.support.sandbox import SandboxWorld
from tests.support.service import ServiceProcess
from tests.support.world import StoreSpec

pytestmark = pytest.mark.timeout(240)

READS_PER_MIN = 600  # 10 a second
BURST_S = 1.0  # bursts of 10
RATE, BURST = READS_PER_MIN / 60.0, int(READS_PER_MIN / 60.0 * BURST_S)
RTT = 0.2  # two round trips per token: one request at a time would go at half the rate


def store(tops: int, memories: int, tag: str) -> dict[str, str]:
    return {f"/top{i % tops}/n{i:04d}.md": f"{tag} memory {i}\n" + "x" * 200 for i in range(memories)}


def org_count(svc: ServiceProcess, outcome: str) -> float:
    text = httpx.get(svc.base_url + "/metrics", timeout=10).text
    m = re.search(rf'^memfs_org_requests_total\{{class="read",outcome="{outcome}"\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def worst_excess(times: list[float]) -> float:
    """The most requests sent in any window beyond what the limit lets through in it (rate x its
    length): at most the burst, for a client that paces itself like the service's bucket."""
    times = sorted(times)
    return max(
        (j - i + 1) - RATE * (times[j] - times[i]) for i in range(len(times)) for j in range(i, len(times))
    )


def test_a_paced_first_download_stays_within_the_limit_and_is_still_concurrent(tmp_path):
    # Stores of many prefixes and of one: each store's download is several cursor chains at once
    seeds = {
        "Wide A": store(8, 240, "a"),
        "Wide B": store(8, 240, "b"),
        "Narrow C": store(1, 240, "c"),
        "Narrow D": store(1, 120, "d"),
    }
    specs = [StoreSpec(name, "read_only", seed, in_database=True) for name, seed in seeds.items()]
    world = SandboxWorld.serving(
        tmp_path,
        specs,
        hosted_api=True,
        org_limits=None,
        extra_args=("--org-limits", f"{READS_PER_MIN},{READS_PER_MIN}", "--org-burst", f"{BURST_S:g}"),
    )
    try:
        svc, proxy = world.service, world.proxy(rtt=RTT)
        box = world.sandbox("box", base_url=proxy.url)
        time.sleep(BURST_S + 0.5)  # the org's bucket full again after the set-up's requests
        limited_before = org_count(svc, "limited")
        started = time.monotonic()
        box.mount("--live", "off", timeout=180)
        elapsed = time.monotonic() - started
        for name, contents in seeds.items():
            got = store_files(box.root / name.lower().replace(" ", "-"))
            assert got == {p: t.encode() for p, t in contents.items()}, name

        sent = [e.at for e in proxy.log if e.path.startswith("/v1/")]
        limited = org_count(svc, "limited") - limited_before
        assert len(sent) > 4 * BURST, f"{len(sent)} requests: too few to test pacing"
        excess = worst_excess(sent)
        assert excess <= BURST + 1, f"{excess:.1f} requests over the limit in some window (burst {BURST})"
        assert limited <= 3, f"{limited:.0f} 429s"
        floor = (len(sent) - BURST) / RATE
        one_at_a_time = len(sent) * RTT
        assert proxy.counts.max_in_flight >= 3, proxy.counts
        # the mount's own start (interpreter, imports, placing the stores) on a shared machine is
        # the rest: 7.9 s here against a floor of 5.4 s and 12.8 s one at a time (load 5)
        assert elapsed < min(floor + 6, one_at_a_time), (elapsed, floor, one_at_a_time)
    finally:
        world.close()
