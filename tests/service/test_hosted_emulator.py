"""`memfs serve --hosted-api` as the hosted API behaves, on a real subprocess, both backends:
`--session-versions refuse`, `--test-late-versions` with its header (docs/API.md, "The hosted-API
emulator")."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from tests.support.service import MEMORY_BETA, ServiceProcess

pytestmark = pytest.mark.timeout(120)
BACKDATE = "memfs-test-backdate-seconds"


def token_of(session: dict) -> str:
    return json.loads(base64.urlsafe_b64decode(session["work_secret"]))["sessions_token"]


@pytest.fixture
def emulator(request, tmp_path, service_db):
    """A `memfs serve --hosted-api` with the flags the test is parametrised with (indirect)."""
    args = getattr(request, "param", ())
    svc = ServiceProcess(tmp_path / "svc", db_url=service_db, hosted_api=True, extra_args=args)
    try:
        yield svc
    finally:
        svc.stop()


def http_as(svc: ServiceProcess, credential: str) -> httpx.Client:
    return httpx.Client(
        base_url=svc.base_url, headers={"x-api-key": credential, "anthropic-beta": MEMORY_BETA}, timeout=30
    )


@pytest.mark.parametrize("emulator", [("--session-versions", "refuse")], indirect=True)
def test_session_versions_refused_while_the_admin_still_lists(emulator):
    store = emulator.create_store("s")["id"]
    other = emulator.create_store("other")["id"]
    token = token_of(emulator.create_session([(store, "read_write")]))
    with http_as(emulator, token) as agent, emulator.admin_client() as admin:
        mem = agent.post(f"/v1/memory_stores/{store}/memories", json={"path": "/a.md", "content": "x"}).json()
        for url in (
            f"/v1/memory_stores/{store}/memory_versions",
            f"/v1/memory_stores/{store}/memory_versions/{mem['memory_version_id']}",
        ):
            r = agent.get(url)
            assert r.status_code == 403, r.text
            body = r.json()
            assert body["type"] == "error" and body["error"]["type"] == "permission_error"
            assert body["request_id"] == r.headers["request-id"]
        # a store the session does not attach stays a 404 (existence is not leaked)
        assert agent.get(f"/v1/memory_stores/{other}/memory_versions").status_code == 404
        # the session still reads and writes memories; the admin key still lists versions
        assert agent.get(f"/v1/memory_stores/{store}/memories").status_code == 200
        listed = admin.get(f"/v1/memory_stores/{store}/memory_versions").json()["data"]
        assert [v["id"] for v in listed] == [mem["memory_version_id"]]
        assert admin.get(f"/v1/memory_stores/{store}/memory_versions/{listed[0]['id']}").status_code == 200


def test_session_versions_allowed_by_default(emulator):
    store = emulator.create_store("s")["id"]
    token = token_of(emulator.create_session([(store, "read_write")]))
    with http_as(emulator, token) as agent:
        mem = agent.post(f"/v1/memory_stores/{store}/memories", json={"path": "/a.md", "content": "x"}).json()
        r = agent.get(f"/v1/memory_stores/{store}/memory_versions")
        assert r.status_code == 200 and [v["id"] for v in r.json()["data"]] == [mem["memory_version_id"]]


@pytest.mark.parametrize("emulator", [("--test-late-versions",)], indirect=True)
def test_a_backdated_write_is_listed_behind_a_later_version_and_found_by_its_time(emulator):
    store = emulator.create_store("s")["id"]
    token = token_of(emulator.create_session([(store, "read_write")]))
    base = f"/v1/memory_stores/{store}"
    with http_as(emulator, token) as agent:
        a = agent.post(f"{base}/memories", json={"path": "/a.md", "content": "1"}).json()
        b = agent.post(f"{base}/memories", json={"path": "/b.md", "content": "1"}).json()
        late = agent.post(f"{base}/memories/{a['id']}", json={"content": "2"}, headers={BACKDATE: "30"})
        assert late.status_code == 200, late.text
        late = late.json()
        # the memory's updated_at is the version's (backdated) time, before b's creation
        assert late["updated_at"] < b["created_at"]
        assert agent.get(f"{base}/memories/{a['id']}").json()["updated_at"] == late["updated_at"]
        listed, page = [], None
        while True:  # one per page: the cursors walk the created_at order
            r = agent.get(f"{base}/memory_versions", params={"limit": 1, **({"page": page} if page else {})})
            assert r.status_code == 200, r.text
            listed += r.json()["data"]
            page = r.json()["next_page"]
            if not page:
                break
        # committed last, recorded 30 s ago: behind both creations
        assert [v["id"] for v in listed] == [b["memory_version_id"], a["memory_version_id"],
                                              late["memory_version_id"]]  # fmt: skip
        v = listed[2]
        assert v["created_at"] == late["updated_at"] and v["operation"] == "modified"
        # inclusive bounds at its own time find exactly it; a window after b's creation misses it
        found = agent.get(
            f"{base}/memory_versions",
            params={"created_at[gte]": v["created_at"], "created_at[lte]": v["created_at"]},
        ).json()["data"]
        assert [x["id"] for x in found] == [v["id"]]
        since_b = agent.get(f"{base}/memory_versions", params={"created_at[gte]": b["created_at"]}).json()[
            "data"
        ]
        assert [x["id"] for x in since_b] == [b["memory_version_id"]]
        # a bad value is a 400; create and delete take the header too
        bad = agent.post(
            f"{base}/memories", json={"path": "/c.md", "content": "1"}, headers={BACKDATE: "soon"}
        )
        assert bad.status_code == 400 and BACKDATE in bad.json()["error"]["message"]
        c = agent.post(
            f"{base}/memories", json={"path": "/c.md", "content": "1"}, headers={BACKDATE: "60"}
        ).json()
        assert c["created_at"] == c["updated_at"] < a["created_at"]
        assert agent.delete(f"{base}/memories/{c['id']}", headers={BACKDATE: "90"}).status_code == 200
        newest = agent.get(f"{base}/memory_versions", params={"limit": 1}).json()["data"][0]
        assert newest["id"] == b["memory_version_id"]  # the delete went behind everything too


def test_without_the_flag_the_backdate_header_is_ignored(emulator):
    store = emulator.create_store("s")["id"]
    with emulator.admin_client() as admin:
        a = admin.post(f"/v1/memory_stores/{store}/memories", json={"path": "/a.md", "content": "1"}).json()
        b = admin.post(
            f"/v1/memory_stores/{store}/memories",
            json={"path": "/b.md", "content": "1"},
            headers={BACKDATE: "3600"},
        ).json()
        assert b["created_at"] >= a["created_at"]
        listed = admin.get(f"/v1/memory_stores/{store}/memory_versions").json()["data"]
        assert [v["id"] for v in listed] == [b["memory_version_id"], a["memory_version_id"]]


def test_memory_versions_through_the_official_client(emulator):
    """The documented listing through the `anthropic` client: newest first, view basic (content
    null) by default and full capped at 20 a page, inclusive datetime bounds, every filter."""
    import anthropic

    store = emulator.create_store("s")["id"]
    client = anthropic.Anthropic(api_key=emulator.admin_key, base_url=emulator.base_url, max_retries=0)
    try:
        mems, versions = client.beta.memory_stores.memories, client.beta.memory_stores.memory_versions
        made = [mems.create(store, path=f"/m{i:02}.md", content=f"c{i}") for i in range(25)]
        renamed = mems.update(made[0].id, memory_store_id=store, path="/renamed.md")
        mems.delete(made[1].id, memory_store_id=store)
        page = versions.list(store)
        assert len(page.data) == 20 and all(v.content is None for v in page.data)  # default limit, basic
        everything = list(versions.list(store, limit=100))
        assert len(everything) == 27
        assert [v.created_at for v in everything] == sorted((v.created_at for v in everything), reverse=True)
        assert (everything[0].operation, everything[0].path, everything[0].content_sha256) == (
            "deleted",
            "/m01.md",
            None,
        )
        assert (everything[1].operation, everything[1].path, everything[1].memory_id) == (
            "modified",
            "/renamed.md",
            made[0].id,
        )
        assert renamed.memory_version_id == everything[1].id
        full = versions.list(store, view="full", limit=100)
        assert len(full.data) == 20 and full.data[-1].content is not None and full.next_page
        # inclusive bounds, given as datetimes (the client sends them as RFC 3339)
        mid = everything[10].created_at
        window = list(versions.list(store, created_at_gte=mid, created_at_lte=mid, limit=100))
        assert [v.id for v in window] == [everything[10].id]
        newer = list(versions.list(store, created_at_gte=mid, limit=100))
        assert [v.id for v in newer] == [v.id for v in everything[:11]]
        assert [v.id for v in versions.list(store, memory_id=made[1].id)] == [
            everything[0].id,
            everything[-2].id,
        ]
        assert [v.operation for v in versions.list(store, operation="deleted")] == ["deleted"]
        assert (
            len(list(versions.list(store, api_key_id=everything[0].created_by.api_key_id, limit=100))) == 27
        )
        assert list(versions.list(store, session_id="sesn_none")) == []
        assert list(versions.list(store, service_account_id="svac_none")) == []
        assert (
            versions.retrieve(everything[5].id, memory_store_id=store).content is not None
        )  # full by default
    finally:
        client.close()
