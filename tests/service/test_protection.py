"""Protection: per-credential rate limits and TLS, on a real `memfs serve` subprocess,
both backends."""

from __future__ import annotations

import base64
import json
import re
import ssl
import time

import anthropic
import httpx
import pytest

from tests.support.service import MEMORY_BETA, ServiceProcess
from tests.support.tls import make_cert

RATE, BURST = 5, 10


def token_of(session: dict) -> str:
    return json.loads(base64.urlsafe_b64decode(session["work_secret"]))["sessions_token"]


def metric(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.fixture
def limited(tmp_path, service_db):
    svc = ServiceProcess(
        tmp_path / "service", db_url=service_db,
        extra_args=("--rate-limit", str(RATE), "--rate-burst", str(BURST)),
    )  # fmt: skip
    try:
        yield svc
    finally:
        svc.stop()


def test_a_runaway_writer_gets_429s_while_another_credential_does_not(limited):
    store = limited.create_store("shared")["id"]
    runaway = token_of(limited.create_session([(store, "read_write")]))
    other = token_of(limited.create_session([(store, "read_write")]))
    headers = {"anthropic-beta": MEMORY_BETA}
    url = f"/v1/memory_stores/{store}/memories"
    acked, refused, other_statuses = [], [], []
    with httpx.Client(base_url=limited.base_url, headers=headers, timeout=30) as http:
        # The runaway writes back to back; the other session writes once per six of its requests,
        # well inside its own allowance, on the same process.
        for i in range(60):
            path = f"/runaway/{i}.md"
            r = http.post(
                url, json={"path": path, "content": "x"}, headers={"authorization": f"Bearer {runaway}"}
            )
            if r.status_code == 200:
                acked.append(path)
            else:
                refused.append(r)
            if i % 6 == 0:
                path = f"/other/{i}.md"
                o = http.post(url, json={"path": path, "content": "y"}, headers={"x-api-key": other})
                other_statuses.append(o.status_code)
                acked.append(path)
            if len(refused) >= 20:
                break
        assert other_statuses and set(other_statuses) == {200}, other_statuses
        assert len(acked) - len(other_statuses) >= BURST and refused
        for r in refused:
            assert r.status_code == 429
            body = r.json()
            assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
            assert body["request_id"] == r.headers["request-id"]
            assert r.headers["retry-after"] == "1"  # at 5/s a token is at most 0.2 s away: rounded up
            assert 0 < int(r.headers["retry-after-ms"]) <= 1000 / RATE + 1
            assert "x-should-retry" not in r.headers  # a 429 is there to be retried

        # Health and metrics are never limited, whatever a credential did.
        for _ in range(3 * BURST):
            assert http.get("/healthz").status_code == 200
        assert http.get("/readyz").status_code == 200
        text = http.get("/metrics").text
        assert metric(text, "memfs_rate_limited_requests_total", '{credential="session"}') == len(refused)
        assert metric(text, "memfs_rate_limited_requests_total", '{credential="admin"}') == 0
        assert 'status="429"' in text

        # Nothing refused reached the store: it holds exactly the acknowledged writes.
        listed = http.get(url, params={"limit": 100}, headers={"x-api-key": limited.admin_key}).json()["data"]
        assert sorted(m["path"] for m in listed) == sorted(acked)

        # The bucket refills: after the advertised wait, the runaway may write again.
        time.sleep(int(refused[-1].headers["retry-after-ms"]) / 1000)
        r = http.post(url, json={"path": "/runaway/after.md", "content": "x"}, headers={"x-api-key": runaway})
        assert r.status_code == 200, r.text


def test_a_runaway_counter_reader_is_limited_too(limited):
    """Counter reads have a fast path that runs before the router; with a limit configured they
    must still be counted against their credential (the fast path is off then)."""
    store = limited.create_store("ticked")["id"]
    runaway = token_of(limited.create_session([(store, "read_only")]))
    headers = {"anthropic-beta": MEMORY_BETA, "authorization": f"Bearer {runaway}"}
    statuses = []
    with httpx.Client(base_url=limited.base_url, headers=headers, timeout=30) as http:
        for _ in range(4 * BURST):
            r = http.get("/v1/memory_store_counters", params={"ids": store})
            statuses.append(r.status_code)
            if r.status_code == 429:
                assert r.json()["error"]["type"] == "rate_limit_error" and r.headers["retry-after"]
                break
    assert statuses.count(200) >= BURST and statuses[-1] == 429, statuses


def test_the_official_client_waits_out_the_retry_after(limited):
    store = limited.create_store("s")["id"]
    token = token_of(limited.create_session([(store, "read_write")]))
    seen: list[tuple[float, int, str | None]] = []  # (when, status or 0 for a request sent, retry-after-ms)

    def on_request(request) -> None:
        seen.append((time.monotonic(), 0, None))

    def on_response(response) -> None:
        seen.append((time.monotonic(), response.status_code, response.headers.get("retry-after-ms")))

    plain = anthropic.Anthropic(api_key=token, base_url=limited.base_url, max_retries=0)
    retrying = anthropic.Anthropic(
        api_key=token, base_url=limited.base_url, max_retries=3,
        http_client=anthropic.DefaultHttpxClient(event_hooks={"request": [on_request], "response": [on_response]}),
    )  # fmt: skip
    try:
        for attempt in range(5):  # a stall longer than a token's 0.2 s could let the first try in
            while True:  # empty the bucket
                try:
                    plain.beta.memory_stores.retrieve(store)
                except anthropic.RateLimitError as e:
                    assert e.body["error"]["type"] == "rate_limit_error"
                    break
            seen.clear()
            mem = retrying.beta.memory_stores.memories.create(store, path=f"/a{attempt}.md", content="hello")
            assert mem.path == f"/a{attempt}.md"
            if any(status == 429 for _, status, _ in seen):
                break
        else:
            pytest.fail("the official client never met the limit: nothing was tested")
    finally:
        plain.close()
        retrying.close()
    # After each 429 the client sent its next try no sooner than the service's retry-after-ms.
    for i, (at, status, wait_ms) in enumerate(seen):
        if status == 429:
            assert wait_ms is not None
            nxt = next(t for t, st, _ in seen[i + 1 :] if st == 0)
            assert nxt - at >= int(wait_ms) / 1000 * 0.9, (nxt - at, wait_ms)
    assert seen[-1][1] == 200


def test_rate_limit_flags_are_checked(tmp_path):
    for args, needle in [
        (("--rate-limit", "-1"), "--rate-limit"),
        (("--rate-limit", "nan"), "--rate-limit"),
        (("--rate-burst", "5"), "--rate-burst"),
        (("--rate-limit", "5", "--rate-burst", "0"), "--rate-burst"),
        (("--certfile", "x.pem"), "--keyfile"),
        (("--certfile", "missing.pem", "--keyfile", "missing.key"), "cannot use --certfile"),
    ]:
        with pytest.raises(RuntimeError, match=re.escape(needle)):
            ServiceProcess(tmp_path / "bad", extra_args=args)


# --- TLS ------------------------------------------------------------------------------------------


@pytest.fixture
def tls_service(tmp_path, service_db):
    ca, cert, key = make_cert(tmp_path / "tls")
    svc = ServiceProcess(
        tmp_path / "service", db_url=service_db,
        extra_args=("--certfile", str(cert), "--keyfile", str(key)),
    )  # fmt: skip
    try:
        yield svc, ca
    finally:
        svc.stop()


def test_tls_with_the_official_client(tls_service, monkeypatch):
    svc, ca = tls_service
    assert svc.base_url.startswith("https://127.0.0.1:")
    # Without the CA the certificate is refused; plain http on the TLS port gets no answer.
    with pytest.raises(httpx.ConnectError):
        httpx.get(svc.base_url + "/healthz", timeout=10)
    with pytest.raises(httpx.HTTPError):
        httpx.get(svc.base_url.replace("https://", "http://") + "/healthz", timeout=10)
    with httpx.Client(verify=ssl.create_default_context(cafile=str(ca)), timeout=10) as http:
        assert http.get(svc.base_url + "/readyz").json() == {"status": "ready"}
    # The documented way to trust a private CA, for every client here: SSL_CERT_FILE.
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    client = anthropic.Anthropic(api_key=svc.admin_key, base_url=svc.base_url, max_retries=0)
    try:
        store = client.beta.memory_stores.create(name="over tls")
        client.beta.memory_stores.memories.create(store.id, path="/t.md", content="secret")
        listed = client.beta.memory_stores.memories.list(store.id)
        assert [m.path for m in listed.data] == ["/t.md"]
    finally:
        client.close()
