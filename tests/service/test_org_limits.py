"""Per-organisation limits (`memfs serve --hosted-api`, `--org-limits`, `--org-burst`), on real
`memfs serve` subprocesses: one allowance per class for every credential and every replica, 429
`rate_limit_error` with `retry-after`, counted in `/metrics`, defaults only with --hosted-api.

Timing: each test sends its requests back to back and bounds what may pass by the burst plus what
the bucket refilled over the measured elapsed time, so a slow machine makes no test flaky.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
import re
import time

import httpx
import pytest

from memfs.service.app import create_app
from memfs.service.database import open_storage
from memfs.service.orglimit import OrgLimits, burst_for, parse_limits
from tests.support.service import MEMORY_BETA, ServiceProcess

pytestmark = pytest.mark.timeout(120)
# reads 2/s in bursts of 10, writes 1/s in bursts of 5
LIMITS = ("--org-limits", "120,60", "--org-burst", "5")


def token_of(session: dict) -> str:
    return json.loads(base64.urlsafe_b64decode(session["work_secret"]))["sessions_token"]


def metric(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def org_count(base_url: str, cls: str, outcome: str) -> float:
    text = httpx.get(base_url + "/metrics", timeout=10).text
    return metric(text, "memfs_org_requests_total", f'{{class="{cls}",outcome="{outcome}"}}')


@pytest.fixture
def emulator(request, tmp_path, service_db):
    args = getattr(request, "param", LIMITS)
    svc = ServiceProcess(
        tmp_path / "svc", db_url=service_db, hosted_api=True, org_limits=None, extra_args=args
    )
    try:
        yield svc
    finally:
        svc.stop()


def client(base_url: str, credential: str) -> httpx.Client:
    return httpx.Client(
        base_url=base_url, headers={"x-api-key": credential, "anthropic-beta": MEMORY_BETA}, timeout=30
    )


def test_two_credentials_share_one_allowance_and_get_the_429_envelope(emulator):
    store = emulator.create_store("s")["id"]  # writes: 2 of the 5 in the write burst, with the session
    token = token_of(emulator.create_session([(store, "read_write")]))
    reads_before = org_count(emulator.base_url, "read", "ok")
    url = f"/v1/memory_stores/{store}/memories"
    statuses: dict[str, list[int]] = {"admin": [], "session": []}
    refused: list[httpx.Response] = []
    with client(emulator.base_url, emulator.admin_key) as admin, client(emulator.base_url, token) as agent:
        started = time.monotonic()
        for i in range(30):  # alternating: each credential alone is within any per-credential limit
            who, http = ("admin", admin) if i % 2 == 0 else ("session", agent)
            r = http.get(url)
            statuses[who].append(r.status_code)
            if r.status_code == 429:
                refused.append(r)
        elapsed = time.monotonic() - started
        ok = sum(s.count(200) for s in statuses.values())
        # one bucket of 10 for both: at most the burst plus what refilled at 2/s meanwhile
        assert 10 <= ok <= 10 + math.ceil(elapsed * 2) + 1, (ok, elapsed, statuses)
        assert set(statuses["admin"]) == {200, 429} and set(statuses["session"]) == {200, 429}, statuses
        for r in refused:
            body = r.json()
            assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
            assert "organisation" in body["error"]["message"]
            assert body["request_id"] == r.headers["request-id"]
            assert r.headers["retry-after"] == "1"  # a token at 2/s is at most 0.5 s away, rounded up
            assert 0 < int(r.headers["retry-after-ms"]) <= 501
            assert "x-should-retry" not in r.headers
        # writes are their own class: the reads' exhaustion does not refuse a write
        w = agent.post(url, json={"path": "/a.md", "content": "x"})
        assert w.status_code == 200, w.text
        # health and metrics never count and are never refused
        for _ in range(20):
            assert admin.get("/healthz").status_code == 200
        # /metrics: every counted read, by outcome
        assert org_count(emulator.base_url, "read", "limited") == len(refused)
        assert org_count(emulator.base_url, "read", "ok") - reads_before == ok
        assert org_count(emulator.base_url, "write", "ok") == 3  # store, session, memory
        # after the advertised wait a read passes again
        time.sleep(int(refused[-1].headers["retry-after-ms"]) / 1000)
        assert agent.get(url).status_code == 200


def test_every_counted_answer_says_where_its_class_stands_as_the_hosted_api_does(emulator):
    """`anthropic-ratelimit-requests-limit` (a minute), `-remaining` (whole requests left) and
    `-reset` (RFC 3339: when the bucket is full again), on answers and 429s alike. With the
    buckets in PostgreSQL (shared by replicas) only the limit: the level is not read back."""
    shared = emulator.db_url is not None
    store = emulator.create_store("s")["id"]
    url = f"/v1/memory_stores/{store}/memories"
    seen: list[tuple[int, int, float]] = []
    with client(emulator.base_url, emulator.admin_key) as admin:
        for _ in range(14):  # past the read burst of 10
            r = admin.get(url)
            if shared:
                assert r.headers["anthropic-ratelimit-requests-limit"] == "120"
                assert "anthropic-ratelimit-requests-remaining" not in r.headers
                continue
            reset = datetime.datetime.fromisoformat(
                r.headers["anthropic-ratelimit-requests-reset"].replace("Z", "+00:00")
            )
            assert r.headers["anthropic-ratelimit-requests-limit"] == "120"
            seen.append(
                (
                    r.status_code,
                    int(r.headers["anthropic-ratelimit-requests-remaining"]),
                    reset.timestamp() - time.time(),
                )
            )
        w = admin.post(url, json={"path": "/w.md", "content": "w"})
        assert w.headers["anthropic-ratelimit-requests-limit"] == "60"  # the write class's own
    if shared:
        return
    assert seen[0][0] == 200 and seen[0][1] == 9  # a full bucket of 10, less this request
    assert 0 < seen[0][2] <= 0.5 + 0.5  # one token short: full again in half a second (at 2/s)
    assert [s for s, _, _ in seen].count(429) >= 2
    assert all(left == 0 for status, left, _ in seen if status == 429)
    assert all(0 < full_in <= 5.5 for _, _, full_in in seen)  # at most the whole burst at 2/s


def test_writes_are_limited_at_their_own_rate(emulator):
    store = emulator.create_store("s")["id"]  # 1 write of the burst of 5
    with client(emulator.base_url, emulator.admin_key) as admin:
        started = time.monotonic()
        codes = [admin.post(f"/v1/memory_stores/{store}/memories", json={"path": f"/m{i}", "content": "x"}).status_code
                 for i in range(15)]  # fmt: skip
        elapsed = time.monotonic() - started
        ok = codes.count(200)
        assert 4 <= ok <= 4 + math.ceil(elapsed * 1) + 1 and 429 in codes, (codes, elapsed)
        # nothing refused was written
        listed = admin.get(f"/v1/memory_stores/{store}/memories", params={"limit": 100}).json()["data"]
        assert len(listed) == ok


def _burst_then_refused(base_url: str, key: str, url: str, n: int) -> tuple[list[int], float]:
    with client(base_url, key) as http:
        started = time.monotonic()
        codes = [http.get(url).status_code for _ in range(n)]
        return codes, time.monotonic() - started


@pytest.mark.parametrize("emulator", [()], indirect=True)
def test_the_hosted_defaults_apply_with_hosted_api_only(emulator, tmp_path, service_db):
    """--hosted-api alone: reads 1,200 a minute in bursts of 60 (3 s); plain serve: no limits."""
    store = emulator.create_store("s")["id"]
    codes, elapsed = _burst_then_refused(
        emulator.base_url, emulator.admin_key, f"/v1/memory_stores/{store}", 150
    )
    ok = codes.count(200)
    assert 429 in codes and 60 <= ok <= 60 + math.ceil(elapsed * 20) + 1, (ok, elapsed)
    assert org_count(emulator.base_url, "read", "limited") == codes.count(429)
    plain = ServiceProcess(tmp_path / "plain", db_url=service_db)
    try:
        store = plain.create_store("p")["id"]
        codes, _ = _burst_then_refused(plain.base_url, plain.admin_key, f"/v1/memory_stores/{store}", 150)
        assert set(codes) == {200}
        assert org_count(plain.base_url, "read", "ok") == 0  # not counted: no limits
    finally:
        plain.stop()


@pytest.mark.parametrize("emulator", [("--org-limits", "off")], indirect=True)
def test_org_limits_off(emulator):
    store = emulator.create_store("s")["id"]
    codes, _ = _burst_then_refused(
        emulator.base_url, emulator.admin_key, f"/v1/memory_stores/{store}/memories", 150
    )
    assert set(codes) == {200}


def test_the_fast_paths_stay_on_and_their_requests_count(tmp_path):
    """The list and counter fast paths answer before the router; the org limit runs before them,
    so it counts (and refuses) their requests without turning them off (unlike --rate-limit)."""
    from starlette.testclient import TestClient

    storage = open_storage(tmp_path / "store.db")
    app = create_app(storage, "k" * 20, org_limits=OrgLimits(60, 60, 2.0))  # bursts of 2
    assert app.list_path is not None and app.counter_path is not None
    try:
        with TestClient(app) as c:
            h = {"x-api-key": "k" * 20, "anthropic-beta": MEMORY_BETA}
            sid = c.post("/v1/memory_stores", json={"name": "s"}, headers=h).json()["id"]
            codes = [c.get(f"/v1/memory_stores/{sid}/memories", headers=h).status_code for _ in range(3)]
            assert codes == [200, 200, 429]
            assert app.list_path.loop_reads + app.list_path.thread_reads == 2  # answered by the fast path
            r = c.get(f"/v1/memory_stores/{sid}/counter", headers=h)
            assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
    finally:
        storage.close()


def test_replicas_share_the_allowance_through_postgresql(tmp_path, pg_cluster):
    url = pg_cluster.create_database("org")
    replicas = [
        ServiceProcess(tmp_path / f"r{i}", db_url=url, hosted_api=True, extra_args=LIMITS) for i in range(2)
    ]
    try:
        store = replicas[0].create_store("s")["id"]
        clients = [client(r.base_url, r.admin_key) for r in replicas]
        started = time.monotonic()
        codes = [clients[i % 2].get(f"/v1/memory_stores/{store}").status_code for i in range(30)]
        elapsed = time.monotonic() - started
        ok = codes.count(200)
        # one bucket of 10 for both replicas (per process it would be 10 each)
        assert 10 <= ok <= 10 + math.ceil(elapsed * 2) + 1, (ok, elapsed, codes)
        assert 429 in codes[0::2] and 429 in codes[1::2], codes
        for c in clients:
            c.close()
        assert any("shared through the database" in r.stderr() for r in replicas)
    finally:
        for r in replicas:
            r.stop()
        pg_cluster.drop_database(url)


def test_flags_and_parsing(tmp_path):
    assert parse_limits("1200,300") == (1200, 300) and parse_limits("OFF") is None
    assert parse_limits("0, 5") == (0, 5)
    for bad in ("1200", "a,b", "-1,5", "1,2,3"):
        with pytest.raises(ValueError):
            parse_limits(bad)
    assert burst_for(1200, 3) == 60 and burst_for(300, 3) == 15 and burst_for(1, 0.1) == 1
    for args, needle in [
        (("--org-limits", "12"), "--org-limits"),
        (("--org-burst", "0", "--hosted-api"), "--org-burst"),
        (("--org-burst", "2"), "--org-burst"),  # no limits to burst
    ]:
        with pytest.raises(RuntimeError, match=re.escape(needle)):
            ServiceProcess(tmp_path / "bad", extra_args=args)


def test_a_credential_that_fails_authentication_takes_nothing(emulator):
    """Garbage keys, a missing key, a bearer token nobody holds: each a 401 that takes nothing from
    the organisation's reads or writes (before, any credential header counted, and six garbage
    requests left the legitimate clients at 429). The legitimate burst is then whole."""
    store = emulator.create_store("s")["id"]  # 1 write of the burst of 5
    url = f"/v1/memory_stores/{store}/memories"
    with httpx.Client(base_url=emulator.base_url, timeout=30) as anyone:
        codes = []
        for i in range(30):
            headers = {"anthropic-beta": MEMORY_BETA}
            if i % 3 == 0:
                headers["x-api-key"] = f"sk-garbage-{i}"
            elif i % 3 == 1:
                headers["authorization"] = f"Bearer not-a-token-{i}"
            codes.append(anyone.get(url, headers=headers).status_code)
            codes.append(
                anyone.post(url, headers=headers, json={"path": f"/g{i}", "content": "x"}).status_code
            )
    assert set(codes) == {401}, codes
    assert org_count(emulator.base_url, "read", "ok") == 0
    assert org_count(emulator.base_url, "read", "limited") == 0
    assert org_count(emulator.base_url, "write", "limited") == 0
    with client(emulator.base_url, emulator.admin_key) as admin:
        reads = [admin.get(url).status_code for _ in range(10)]  # the whole read burst
        writes = [admin.post(url, json={"path": f"/m{i}", "content": "x"}).status_code for i in range(4)]
    assert reads == [200] * 10, reads
    assert writes == [200] * 4, writes  # the rest of the write burst
