"""The relay's credentials and what it sends upstream (docs/SEMANTICS.md#d-relay,
docs/OPERATIONS.md#security): it records exactly the credential the upstream authenticates, serves
a credential at most --confirm-every + --confirm-grace after the upstream last accepted it,
whatever the upstream answers meanwhile, checks every store a request names, and sends upstream
neither a path with a dot segment nor the caller's cookies and forwarding headers.

Where what reaches the upstream is asserted, the relay's upstream is a loopback proxy in front of
the real one (tests/support/proxy.py), which logs every request it is sent and injects the
upstream's failures (503, 429, a reset)."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.service.test_relay_access import (
    CONFIRM_S,
    MEMORY,
    SESSIONS,
    reads,
    refused,
    seeded,
    status,
    token_of,
)
from tests.service.test_relay_access import upstream as upstream  # the fixture: an emulator of the hosted API
from tests.service.test_slow_clients import answered_within, drip, envelope
from tests.support.proxy import Proxy
from tests.support.service import ServiceProcess
from tests.support.waits import wait_for

pytestmark = pytest.mark.timeout(120)


def relay_to(tmp_path, url: str, *extra: str) -> ServiceProcess:
    args = ("--upstream", url, "--poll-interval", "1", "--confirm-every", str(CONFIRM_S), *extra)
    return ServiceProcess(tmp_path / "relay", extra_args=args)


@pytest.fixture
def proxy(upstream) -> Iterator[Proxy]:
    with Proxy(upstream.base_url) as p:
        yield p


def presented(proxy: Proxy, token: str) -> int:
    """How many requests reached the upstream carrying this token."""
    return sum(1 for e in list(proxy.log) if token.encode() in e.head)


def polls_of(relay: ServiceProcess, store_id: str) -> int:
    """How many polls of the store the relay has ended (their answers applied to its cache)."""
    return next((s["polls"] for s in status(relay)["stores"] if s["memory_store_id"] == store_id), 0)


def as_token(relay: ServiceProcess, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=relay.base_url, headers={**MEMORY, "authorization": f"Bearer {token}"}, timeout=30
    )


# -- 1. the credential the upstream authenticates is the one recorded --------------------------------


def test_a_request_naming_two_credentials_is_refused_so_the_one_the_upstream_refused_reads_nothing(
    tmp_path, upstream
):
    # Before: a session read with `authorization: Bearer X` and `x-api-key: T` was authenticated
    # upstream with T (memfs serve prefers x-api-key) and recorded under X, which then read the cache.
    sid, mid = seeded(upstream)
    session = upstream.create_session([(sid, "read_write")])
    token = token_of(session)
    relay = relay_to(tmp_path, upstream.base_url)
    try:
        both = {"authorization": "Bearer not-a-token", "x-api-key": token}
        r = httpx.get(f"{relay.base_url}/v1/sessions/{session['id']}", headers={**SESSIONS, **both})
        assert r.status_code == 400 and "one credential" in r.text, r.text
        r = httpx.get(f"{relay.base_url}/v1/memory_stores/{sid}/memories", headers={**MEMORY, **both})
        assert r.status_code == 400, r.text
        got = reads(relay.base_url, "not-a-token", sid, mid)
        assert refused(got, 401), got
        # one credential in both headers is one credential
        same = {**SESSIONS, "authorization": f"Bearer {token}", "x-api-key": token}
        assert httpx.get(f"{relay.base_url}/v1/sessions/{session['id']}", headers=same).status_code == 200
        assert set(reads(relay.base_url, token, sid, mid).values()) == {200}
    finally:
        relay.stop()


# -- 2. never served past --confirm-every + --confirm-grace, whatever the upstream answers ------------


@pytest.mark.parametrize(
    ("action", "code"), [("status", 503), ("status", 429), ("reset", 0)], ids=["503", "429", "down"]
)
def test_a_credential_is_served_the_grace_past_its_confirmation_and_no_longer(
    tmp_path, upstream, proxy, action, code
):
    grace = 3.0
    sid, _ = seeded(upstream)
    token = token_of(upstream.create_session([(sid, "read_write")]))
    relay = relay_to(tmp_path, proxy.url, "--confirm-grace", str(grace))
    try:
        with as_token(relay, token) as c:
            assert c.get(f"/v1/memory_stores/{sid}/memories").status_code == 200  # confirmed at most now
            proxy.add("*", r"^/v1/", action, code=code, retry_after=1 if code == 429 else None)
            failing_from = time.monotonic()
            time.sleep(CONFIRM_S + 0.5)  # its confirmation expired: the upstream cannot renew it
            assert c.get(f"/v1/memory_stores/{sid}/memories").status_code == 200  # the grace
            until = wait_for(
                lambda: (r := c.get(f"/v1/memory_stores/{sid}/memories")).status_code != 200 and r,
                CONFIRM_S + grace + 10,
                0.2,
            )
            served_for = time.monotonic() - failing_from
            assert until, f"still served {served_for:.0f}s after the upstream began failing"
            assert until.status_code == 503, until.text
            assert served_for <= CONFIRM_S + grace + 1.5, served_for  # never past the bound
            time.sleep(1.0)
            assert c.get(f"/v1/memory_stores/{sid}/memories").status_code == 503  # and it stays so
            proxy.clear()
            assert wait_for(lambda: c.get(f"/v1/memory_stores/{sid}/memories").status_code == 200, 10)
    finally:
        relay.stop()


def test_a_grace_of_zero_fails_closed_once_the_confirmation_is_old(tmp_path, upstream, proxy):
    sid, _ = seeded(upstream)
    token = token_of(upstream.create_session([(sid, "read_write")]))
    relay = relay_to(tmp_path, proxy.url, "--confirm-grace", "0")
    try:
        with as_token(relay, token) as c:
            assert c.get(f"/v1/memory_stores/{sid}/memories").status_code == 200
            proxy.add("*", r"^/v1/", "reset")
            time.sleep(CONFIRM_S + 0.3)
            r = c.get(f"/v1/memory_stores/{sid}/memories")
            assert r.status_code == 503 and "cannot confirm access" in r.text, r.text
    finally:
        relay.stop()


# -- 3. every store a request names is checked ---------------------------------------------------------


def test_every_store_a_counters_or_watch_request_names_is_checked(tmp_path, upstream):
    mine, _ = seeded(upstream)
    theirs, _ = seeded(upstream)
    my_token = token_of(upstream.create_session([(mine, "read_write")]))
    their_token = token_of(upstream.create_session([(theirs, "read_write")]))
    relay = relay_to(tmp_path, upstream.base_url)
    try:
        with as_token(relay, their_token) as them, as_token(relay, my_token) as me:
            assert them.get(f"/v1/memory_stores/{theirs}/memories").status_code == 200  # cached, in use
            assert me.get("/v1/memory_store_counters", params={"ids": mine}).status_code == 200

            def counters(*ids: str) -> httpx.Response:
                return me.get("/v1/memory_store_counters", params=[("ids", i) for i in ids])

            def watch(*ids: str) -> httpx.Response:
                return me.get(
                    "/v1/memory_store_watch", params=[*[("known", f"{i}:0") for i in ids], ("wait", "0")]
                )

            for ask in (counters, watch):
                polluted = ask(mine, theirs)
                assert polluted.status_code != 200 and theirs not in polluted.text, (
                    ask.__name__,
                    polluted.text,
                )
                unknown = ask(mine, "memstore_nobody_uses_this_one")
                # an unknown store and one the fleet uses are refused alike (the upstream's answer)
                assert unknown.status_code == polluted.status_code, (unknown.text, polluted.text)
                assert unknown.json()["error"]["type"] == polluted.json()["error"]["type"]
    finally:
        relay.stop()


# -- 4. the upstream URL, dot segments, identity headers --------------------------------------------


def test_dot_segments_are_refused_and_never_sent_upstream(tmp_path, upstream, proxy):
    relay = relay_to(tmp_path, proxy.url)
    try:
        sid, _ = seeded(upstream)
        token = token_of(upstream.create_session([(sid, "read_write")]))
        u = urlsplit(relay.base_url)
        paths = [
            "/v1/../../admin",
            "/v1/memory_stores/%2e%2e/%2e%2e/admin",
            f"/v1/memory_stores/{sid}/memories/..%2f..%2fsessions",
            "/v1/./sessions",
            "/v1/memory_stores/%2E/memories",
        ]
        for path in paths:  # http.client sends the path as written (httpx would resolve the dots)
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            try:
                conn.request("GET", path, headers={**MEMORY, "authorization": f"Bearer {token}"})
                resp = conn.getresponse()
                assert resp.status == 400, (path, resp.status, resp.read())
                resp.read()
            finally:
                conn.close()
        sent = [e.path for e in proxy.log]
        assert not any(".." in p or "%2e" in p.lower() or "admin" in p or "/./" in p for p in sent), sent
    finally:
        relay.stop()


def test_cookies_forwarding_and_connection_named_headers_are_not_sent_upstream(tmp_path, upstream, proxy):
    relay = relay_to(tmp_path, proxy.url)
    try:
        sid, _ = seeded(upstream)
        token = token_of(upstream.create_session([(sid, "read_write")]))
        sent = {
            **MEMORY,
            "authorization": f"Bearer {token}",
            "cookie": "relay_session=cookie-value",
            "x-forwarded-for": "203.0.113.7",
            "x-forwarded-host": "forged.example",
            "forwarded": "for=203.0.113.7",
            "x-real-ip": "203.0.113.7",
            "connection": "keep-alive, x-hop-secret",
            "x-hop-secret": "hop-value",
            "x-kept": "kept-value",
        }
        r = httpx.get(f"{relay.base_url}/v1/memory_stores/{sid}", headers=sent)  # passes through
        assert r.status_code == 200, r.text
        heads = [e.head.lower() for e in proxy.log if f"/v1/memory_stores/{sid}".encode() in e.head]
        assert heads, [e.path for e in proxy.log]
        head = heads[-1]
        for gone in (b"cookie", b"x-forwarded-", b"forwarded:", b"x-real-ip", b"x-hop-secret", b"hop-value"):
            assert gone not in head, (gone, head)
        assert b"x-kept: kept-value" in head and token.lower().encode() in head
    finally:
        relay.stop()


# -- 5. a credential the upstream refused: remembered, and the poll goes on with another --------------


def test_a_credential_refused_upstream_is_not_presented_again_and_the_poll_goes_on_with_another(
    tmp_path, upstream, proxy
):
    # Before: the poll kept the refused token as the store's credential (polled again with it at
    # each client's read) and, with nobody else touching the store, stopped: the cache went stale
    # until another client's read, which was served the stale copy first.
    sid, mid = seeded(upstream)
    gone_session = upstream.create_session([(sid, "read_write")])
    gone, other = token_of(gone_session), token_of(upstream.create_session([(sid, "read_write")]))
    relay = relay_to(tmp_path, proxy.url)
    try:
        with as_token(relay, other) as b, as_token(relay, gone) as a:
            assert b.get(f"/v1/memory_stores/{sid}/memories").status_code == 200
            assert a.get(f"/v1/memory_stores/{sid}/memories").status_code == 200  # the newest credential
            assert wait_for(lambda: presented(proxy, gone) >= 3, 20)  # the poll uses it
            with upstream.admin_client(SESSIONS["anthropic-beta"]) as admin:
                assert admin.post(f"/v1/sessions/{gone_session['id']}/archive").status_code == 200
            with upstream.admin_client() as admin:
                edit = admin.post(f"/v1/memory_stores/{sid}/memories/{mid}", json={"content": "edited\n"})
                assert edit.status_code == 200, edit.text
            refused_at = len(proxy.log)
            polls = polls_of(relay, sid)
            # the poll's next request with it is refused; the next poll is made with the other's
            assert wait_for(
                lambda: any(other.encode() in e.head for e in list(proxy.log)[refused_at:]), 10
            ), [e.path for e in proxy.log[refused_at:]]
            # ... and ends, its answer in the cache: the proxy logs the request when it arrives, and
            # a read right then was served the cache before the poll had applied the edit (a CI
            # flake). Two polls ended since the edit: the second began after it.
            assert wait_for(lambda: polls_of(relay, sid) >= polls + 2, 10), status(relay)
            # the first read of the other client after it finds the edit: the cache did not go stale
            assert b.get(f"/v1/memory_stores/{sid}/memories/{mid}").json()["content"] == "edited\n"
            seen = presented(proxy, gone)
            time.sleep(3)  # three poll intervals: the poll does not present the refused token again
            assert presented(proxy, gone) == seen, (seen, presented(proxy, gone))
            # its holder reads nothing; asked once more (a ttl has passed), then remembered
            assert a.get(f"/v1/memory_stores/{sid}/memories").status_code == 401
            seen = presented(proxy, gone)
            for _ in range(5):
                assert a.get(f"/v1/memory_stores/{sid}/memories").status_code == 401
            assert presented(proxy, gone) == seen, (seen, presented(proxy, gone))
    finally:
        relay.stop()


# -- 6. no body is read before the credential is known to authenticate --------------------------------


def _post_head(path: str, credential: str | None, length: int) -> bytes:
    cred = f"authorization: Bearer {credential}\r\n" if credential is not None else ""
    return (
        f"POST {path} HTTP/1.1\r\nhost: x\r\n{cred}anthropic-beta: {MEMORY['anthropic-beta']}\r\n"
        f"content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    ).encode()


def test_a_body_is_read_only_once_its_credential_is_known_to_authenticate(tmp_path, upstream, proxy):
    # Before: the relay read every body first (front.py `_handle`), so a client with no credential
    # or one the upstream refuses held a connection for as long as it dripped (up to the body
    # deadline, 30 s by default), and 20 of them held every connection.
    sid, _ = seeded(upstream)
    token = token_of(upstream.create_session([(sid, "read_write")]))
    relay = relay_to(tmp_path, proxy.url)
    try:
        path = f"/v1/memory_stores/{sid}/memories"
        stop = time.monotonic() + 8
        drippers, threads = [], []
        garbage = "sk-garbage-0123456789"
        # a store's write, a store's creation (no store named: asked with a one-store listing)
        for cred, to in (
            (None, path),
            (garbage, "/v1/memory_stores"),
            (None, "/v1/sessions"),
            (garbage, path),
        ):
            sock = socket.create_connection(("127.0.0.1", relay.port), timeout=10)
            sock.sendall(_post_head(to, cred, 1000))
            threads.append(threading.Thread(target=drip, args=(sock, 0.5, stop), daemon=True))
            threads[-1].start()
            drippers.append(sock)
            answer = answered_within(sock, 3)  # at once: nowhere near the 30 s body deadline
            assert answer, f"a client with {cred!r} still held its connection after 3 s"
            status, body_, head_ = envelope(answer)
            assert status == 401 and body_["error"]["type"] == "authentication_error", answer
            assert b"connection: close" in head_
        for t in threads:
            t.join(10)
        for sock in drippers:
            sock.close()
        # the garbage credential was asked upstream once (a cheap listing), never with the body,
        # and its 401 remembered; no credential: nothing was sent at all
        asked = [(e.method, e.path) for e in list(proxy.log) if garbage.encode() in e.head]
        assert asked == [("GET", "/v1/memory_stores")], asked
        assert all(e.method == "GET" for e in proxy.log), [(e.method, e.path) for e in proxy.log]
        # a credential the upstream knows: its first write asks once, the next ones nothing more
        with as_token(relay, token) as c:
            for i in range(4):
                r = c.post(path, json={"path": f"/n{i}.md", "content": f"{i}\n"})
                assert r.status_code == 200, r.text
        mine = [(e.method, e.path) for e in list(proxy.log) if token.encode() in e.head]
        assert [m for m, _ in mine] == ["GET", "POST", "POST", "POST", "POST"], mine
    finally:
        relay.stop()
