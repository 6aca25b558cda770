"""The list route's session lookup: one storage call (one worker-thread hop) per page, same answers.

A hosted tick is hundreds of list pages with a session token (docs/PERFORMANCE.md, network
section); the route used to look the session up in one worker-thread hop and read the page in a
second. In process (the real app over SQLite, starlette's TestClient), with the storage's calls
counted."""

from __future__ import annotations

import base64
import json

import pytest
from starlette.testclient import TestClient

from memfs.service.app import create_app
from memfs.service.database import open_storage

ADMIN = "list-route-admin-key-0123456789"
MEMORY = {"anthropic-beta": "agent-memory-2026-07-22"}
SESSIONS = {"anthropic-beta": "managed-agents-2026-04-01"}
COUNTED = ("session_for_token", "list_memories", "list_memories_as")


class _Counting:
    """The storage, with the calls of the list route's methods counted by name."""

    def __init__(self, inner):
        self._inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name not in COUNTED:
            return attr

        def counted(*a, **kw):
            self.calls.append(name)
            return attr(*a, **kw)

        return counted


@pytest.fixture
def app(tmp_path):
    storage = _Counting(open_storage(tmp_path / "store.db"))
    with TestClient(create_app(storage, ADMIN, extensions=False)) as c:
        yield c, storage
    storage._inner.close()


def _token(c: TestClient, store_ids: list[str]) -> tuple[str, str]:
    res = [{"type": "memory_store", "memory_store_id": s, "access": "read_write"} for s in store_ids]
    body = c.post("/v1/sessions", json={"resources": res}, headers={"x-api-key": ADMIN, **SESSIONS}).json()
    secret = body["work_secret"]
    token = json.loads(base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4)))["sessions_token"]
    return body["id"], token


@pytest.mark.timeout(60)
def test_a_session_tokens_list_page_is_one_storage_call_with_the_same_answers(app):
    c, storage = app
    admin = {"x-api-key": ADMIN, **MEMORY}
    sid = c.post("/v1/memory_stores", json={"name": "a"}, headers=admin).json()["id"]
    other = c.post("/v1/memory_stores", json={"name": "b"}, headers=admin).json()["id"]
    for i in range(5):
        c.post(
            f"/v1/memory_stores/{sid}/memories", json={"path": f"/d/n{i}.md", "content": "x"}, headers=admin
        )
    session_id, token = _token(c, [sid])
    bearer = {"authorization": f"Bearer {token}", **MEMORY}
    url = f"/v1/memory_stores/{sid}/memories"

    storage.calls.clear()
    page = c.get(url, params={"limit": 2, "path_prefix": "/d/"}, headers=bearer)
    assert page.status_code == 200, page.text
    assert [m["path"] for m in page.json()["data"]] == ["/d/n0.md", "/d/n1.md"]
    rest = c.get(
        url, params={"limit": 2, "path_prefix": "/d/", "page": page.json()["next_page"]}, headers=bearer
    )
    assert [m["path"] for m in rest.json()["data"]] == ["/d/n2.md", "/d/n3.md"]
    assert storage.calls == ["list_memories_as", "list_memories_as"]  # was session_for_token + list_memories
    # the admin key needs no lookup: one call, as before
    storage.calls.clear()
    assert c.get(url, params={"limit": 2, "path_prefix": "/d/"}, headers=admin).json() == page.json()
    assert storage.calls == ["list_memories"]

    # the same errors, in the same order: a bad credential before a bad parameter, a store the
    # session does not attach is 404 before its parameters are looked at
    bad = {"authorization": "Bearer not-a-token", **MEMORY}
    assert c.get(url, headers=bad).status_code == 401
    assert c.get(url, params={"depth": "7"}, headers=bad).status_code == 401
    assert c.get(url, params={"depth": "7"}, headers=bearer).status_code == 400
    assert c.get(url, params={"page": "forged"}, headers=bearer).status_code == 400
    unattached = c.get(f"/v1/memory_stores/{other}/memories", headers=bearer)
    assert unattached.status_code == 404 and other in unattached.json()["error"]["message"]
    assert (
        c.get(f"/v1/memory_stores/{other}/memories", params={"depth": "7"}, headers=bearer).status_code == 404
    )
    assert c.get(url, headers={"authorization": f"Bearer {token}"}).status_code == 400  # no beta header
    # an archived session's token is refused by the next page
    sessions_admin = {"x-api-key": ADMIN, **SESSIONS}
    assert c.post(f"/v1/sessions/{session_id}/archive", headers=sessions_admin).status_code == 200
    assert c.get(url, headers=bearer).status_code == 401


@pytest.mark.timeout(60)
def test_a_list_page_is_answered_without_the_router_and_an_error_through_it(tmp_path):
    """A successful list page skips Starlette's middleware and router (app.py `_list_page`); any
    error goes through the full path, which answers it; the metrics still name the route."""
    storage = open_storage(tmp_path / "store.db")
    frame = create_app(storage, ADMIN, extensions=False)
    through: list[str] = []
    inner = frame.app

    async def router(scope, receive, send):
        if scope["type"] == "http":
            through.append(scope["path"])
        await inner(scope, receive, send)

    frame.app = router
    try:
        with TestClient(frame) as c:
            admin = {"x-api-key": ADMIN, **MEMORY}
            sid = c.post("/v1/memory_stores", json={"name": "a"}, headers=admin).json()["id"]
            c.post(f"/v1/memory_stores/{sid}/memories", json={"path": "/x.md", "content": "x"}, headers=admin)
            _sid, token = _token(c, [sid])
            through.clear()
            for headers in (admin, {"authorization": f"Bearer {token}", **MEMORY}):
                r = c.get(f"/v1/memory_stores/{sid}/memories", params={"depth": "1"}, headers=headers)
                assert r.status_code == 200 and [m["path"] for m in r.json()["data"]] == ["/x.md"]
                assert r.headers["request-id"]
            assert through == []  # was: every page through the router
            bad = c.get(f"/v1/memory_stores/{sid}/memories", params={"depth": "2"}, headers=admin)
            assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
            assert c.get("/v1/memory_stores/memstore_nope/memories", headers=admin).status_code == 404
            assert through == [
                f"/v1/memory_stores/{sid}/memories",
                "/v1/memory_stores/memstore_nope/memories",
            ]
            metrics = c.get("/metrics").text
            assert 'route="/v1/memory_stores/{store_id}/memories",status="200"' in metrics
            assert 'route="/v1/memory_stores/{store_id}/memories",status="400"' in metrics
    finally:
        storage.close()
