"""The list route's session lookup: one storage call (one worker-thread hop) per page, same answers.

A hosted tick is hundreds of list pages with a session token (docs/PERFORMANCE.md, network
section); the route used to look the session up in one worker-thread hop and read the page in a
second. In process (the real app over SQLite, starlette's TestClient), with the storage's calls
counted."""

from __future__ import annotations

import base64
import json
import re

import pytest
from starlette.testclient import TestClient

from memfs.service.app import create_app
from memfs.service.backend import WouldBlock
from memfs.service.database import open_storage
from memfs.service.orglimit import OrgLimits
from memfs.service.ratelimit import RateLimiter

ADMIN = "list-route-admin-key-0123456789"
MEMORY = {"anthropic-beta": "agent-memory-2026-07-22"}
SESSIONS = {"anthropic-beta": "managed-agents-2026-04-01"}
COUNTED = ("session_for_token", "list_memories", "list_memories_as", "read_checked")


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
    # one call each (list_path.py; was session_for_token + list_memories, then list_memories_as)
    assert storage.calls == ["read_checked", "read_checked"]
    # the admin key: one call, as before
    storage.calls.clear()
    assert c.get(url, params={"limit": 2, "path_prefix": "/d/"}, headers=admin).json() == page.json()
    assert storage.calls == ["read_checked"]

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


def _seed(c: TestClient) -> tuple[str, str, str]:
    """A store with direct children, subtrees, a deleted memory, unicode and a large content; an
    empty store; a store the session does not attach."""
    admin = {"x-api-key": ADMIN, **MEMORY}
    sid = c.post("/v1/memory_stores", json={"name": "a"}, headers=admin).json()["id"]
    empty = c.post("/v1/memory_stores", json={"name": "e"}, headers=admin).json()["id"]
    paths = ["/a.md", "/d/e/x.md", "/d/e/y.md", "/z/deep/q.md", "/ü/ñ.md", "/d/z b&c.md"]
    paths += [f"/d/n{i}.md" for i in range(7)]
    ids = {}
    for i, path in enumerate(paths):
        content = "x" * 70_000 if i == 0 else f'line {i}\n\t"quoted" ü \u2028 end'
        r = c.post(
            f"/v1/memory_stores/{sid}/memories", json={"path": path, "content": content}, headers=admin
        )
        assert r.status_code == 200, r.text
        ids[path] = r.json()["id"]
    gone = c.delete(f"/v1/memory_stores/{sid}/memories/{ids['/d/n2.md']}", headers=admin)
    assert gone.status_code == 200
    return sid, empty, admin["x-api-key"]


def _pages(c: TestClient, url: str, query: dict, headers: dict) -> list[tuple[int, bytes, str | None]]:
    """Every page of one listing, following its cursors: (status, body, counter header)."""
    out = []
    cursor = None
    for _ in range(50):
        r = c.get(url, params={**query, **({"page": cursor} if cursor else {})}, headers=headers)
        out.append((r.status_code, r.content, r.headers.get("memfs-store-counter")))
        cursor = r.json().get("next_page") if r.status_code == 200 else None
        if not cursor:
            return out
    raise AssertionError("a listing did not end")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("extensions", [False, True])
def test_the_list_fast_path_answers_byte_for_byte_what_the_full_path_answers(tmp_path, extensions):
    """list_path.py (rows straight to wire dicts, read on the loop on SQLite) against the full path
    (the same app with its fast paths turned off): the same bytes for every view, depth, prefix
    and limit, page by page through the cursors."""
    storage = open_storage(tmp_path / "store.db")
    fast = create_app(storage, ADMIN, extensions=extensions)
    full = create_app(storage, ADMIN, extensions=extensions, fast_paths=False)
    assert fast.list_path is not None and full.list_path is None
    try:
        with TestClient(fast) as f, TestClient(full) as g:
            sid, empty, _ = _seed(f)
            _sid, token = _token(f, [sid, empty])
            callers = ({"x-api-key": ADMIN, **MEMORY}, {"authorization": f"Bearer {token}", **MEMORY})
            compared = 0
            for headers in callers:
                for store in (sid, empty):
                    url = f"/v1/memory_stores/{store}/memories"
                    for view in ("basic", "full"):
                        for depth in ("0", "1"):
                            for prefix in (None, "/d/", "/d/e/", "/nope/"):
                                for limit in (1, 2, 100):
                                    q = {"view": view, "depth": depth, "limit": limit}
                                    if prefix:
                                        q["path_prefix"] = prefix
                                    mine, theirs = _pages(f, url, q, headers), _pages(g, url, q, headers)
                                    assert mine == theirs, (url, q)
                                    assert all(status == 200 for status, _b, _c in mine)
                                    compared += len(mine)
            assert compared > 200
            # repeated and odd parameters (the last of a name wins, as Starlette reads them) and
            # errors: the same status and bytes (an error is the full path's answer on both)
            url = f"/v1/memory_stores/{sid}/memories"
            for qs in (
                "limit=2&limit=5",
                "depth=1&depth=0&path_prefix=%2Fnope%2F&path_prefix=%2Fd%2F",
                "view=&limit=3",
                "view=full&view=basic&limit=100",
                "path_prefix=%2Fd%2Fe%2F&x=1&limit=1;view=full",
                "limit=0",
                "page=forged",
                "depth=2",
                "path_prefix=d",
            ):
                for headers in callers:
                    mine, theirs = (
                        f.get(url + "?" + qs, headers=headers),
                        g.get(url + "?" + qs, headers=headers),
                    )
                    assert mine.status_code == theirs.status_code, qs
                    if mine.status_code == 200:
                        assert mine.content == theirs.content, qs
                    else:
                        assert mine.json()["error"] == theirs.json()["error"], qs
            lp = fast.list_path
            assert lp.loop_reads > 0 and lp.thread_reads > 0  # basic on the loop, full in a thread
            # an answer with a deleted memory, roll-ups, content and the counter header, for the record
            body = json.loads(
                _pages(f, f"/v1/memory_stores/{sid}/memories", {"depth": "1"}, callers[1])[0][1]
            )
            assert [i["path"] for i in body["data"]] == ["/a.md", "/d/", "/z/", "/ü/"]
            assert body["data"][1] == {"type": "memory_prefix", "path": "/d/"}
            d = _pages(
                f, f"/v1/memory_stores/{sid}/memories", {"path_prefix": "/d/", "view": "full"}, callers[1]
            )
            paths = [i["path"] for i in json.loads(d[0][1])["data"]]
            assert "/d/n2.md" not in paths and "/d/n3.md" in paths
            assert (d[0][2] is not None) == extensions
    finally:
        storage.close()


@pytest.mark.timeout(60)
def test_a_loop_read_that_would_wait_is_read_in_a_worker_thread(tmp_path):
    """SQLite answering busy to the loop's read (`WouldBlock`): the page is read in a worker thread."""
    storage = open_storage(tmp_path / "store.db")
    frame = create_app(storage, ADMIN, extensions=False)
    lp = frame.list_path

    def busy():
        raise WouldBlock("database is locked")

    try:
        with TestClient(frame) as c:
            sid, _empty, _ = _seed(c)
            url = f"/v1/memory_stores/{sid}/memories"
            headers = {"x-api-key": ADMIN, **MEMORY}
            before = c.get(url, headers=headers)
            assert (lp.loop_reads, lp.thread_reads) == (1, 0)
            lp.inline_read = busy
            after = c.get(url, headers=headers)
            assert (lp.loop_reads, lp.thread_reads) == (1, 1)
            assert after.status_code == 200 and after.content == before.content
    finally:
        storage.close()


def _frozen_clock() -> float:
    return 0.0  # no bucket refills: the same requests are refused at the same point, same waits


def _answer(r) -> tuple[int, bytes, list[tuple[str, str]]]:
    """Status, body and headers, the request id (per app, per request) blanked, and the organisation
    limit's `-remaining`/`-reset` (where its bucket stands at that moment) named, not compared."""
    headers = sorted(
        (
            k,
            v
            if k not in ("anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset")
            else "…",
        )
        for k, v in r.headers.items()
        if k != "request-id"
    )
    return r.status_code, re.sub(rb"req_[0-9a-f]+", b"req_", r.content), headers


@pytest.mark.timeout(120)
@pytest.mark.parametrize("limit", ["rate", "org"])
def test_the_fast_paths_stay_on_with_a_limit_and_refuse_byte_for_byte_as_the_full_path(tmp_path, limit):
    """With `--rate-limit` (one bucket per caller, taken as app.py takes it) or an organisation's
    limit (taken by the request frame before any path): list pages, a counter and counters are
    answered without the router, their 429s included, and every answer (200 or 429) is the
    full path's, byte for byte."""
    storage = open_storage(tmp_path / "store.db")

    def limited(**kw):
        if limit == "rate":
            return create_app(storage, ADMIN, rate_limiter=RateLimiter(1.0, 4, clock=_frozen_clock), **kw)
        return create_app(storage, ADMIN, org_limits=OrgLimits(60, 6000, 5.0, clock=_frozen_clock), **kw)

    fast, full = limited(), limited(fast_paths=False)
    assert fast.list_path is not None and fast.counter_path is not None
    through: list[str] = []
    inner = fast.app

    async def router(scope, receive, send):
        if scope["type"] == "http":
            through.append(scope["path"])
        await inner(scope, receive, send)

    fast.app = router
    try:
        with TestClient(create_app(storage, ADMIN)) as setup, TestClient(fast) as f, TestClient(full) as g:
            sid, empty, _ = _seed(setup)
            _sid, token = _token(setup, [sid, empty])
            callers = ({"x-api-key": ADMIN, **MEMORY}, {"authorization": f"Bearer {token}", **MEMORY})
            urls = (
                f"/v1/memory_stores/{sid}/memories?depth=1",
                f"/v1/memory_stores/{empty}/counter",
                f"/v1/memory_store_counters?ids={sid},{empty}",
            )
            statuses = []
            for headers in callers:
                for url in urls:
                    for _ in range(2):
                        mine, theirs = (
                            _answer(f.get(url, headers=headers)),
                            _answer(g.get(url, headers=headers)),
                        )
                        assert mine == theirs, (url, headers)
                        statuses.append(mine[0])
            assert 200 in statuses and 429 in statuses, statuses
            assert through == []  # every answer, 429s included, without the router
            refused = f.get(urls[0], headers=callers[1])
            assert refused.status_code == 429 and refused.json()["error"]["type"] == "rate_limit_error"
            assert refused.headers["retry-after"] and refused.headers["request-id"]
            if limit == "rate":  # (an organisation's 429 is answered before any route is matched)
                metrics = f.get("/metrics").text
                assert 'route="/v1/memory_stores/{store_id}/memories",status="429"' in metrics
    finally:
        storage.close()
