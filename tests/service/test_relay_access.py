"""Who reads what through a relay (docs/SEMANTICS.md#d-relay): a token reads from the cache only the
stores the upstream confirmed to it, confirmed again after --confirm-every with that credential
itself, with the operator's key or without."""

from __future__ import annotations

import base64
import json
import time

import httpx
import pytest

from tests.support.service import ServiceProcess

pytestmark = pytest.mark.timeout(120)
MEMORY = {"anthropic-beta": "agent-memory-2026-07-22"}
SESSIONS = {"anthropic-beta": "managed-agents-2026-04-01"}
CONFIRM_S = 1.5


def token_of(session: dict) -> str:
    return json.loads(base64.urlsafe_b64decode(session["work_secret"] + "=="))["sessions_token"]


def status(relay: ServiceProcess) -> dict:
    return httpx.get(relay.base_url + "/v1/relay_status", headers={"x-api-key": relay.admin_key}).json()


@pytest.fixture
def upstream(tmp_path):
    up = ServiceProcess(tmp_path / "up", hosted_api=True)
    try:
        yield up
    finally:
        up.stop()


def relay_for(tmp_path, up: ServiceProcess, *extra: str) -> ServiceProcess:
    args = ("--upstream", up.base_url, "--poll-interval", "1", "--confirm-every", str(CONFIRM_S), *extra)
    return ServiceProcess(tmp_path / "relay", extra_args=args)


def reads(base: str, token: str, sid: str, mid: str) -> dict[str, int]:
    """The status of every cached read of the store with this token."""
    h = {**MEMORY, "authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=h, timeout=30) as c:
        return {
            "list": c.get(f"/v1/memory_stores/{sid}/memories").status_code,
            "get": c.get(f"/v1/memory_stores/{sid}/memories/{mid}").status_code,
            "counter": c.get(f"/v1/memory_stores/{sid}/counter").status_code,
            "counters": c.get("/v1/memory_store_counters", params={"ids": sid}).status_code,
            "changes": c.get(f"/v1/memory_stores/{sid}/changes", params={"since": 0}).status_code,
            "snapshot": c.get(f"/v1/memory_stores/{sid}/snapshot").status_code,
            "watch": c.get("/v1/memory_store_watch", params={"known": f"{sid}:0", "wait": "1"}).status_code,
        }


def refused(got: dict[str, int], status: int) -> bool:
    """Every read refused with the upstream's own answer: `status` where the upstream has the route,
    404 "no such endpoint" for memfs's extensions, which the hosted API has not."""
    return got["list"] == got["get"] == status and all(v in (status, 404) for v in got.values())


def seeded(up: ServiceProcess) -> tuple[str, str]:
    sid = up.create_store("handbook")["id"]
    with up.admin_client() as c:
        r = c.post(f"/v1/memory_stores/{sid}/memories", json={"path": "/secret.md", "content": "only mine\n"})
    return sid, r.json()["id"]


def test_a_token_reads_only_the_stores_its_session_attaches_before_and_after_another_warmed_it(
    tmp_path, upstream
):
    sid, mid = seeded(upstream)
    mine = token_of(upstream.create_session([(sid, "read_write")]))
    other_store = upstream.create_store("other")["id"]
    foreign = token_of(upstream.create_session([(other_store, "read_write")]))
    relay = relay_for(tmp_path, upstream)
    try:
        cold = reads(relay.base_url, foreign, sid, mid)
        assert set(cold.values()) == {404}, cold
        assert not status(relay)["stores"] or not status(relay)["stores"][0]["cached"]
        assert set(reads(relay.base_url, mine, sid, mid).values()) == {200}
        assert status(relay)["stores"][0]["cached"]
        warm = reads(relay.base_url, foreign, sid, mid)
        assert set(warm.values()) == {404}, warm
        assert refused(reads(relay.base_url, "not-a-token", sid, mid), 401)
    finally:
        relay.stop()


@pytest.mark.parametrize("operator", [False, True], ids=["per-token", "operator-key"])
def test_an_archived_sessions_token_stops_reading_within_the_confirmation_period(
    tmp_path, upstream, operator
):
    sid, mid = seeded(upstream)
    sessions = [upstream.create_session([(sid, "read_write")]) for _ in range(4)]
    tokens = [token_of(s) for s in sessions]
    extra: tuple[str, ...] = ()
    if operator:
        key_file = tmp_path / "upstream-key"
        key_file.write_text(upstream.admin_key + "\n")
        extra = ("--upstream-key-file", str(key_file))
    relay = relay_for(tmp_path, upstream, *extra)
    try:
        for s, t in zip(sessions, tokens, strict=True):  # what a mount does at start: its session read
            r = httpx.get(
                f"{relay.base_url}/v1/sessions/{s['id']}",
                headers={**SESSIONS, "authorization": f"Bearer {t}"},
            )
            assert r.status_code == 200
        rounds = 3
        for _ in range(rounds):
            for t in tokens:
                assert reads(relay.base_url, t, sid, mid)["list"] == 200
            time.sleep(CONFIRM_S + 0.2)
        confirms = status(relay)["front_requests"].get("confirm", 0)
        # one session read per token a period, with the operator's key too: each credential is
        # presented upstream itself (a listing of the store's sessions would not show a deleted key)
        assert confirms >= len(tokens) * (rounds - 1), confirms
        with upstream.admin_client(SESSIONS["anthropic-beta"]) as admin:
            assert admin.post(f"/v1/sessions/{sessions[0]['id']}/archive").status_code == 200
        time.sleep(CONFIRM_S + 0.2)
        got = reads(relay.base_url, tokens[0], sid, mid)
        assert refused(got, 401), got  # the upstream's own answer to a revoked token
        assert reads(relay.base_url, tokens[1], sid, mid)["list"] == 200
    finally:
        relay.stop()
