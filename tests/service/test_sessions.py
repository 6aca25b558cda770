"""Sessions: create, retrieve, archive; mount paths; the work secret; token scope and revocation."""

from __future__ import annotations

import base64
import json

import httpx

SESSIONS = {"anthropic-beta": "managed-agents-2026-04-01"}
MEMORY = {"anthropic-beta": "agent-memory-2026-07-22"}


def decode_secret(secret: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(secret))


def test_session_create_retrieve_archive(service):
    notes = service.create_store("My Notes!", description="what I know")["id"]
    twin = service.create_store("my  notes")["id"]
    third = service.create_store("--My_Notes--")["id"]
    odd = service.create_store("Ünïcode ☃ Store")["id"]
    with service.admin_client(SESSIONS["anthropic-beta"]) as admin:
        r = admin.post(
            "/v1/sessions",
            json={
                "resources": [
                    {
                        "type": "memory_store",
                        "memory_store_id": notes,
                        "access": "read_write",
                        "instructions": "be tidy",
                    },
                    {"type": "memory_store", "memory_store_id": twin, "access": "read_only"},
                    {"type": "memory_store", "memory_store_id": third},
                    {"type": "memory_store", "memory_store_id": odd},
                ]
            },
        )
        assert r.status_code == 200, r.text
        s = r.json()
        assert s["id"].startswith("sesn_") and s["type"] == "session" and s["archived_at"] is None
        res = s["resources"]
        assert [x["mount_path"] for x in res] == [
            "/mnt/memory/my-notes",
            "/mnt/memory/my-notes-2",
            "/mnt/memory/my-notes-3",
            "/mnt/memory/n-code-store",
        ]
        assert [x["access"] for x in res] == ["read_write", "read_only", "read_write", "read_write"]
        assert (res[0]["name"], res[0]["description"], res[0]["instructions"]) == (
            "My Notes!",
            "what I know",
            "be tidy",
        )
        assert res[1]["description"] == "" and res[1]["instructions"] is None

        secret = decode_secret(s["work_secret"])
        assert set(secret) == {"sessions_token"}
        token = secret["sessions_token"]

        # name/description are copied at attach time: renaming the store later does not change them
        with service.admin_client() as mem_admin:
            assert mem_admin.post(f"/v1/memory_stores/{notes}", json={"name": "Renamed"}).status_code == 200
        got = admin.get(f"/v1/sessions/{s['id']}")
        assert got.status_code == 200
        assert got.json()["resources"] == res and "work_secret" not in got.json()

    agent = httpx.Client(base_url=service.base_url, headers={"x-api-key": token, **SESSIONS})
    with agent:
        assert agent.get(f"/v1/sessions/{s['id']}").json()["id"] == s["id"]  # its own session
        other = service.create_session([])
        assert agent.get(f"/v1/sessions/{other['id']}").status_code == 404
        assert agent.post("/v1/sessions", json={"resources": []}).status_code == 403
        assert agent.get(f"/v1/memory_stores/{notes}/counter", headers=MEMORY).status_code == 200

        with service.admin_client(SESSIONS["anthropic-beta"]) as admin:
            archived = admin.post(f"/v1/sessions/{s['id']}/archive")
            assert archived.status_code == 200 and archived.json()["archived_at"]
            again = admin.post(f"/v1/sessions/{s['id']}/archive")
            assert again.json()["archived_at"] == archived.json()["archived_at"]
            assert (
                admin.get(f"/v1/sessions/{s['id']}").json()["archived_at"] == archived.json()["archived_at"]
            )
            assert admin.get("/v1/sessions/sesn_nope").status_code == 404
        # the token is revoked
        r = agent.get(f"/v1/memory_stores/{notes}/counter", headers=MEMORY)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


def test_session_limits_and_refusals(service):
    stores = [service.create_store(f"s{i}")["id"] for i in range(9)]
    archived = service.create_store("old")["id"]
    with service.admin_client() as mem_admin:
        mem_admin.post(f"/v1/memory_stores/{archived}/archive")

    def post(resources, **extra):
        with service.admin_client(SESSIONS["anthropic-beta"]) as admin:
            return admin.post("/v1/sessions", json={"resources": resources, **extra})

    def res(sid, **kw):
        return {"type": "memory_store", "memory_store_id": sid, **kw}

    assert post([res(s) for s in stores[:8]]).status_code == 200
    r = post([res(s) for s in stores])
    assert r.status_code == 400 and "at most 8" in r.json()["error"]["message"]
    r = post([res(archived)])
    assert r.status_code == 400 and "archived" in r.json()["error"]["message"]
    assert post([res("memstore_nope")]).status_code == 404
    assert post([res(stores[0]), res(stores[0])]).status_code == 400
    assert post([res(stores[0], access="admin")]).status_code == 400
    assert post([{"type": "file", "file_id": "f"}]).status_code == 400
    assert post([res(stores[0], instructions="i" * 4097)]).status_code == 400
    assert post([res(stores[0], extra=1)]).status_code == 400
    assert post("not a list").status_code == 400
    assert post([], agent="x").status_code == 400  # unknown field

    with httpx.Client(base_url=service.base_url, headers={"x-api-key": service.admin_key}) as raw:
        r = raw.post("/v1/sessions", json={"resources": []})
        assert r.status_code == 400 and "managed-agents-2026-04-01" in r.json()["error"]["message"]
        r = raw.post("/v1/sessions", json={"resources": []}, headers=MEMORY)
        assert r.status_code == 400
        assert (
            raw.post(
                "/v1/sessions", json={"resources": []}, headers={**SESSIONS, "x-api-key": "bad"}
            ).status_code
            == 401
        )


def test_the_sessions_of_a_store_are_listed_for_the_admin_only(service):
    store = service.create_store("shared")["id"]
    other = service.create_store("other")["id"]
    made = [service.create_session([(store, "read_only" if i % 2 else "read_write")]) for i in range(5)]
    service.create_session([(other, "read_write")])
    with service.admin_client(SESSIONS["anthropic-beta"]) as admin:
        assert admin.post(f"/v1/sessions/{made[0]['id']}/archive").status_code == 200
        seen, page = [], None
        while True:
            r = admin.get(
                "/v1/sessions",
                params={"memory_store_id": store, "limit": 2, **({"page": page} if page else {})},
            )
            assert r.status_code == 200, r.text
            seen += r.json()["data"]
            page = r.json()["next_page"]
            if not page:
                break
        assert [s["id"] for s in seen] == [s["id"] for s in reversed(made[1:])]  # newest first, no archived
        assert all(s["resources"][0]["memory_store_id"] == store for s in seen)
        every = admin.get(
            "/v1/sessions", params={"memory_store_id": store, "include_archived": "true", "limit": 100}
        )
        assert len(every.json()["data"]) == 5
        assert admin.get("/v1/sessions").status_code == 400  # memfs serve lists them by store
        bad = admin.get("/v1/sessions", params={"memory_store_id": other, "page": "not-a-cursor"})
        assert bad.status_code == 400
    token = decode_secret(made[1]["work_secret"])["sessions_token"]
    r = httpx.get(
        service.base_url + "/v1/sessions",
        params={"memory_store_id": store},
        headers={**SESSIONS, "authorization": f"Bearer {token}"},
    )
    assert r.status_code == 403, r.text
