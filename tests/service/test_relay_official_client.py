"""The official `anthropic` client, unchanged, through a relay (docs/SEMANTICS.md#d-relay): what the
official worker's memory sync calls (listings basic and full, retrieve, create, update with a
precondition, delete) answered from the cache or written through, the rest (sessions, versions)
passed on, and the upstream's refusals arriving as the client knows them."""

from __future__ import annotations

import base64
import hashlib
import json

import anthropic
import pytest

from tests.support.service import ServiceProcess

pytestmark = pytest.mark.timeout(120)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def token_of(session: dict) -> str:
    return json.loads(base64.urlsafe_b64decode(session["work_secret"] + "=="))["sessions_token"]


@pytest.fixture
def pair(tmp_path):
    up = ServiceProcess(tmp_path / "up", hosted_api=True)
    relay = ServiceProcess(tmp_path / "relay", extra_args=("--upstream", up.base_url, "--poll-interval", "1"))
    try:
        yield up, relay
    finally:
        relay.stop()
        up.stop()


def test_the_official_client_through_a_relay(pair):
    up, relay = pair
    sid = up.create_store("handbook")["id"]
    ro = up.create_store("rules")["id"]
    with up.admin_client() as c:
        for i in range(45):
            c.post(
                f"/v1/memory_stores/{sid}/memories",
                json={"path": f"/d{i % 3}/m{i:02}.md", "content": f"{i}\n"},
            )
        c.post(f"/v1/memory_stores/{ro}/memories", json={"path": "/rule.md", "content": "be kind\n"})
    session = up.create_session([(sid, "read_write"), (ro, "read_only")])
    client = anthropic.Anthropic(auth_token=token_of(session), base_url=relay.base_url, max_retries=0)
    memories = client.beta.memory_stores.memories

    assert client.beta.sessions.retrieve(session["id"]).id == session["id"]  # passed through
    basic = list(memories.list(sid, limit=10))  # paged by the relay's cache
    assert [m.path for m in basic] == sorted(f"/d{i % 3}/m{i:02}.md" for i in range(45))
    assert all(m.content is None for m in basic)
    full = list(memories.list(sid, view="full", limit=20))
    assert {m.path: m.content for m in full}["/d0/m00.md"] == "0\n"
    one = memories.retrieve(basic[0].id, memory_store_id=sid)
    assert one.content is not None and one.memory_version_id == basic[0].memory_version_id

    made = memories.create(sid, path="/new.md", content="through the relay\n")
    assert (
        memories.retrieve(made.id, memory_store_id=sid).content == "through the relay\n"
    )  # the cache has it
    changed = memories.update(
        made.id,
        memory_store_id=sid,
        content="changed\n",
        precondition={"type": "content_sha256", "content_sha256": sha("through the relay\n")},
    )
    assert changed.content_sha256 == sha("changed\n")
    with pytest.raises(anthropic.ConflictError) as stale:  # the upstream's 409, as the client knows it
        memories.update(
            made.id,
            memory_store_id=sid,
            content="late\n",
            precondition={"type": "content_sha256", "content_sha256": sha("through the relay\n")},
        )
    assert stale.value.body["error"]["type"] == "memory_precondition_failed_error"
    with pytest.raises(anthropic.PermissionDeniedError):  # read_only: the upstream's 403
        memories.create(ro, path="/x.md", content="no\n")
    memories.delete(made.id, memory_store_id=sid)
    with pytest.raises(anthropic.NotFoundError):
        memories.retrieve(made.id, memory_store_id=sid)
    versions = list(client.beta.memory_stores.memory_versions.list(sid, memory_id=made.id))  # passed through
    assert [v.operation for v in versions] == ["deleted", "modified", "created"]

    with up.admin_client() as c:  # the upstream holds what went through the relay, and only that
        listed = c.get(f"/v1/memory_stores/{sid}/memories", params={"limit": 100}).json()["data"]
    assert len(listed) == 45 and "/new.md" not in {m["path"] for m in listed}


def test_the_upstreams_missing_batch_route_is_asked_once_for_every_mount(pair):
    import httpx

    up, relay = pair
    sid = up.create_store("handbook")["id"]
    headers = {"anthropic-beta": "agent-memory-2026-07-22"}
    ops = {"operations": [{"type": "create", "path": "/a.md", "content": "a\n"}]}
    for _ in range(3):  # three mounts trying the batch route once each
        token = token_of(up.create_session([(sid, "read_write")]))
        r = httpx.post(
            f"{relay.base_url}/v1/memory_stores/{sid}/memory_batch",
            json=ops,
            headers={**headers, "authorization": f"Bearer {token}"},
        )
        assert r.status_code == 404 and "no such endpoint" in r.json()["error"]["message"], r.text
    status = httpx.get(relay.base_url + "/v1/relay_status", headers={"x-api-key": relay.admin_key}).json()
    assert status["front_requests"].get("write") == 1
