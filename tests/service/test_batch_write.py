"""The batch-write route on the wire, and acknowledgements under SIGKILL with concurrent writers.

`POST /v1/memory_stores/{id}/memory_batch` (docs/API.md): per-item answers shaped like the
single endpoints', a whole-request 400 only for the envelope, the service's limits, access
rules, no route with --hosted-api. Then the durability promise of group commit (SQLite) and of
the batch: many writers at once, the service killed with SIGKILL mid-burst, and every write that
was acknowledged is there after the restart, the counter contiguous.
"""

from __future__ import annotations

import hashlib
import threading

import httpx
import pytest

from tests.support.service import ServiceProcess

pytestmark = pytest.mark.timeout(120)
BETA = "agent-memory-2026-07-22"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def batch(c: httpx.Client, store: str, ops: list, **params) -> httpx.Response:
    return c.post(f"/v1/memory_stores/{store}/memory_batch", json={"operations": ops}, params=params)


def test_a_mixed_batch_answers_each_item_like_its_single_request(service):
    store = service.create_store("b")["id"]
    with service.admin_client() as c:
        m = c.post(f"/v1/memory_stores/{store}/memories", json={"path": "/m", "content": "m"}).json()
        g = c.post(f"/v1/memory_stores/{store}/memories", json={"path": "/g", "content": "g"}).json()
        r = batch(c, store, [
            {"type": "create", "path": "/new", "content": "n"},
            {"type": "create", "path": "/new", "content": "again"},
            {"type": "create", "path": "no-slash", "content": "x"},
            {"type": "update", "memory_id": m["id"], "path": "/moved",
             "precondition": {"type": "content_sha256", "content_sha256": sha("m")}},
            {"type": "update", "memory_id": g["id"], "content": "g2",
             "precondition": {"type": "content_sha256", "content_sha256": sha("wrong")}},
            {"type": "delete", "memory_id": g["id"], "expected_content_sha256": sha("g")},
            {"type": "create", "path": "/big", "content": "x" * 102_401},
            {"type": "update", "memory_id": m["id"]},
            {"type": "create", "path": "/extra", "content": "e", "color": "red"},
        ])  # fmt: skip
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["type"] == "memory_batch" and body["memory_store_id"] == store
        res = body["results"]
        assert len(res) == 9
        assert res[0]["type"] == "memory" and res[0]["path"] == "/new" and res[0]["content"] is None
        assert res[1]["status"] == 409 and res[1]["error"]["type"] == "memory_path_conflict_error"
        assert res[1]["error"]["conflicting_memory_id"] == res[0]["id"]
        assert res[2]["status"] == 400 and res[2]["error"]["message"].startswith("path:")
        assert res[3]["type"] == "memory" and res[3]["id"] == m["id"] and res[3]["path"] == "/moved"
        assert res[4]["status"] == 409 and res[4]["error"]["type"] == "memory_precondition_failed_error"
        assert res[5] == {"id": g["id"], "type": "memory_deleted"}
        assert res[6]["status"] == 400 and res[6]["error"]["type"] == "invalid_request_error"
        assert res[7]["status"] == 400 and "neither" in res[7]["error"]["message"]
        assert res[8]["status"] == 400 and "color" in res[8]["error"]["message"]
        # three writes: create, rename, delete; 2 before
        assert body["counter"] == 5 == int(r.headers["memfs-store-counter"])
        assert c.get(f"/v1/memory_stores/{store}/counter").json()["counter"] == 5
        full = batch(c, store, [{"type": "create", "path": "/f", "content": "full"}], view="full").json()
        assert full["results"][0]["content"] == "full"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({}, "operations: is required"),
        ({"operations": {}}, "must be an array"),
        ({"operations": []}, "at least one"),
        ({"operations": ["x"]}, "operations[0]: must be an object"),
        (
            {"operations": [{"type": "create", "path": "/a", "content": "a"}, {"type": "upsert"}]},
            "operations[1].type",
        ),
        ({"operations": [{"type": "delete", "memory_id": "m"}] * 1001}, "at most 1000"),
        ({"operations": [], "atomic": True}, "unknown field 'atomic'"),
    ],
)
def test_a_bad_envelope_is_one_400_and_writes_nothing(service, body, needle):
    store = service.create_store("b")["id"]
    with service.admin_client() as c:
        r = c.post(f"/v1/memory_stores/{store}/memory_batch", json=body)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["type"] == "invalid_request_error" and needle in r.json()["error"]["message"]
        assert c.get(f"/v1/memory_stores/{store}/counter").json()["counter"] == 0


def test_limits_and_access(service):
    store = service.create_store("b")["id"]
    other = service.create_store("o")["id"]
    with service.admin_client() as c:
        # the request body limit is the single endpoints' 1 MiB
        ops = [{"type": "create", "path": f"/f{i}", "content": "x" * 100_000} for i in range(11)]
        r = batch(c, store, ops)
        assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
        assert (
            batch(c, "memstore_nosuch", [{"type": "create", "path": "/a", "content": "a"}]).status_code == 404
        )
        # an item with a field error only still needs the store to exist
        assert (
            batch(c, "memstore_nosuch", [{"type": "create", "path": "bad", "content": "a"}]).status_code
            == 404
        )
    session = service.create_session([(store, "read_only")])
    token = session["work_secret"]
    import base64
    import json

    tok = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))["sessions_token"]
    with httpx.Client(
        base_url=service.base_url, headers={"authorization": f"Bearer {tok}", "anthropic-beta": BETA}
    ) as s:
        r = batch(s, store, [{"type": "create", "path": "/a", "content": "a"}])
        assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
        assert batch(s, other, [{"type": "create", "path": "/a", "content": "a"}]).status_code == 404


def test_max_memories_applies_inside_a_batch(tmp_path):
    svc = ServiceProcess(tmp_path / "svc", max_memories=3)
    try:
        store = svc.create_store("b")["id"]
        with svc.admin_client() as c:
            res = batch(
                c, store, [{"type": "create", "path": f"/f{i}", "content": "x"} for i in range(5)]
            ).json()
        assert [x.get("status", 200) for x in res["results"]] == [200, 200, 200, 400, 400]
        assert "--max-memories 3" in res["results"][3]["error"]["message"]
    finally:
        svc.stop()


def test_the_hosted_api_has_no_batch_route(tmp_path):
    svc = ServiceProcess(tmp_path / "svc", hosted_api=True)
    try:
        store = svc.create_store("b")["id"]
        with svc.admin_client() as c:
            r = batch(c, store, [{"type": "create", "path": "/a", "content": "a"}])
        assert r.status_code == 404 and r.json()["error"]["message"].startswith("no such endpoint")
    finally:
        svc.stop()


def _list_paths(c: httpx.Client, store: str) -> dict[str, dict]:
    out, page = {}, None
    while True:
        params = {"limit": 100, **({"page": page} if page else {})}
        body = c.get(f"/v1/memory_stores/{store}/memories", params=params).json()
        out.update({m["path"]: m for m in body["data"]})
        page = body.get("next_page")
        if not page:
            return out


def test_sigkill_under_concurrent_single_and_batch_writers_loses_nothing_acknowledged(service):
    """Eight writers at once (group commits form on SQLite), four of them sending batches, and
    one failing create per round that must not undo or leak into its neighbours."""
    store = service.create_store("durable")["id"]
    acked: dict[str, str] = {}  # path -> memory_version_id of an acknowledged write
    lock = threading.Lock()
    enough = threading.Event()

    def writer(k: int) -> None:
        with httpx.Client(
            base_url=service.base_url,
            timeout=10,
            headers={"x-api-key": service.admin_key, "anthropic-beta": BETA},
        ) as c:
            for i in range(10_000):
                try:
                    if k % 2:
                        ops = [
                            {"type": "create", "path": f"/w{k}/{i}/{j}", "content": f"{k} {i} {j}"}
                            for j in range(10)
                        ]
                        ops.insert(5, {"type": "create", "path": f"/w{k}", "content": "clash"})  # a directory
                        r = batch(c, store, ops)
                        assert r.status_code == 200, r.text
                        got = r.json()["results"]
                        assert got[5]["status"] == 409
                        done = {
                            o["path"]: m["memory_version_id"]
                            for o, m in zip(ops, got, strict=True)
                            if o["path"] != f"/w{k}"
                        }
                    else:
                        path = f"/w{k}/{i}"
                        r = c.post(
                            f"/v1/memory_stores/{store}/memories", json={"path": path, "content": f"{k} {i}"}
                        )
                        assert r.status_code == 200, r.text
                        bad = c.post(
                            f"/v1/memory_stores/{store}/memories", json={"path": path + "/x", "content": "x"}
                        )
                        assert bad.status_code == 409, bad.text
                        done = {path: r.json()["memory_version_id"]}
                except httpx.HTTPError:
                    return  # the service is gone
                with lock:
                    acked.update(done)
                    if len(acked) >= 400:
                        enough.set()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    assert enough.wait(60)
    service.kill()
    for t in threads:
        t.join(15)
    service.start()
    with service.admin_client() as c:
        listed = _list_paths(c, store)
        for path, vid in acked.items():
            assert listed[path]["memory_version_id"] == vid, path
        assert not any(p.endswith("/x") or p.count("/") == 1 for p in listed)  # no failed write leaked
        # in flight at the kill: at most one single create (1) or one batch (10) per writer
        assert len(acked) <= len(listed) <= len(acked) + 4 * 1 + 4 * 10
        counter = c.get(f"/v1/memory_stores/{store}/counter").json()["counter"]
        assert counter == len(listed)  # one step per version, nothing skipped for the refused ones
