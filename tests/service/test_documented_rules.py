"""The hosted API's documented rules (December 2026), one test each, on `memfs serve` and its
emulator `memfs serve --hosted-api` (real subprocesses), so none regresses (docs/API.md):
both beta headers 400; `depth` 0 or 1 only; `path_prefix` ends with `/`; an archived store refuses
creates and updates (400) but is read, deleted from and redacted; an unknown route is a JSON 404;
10,000 memories a store by default (new ones fail at the cap, existing ones stay editable);
`anthropic-workspace-id` accepted on store and memory calls (also through a relay); a repeated
create is 409, a repeated update 409 on the emulator (200 on memfs serve: SEMANTICS.md#d-api);
and the emulator's test 503s (`--test-unavailable`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import anthropic
import httpx
import pytest

from memfs.relay.upstream import forwarded_headers
from tests.support.service import MEMORY_BETA, SESSIONS_BETA, ServiceProcess

pytestmark = pytest.mark.timeout(180)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(params=["serve", "hosted"])
def svc(request, tmp_path) -> Iterator[ServiceProcess]:
    s = ServiceProcess(tmp_path / request.param, hosted_api=request.param == "hosted")
    try:
        yield s
    finally:
        s.stop()


def error_type(r: httpx.Response) -> str:
    assert r.headers["content-type"].startswith("application/json"), r.headers
    return r.json()["error"]["type"]


def test_both_beta_headers_are_400(svc):
    sid = svc.create_store("s")["id"]
    with svc.admin_client(beta=f"{MEMORY_BETA},{SESSIONS_BETA}") as c:
        for method, path in (
            ("GET", f"/v1/memory_stores/{sid}"),
            ("GET", f"/v1/memory_stores/{sid}/memories"),
        ):
            r = c.request(method, path)
            assert r.status_code == 400 and error_type(r) == "invalid_request_error", r.text
    with svc.admin_client(beta=SESSIONS_BETA) as c:  # either one alone is enough
        assert c.get(f"/v1/memory_stores/{sid}/memories").status_code == 200


def test_depth_takes_only_0_or_1(svc):
    sid = svc.create_store("s")["id"]
    with svc.admin_client() as c:
        for depth, status in (("0", 200), ("1", 200), ("2", 400), ("-1", 400), ("x", 400)):
            r = c.get(f"/v1/memory_stores/{sid}/memories", params={"depth": depth})
            assert r.status_code == status, (depth, r.text)


def test_path_prefix_must_end_with_a_slash(svc):
    sid = svc.create_store("s")["id"]
    with svc.admin_client() as c:
        c.post(f"/v1/memory_stores/{sid}/memories", json={"path": "/ab/c.md", "content": "x"})
        c.post(f"/v1/memory_stores/{sid}/memories", json={"path": "/a/c.md", "content": "x"})
        assert c.get(f"/v1/memory_stores/{sid}/memories", params={"path_prefix": "/a"}).status_code == 400
        ok = c.get(f"/v1/memory_stores/{sid}/memories", params={"path_prefix": "/a/"})
        assert [m["path"] for m in ok.json()["data"]] == ["/a/c.md"]  # whole segments: not /ab/


def test_an_archived_store_refuses_creates_and_updates_but_is_read_deleted_and_redacted(svc):
    sid = svc.create_store("s")["id"]
    base = f"/v1/memory_stores/{sid}"
    with svc.admin_client() as c:
        a = c.post(f"{base}/memories", json={"path": "/a.md", "content": "a"}).json()
        b = c.post(f"{base}/memories", json={"path": "/b.md", "content": "b"}).json()
        assert c.post(f"{base}/archive").status_code == 200
        r = c.post(f"{base}/memories", json={"path": "/c.md", "content": "c"})
        assert r.status_code == 400 and error_type(r) == "invalid_request_error", r.text
        r = c.post(f"{base}/memories/{a['id']}", json={"content": "changed"})
        assert r.status_code == 400 and error_type(r) == "invalid_request_error", r.text
        r = c.post(f"{base}/memories/{a['id']}", json={"path": "/moved.md"})
        assert r.status_code == 400, r.text
        assert c.get(f"{base}/memories/{a['id']}").json()["content"] == "a"  # read
        assert [m["path"] for m in c.get(f"{base}/memories").json()["data"]] == ["/a.md", "/b.md"]
        assert c.delete(f"{base}/memories/{b['id']}").status_code == 200  # deleted
        version = c.get(f"{base}/memory_versions", params={"memory_id": a["id"]}).json()["data"][0]
        redacted = c.post(f"{base}/memory_versions/{version['id']}/redact")  # redacted
        assert redacted.status_code == 200, redacted.text
        assert c.get(f"{base}/memory_versions/{version['id']}").json()["content"] is None


def test_an_unknown_route_is_a_json_404(svc):
    with svc.admin_client() as c:
        for path in ("/v1/nothing", "/v1/memory_stores/x/nothing", "/v1/memory_stores/", "/nothing"):
            r = c.get(path)
            assert r.status_code == 404 and error_type(r) == "not_found_error", (path, r.status_code, r.text)


def test_a_repeated_create_and_update(svc):
    """A client's retry after a lost answer: the create meets 409 (its path is taken). The update's
    precondition names the old sha: 409 on the emulator, as on the hosted API; memfs serve answers
    200 when the store already holds what it asks for (SEMANTICS.md#d-api)."""
    sid = svc.create_store("s")["id"]
    base = f"/v1/memory_stores/{sid}/memories"
    with svc.admin_client() as c:
        first = c.post(base, json={"path": "/a.md", "content": "one"})
        again = c.post(base, json={"path": "/a.md", "content": "one"})
        assert again.status_code == 409 and error_type(again) == "memory_path_conflict_error"
        conflict = again.json()["error"]
        assert (conflict["conflicting_memory_id"], conflict["conflicting_path"]) == (
            first.json()["id"],
            "/a.md",
        )
        body = {"content": "two", "precondition": {"type": "content_sha256", "content_sha256": sha("one")}}
        mid = first.json()["id"]
        assert c.post(f"{base}/{mid}", json=body).status_code == 200
        repeat = c.post(f"{base}/{mid}", json=body)
        if svc.hosted_api:
            assert repeat.status_code == 409 and error_type(repeat) == "memory_precondition_failed_error"
        else:
            assert repeat.status_code == 200 and repeat.json()["content_sha256"] == sha("two")
        assert len(c.get(f"/v1/memory_stores/{sid}/memory_versions").json()["data"]) == 2  # nothing twice


def test_anthropic_workspace_id_is_accepted_on_store_and_memory_calls(svc, tmp_path):
    """An optional header on store and memory calls (the official client's `workspace_id=`); this
    service has one workspace. A relay passes it on with what it writes through."""
    relay = ServiceProcess(
        tmp_path / "relay", extra_args=("--upstream", svc.base_url, "--poll-interval", "1")
    )
    try:
        for target in (svc, relay):
            client = anthropic.Anthropic(api_key=svc.admin_key, base_url=target.base_url, max_retries=0)
            ws = {"workspace_id": "wrkspc_011CZkZaBF1tNoB5wlCeusgy"}
            stores, memories = client.beta.memory_stores, client.beta.memory_stores.memories
            store = stores.create(name="ws", **ws)
            assert stores.retrieve(store.id, **ws).id == store.id
            assert store.id in [s.id for s in stores.list(**ws)]
            m = memories.create(store.id, path="/a.md", content="a", **ws)
            assert memories.retrieve(m.id, memory_store_id=store.id, **ws).content == "a"
            assert [x.path for x in memories.list(store.id, **ws)] == ["/a.md"]
            memories.update(m.id, memory_store_id=store.id, content="b", **ws)
            memories.delete(m.id, memory_store_id=store.id, **ws)
            stores.archive(store.id, **ws)
            client.close()
    finally:
        relay.stop()
    # What the relay sends upstream keeps it (a write goes through with the caller's headers).
    caller = [(b"anthropic-workspace-id", b"wrkspc_1"), (b"connection", b"keep-alive"), (b"cookie", b"c")]
    assert forwarded_headers(caller) == [(b"anthropic-workspace-id", b"wrkspc_1")]


@pytest.mark.timeout(300)
def test_a_store_holds_10000_memories_by_default(tmp_path):
    """The default cap: new memories fail at 10,000, existing ones stay readable and editable, and a
    delete makes room again. Seeded with memfs serve's batch writes, then served by the emulator
    from the same database."""
    db = tmp_path / "store.db"
    seeder = ServiceProcess(tmp_path / "seed", db_path=db)
    sid = seeder.create_store("full")["id"]
    with seeder.admin_client() as c:
        for chunk in range(10):
            ops = [{"type": "create", "path": f"/d{chunk}/m{i:04d}.md", "content": "x"} for i in range(1000)]
            r = c.post(f"/v1/memory_stores/{sid}/memory_batch", json={"operations": ops})
            assert r.status_code == 200 and all(x["type"] == "memory" for x in r.json()["results"])
    seeder.stop()
    emulator = ServiceProcess(tmp_path / "hosted", db_path=db, hosted_api=True)
    try:
        base = f"/v1/memory_stores/{sid}/memories"
        with emulator.admin_client() as c:
            r = c.post(base, json={"path": "/one-more.md", "content": "x"})
            assert r.status_code == 400 and error_type(r) == "invalid_request_error", r.text
            assert "10000" in r.json()["error"]["message"]
            first = c.get(base, params={"path_prefix": "/d0/", "limit": 1}).json()["data"][0]
            edited = c.post(f"{base}/{first['id']}", json={"content": "edited", "path": "/d0/renamed.md"})
            assert edited.status_code == 200, edited.text
            assert c.delete(f"{base}/{first['id']}").status_code == 200
            assert c.post(base, json={"path": "/one-more.md", "content": "x"}).status_code == 200
    finally:
        emulator.stop()


@pytest.fixture
def faulty(tmp_path) -> Iterator[ServiceProcess]:
    s = ServiceProcess(tmp_path / "faulty", hosted_api=True, extra_args=("--test-unavailable",))
    try:
        yield s
    finally:
        s.stop()


def test_the_emulator_answers_the_hosted_503s_on_demand(faulty, tmp_path):
    """`--test-unavailable`: `storage_not_ready` before anything is done, `change_outcome_unknown`
    after the change was saved, each distinct header value once; the official client reads them as
    its error classes by `error_code`. Without the flag the header is ignored."""
    sid = faulty.create_store("s")["id"]
    client = anthropic.Anthropic(api_key=faulty.admin_key, base_url=faulty.base_url, max_retries=0)
    memories = client.beta.memory_stores.memories
    header = "memfs-test-unavailable"
    with pytest.raises(anthropic.InternalServerError) as e:
        memories.create(sid, path="/a.md", content="a", extra_headers={header: "storage_not_ready"})
    assert e.value.status_code == 503 and type(e.value).__name__ == "StorageNotReadyError"
    assert e.value.body["error"]["details"] == {"error_code": "storage_not_ready"}  # type: ignore[index]
    assert list(memories.list(sid)) == []  # nothing was done
    m = memories.create(sid, path="/a.md", content="a", extra_headers={header: "storage_not_ready"})  # once
    with pytest.raises(anthropic.InternalServerError) as e:
        memories.update(
            m.id, memory_store_id=sid, content="b", extra_headers={header: "change_outcome_unknown#1"}
        )
    assert e.value.body["error"]["details"] == {"error_code": "change_outcome_unknown"}  # type: ignore[index]
    assert memories.retrieve(m.id, memory_store_id=sid).content == "b"  # saved
    with pytest.raises(anthropic.InternalServerError):
        memories.delete(m.id, memory_store_id=sid, extra_headers={header: "change_outcome_unknown#2"})
    with pytest.raises(anthropic.NotFoundError):
        memories.retrieve(m.id, memory_store_id=sid)  # deleted
    with pytest.raises(anthropic.BadRequestError):
        memories.create(sid, path="/c.md", content="c", extra_headers={header: "no_such_code"})
    client.close()
    plain = ServiceProcess(tmp_path / "plain", hosted_api=True)  # no --test-unavailable
    try:
        sid = plain.create_store("s")["id"]
        with plain.admin_client() as c:
            r = c.post(f"/v1/memory_stores/{sid}/memories", json={"path": "/a", "content": "a"},
                       headers={header: "storage_not_ready"})  # fmt: skip
            assert r.status_code == 200, r.text
    finally:
        plain.stop()
