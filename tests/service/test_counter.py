"""The version counter extension: counter, counters, memfs-store-counter header, changes feed, snapshot."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest


def counter(c: httpx.Client, store_id: str) -> int:
    r = c.get(f"/v1/memory_stores/{store_id}/counter")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["type"] == "memory_store_counter" and body["memory_store_id"] == store_id
    return body["counter"]


def create(c: httpx.Client, store_id: str, path: str, content: str) -> dict:
    r = c.post(f"/v1/memory_stores/{store_id}/memories", json={"path": path, "content": content})
    assert r.status_code == 200, r.text
    return r.json()


def update(c: httpx.Client, store_id: str, mid: str, **body) -> httpx.Response:
    return c.post(f"/v1/memory_stores/{store_id}/memories/{mid}", json=body)


def read_snapshot(c: httpx.Client, store_id: str) -> tuple[int, list[dict], int]:
    with c.stream("GET", f"/v1/memory_stores/{store_id}/snapshot") as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.iter_lines() if line]
    head, *mems, end = lines
    assert head["type"] == "memory_store_snapshot" and head["memory_store_id"] == store_id
    assert end["type"] == "snapshot_end" and end["count"] == len(mems)
    assert int(r.headers["memfs-store-counter"]) == head["counter"]
    return head["counter"], mems, end["count"]


def test_counter_moves_once_per_versioned_write(service):
    s = service.create_store("c")["id"]
    with service.admin_client() as c:
        assert counter(c, s) == 0  # a store that never had the key reads 0
        m = create(c, s, "/a", "1")
        assert counter(c, s) == 1
        assert update(c, s, m["id"], content="2").status_code == 200
        assert counter(c, s) == 2
        assert update(c, s, m["id"], path="/b").status_code == 200  # rename
        assert counter(c, s) == 3
        assert update(c, s, m["id"], content="2", path="/b").status_code == 200  # no-op
        assert counter(c, s) == 3
        pre = {"type": "content_sha256", "content_sha256": "0" * 64}
        assert update(c, s, m["id"], content="3", precondition=pre).status_code == 409
        assert (
            c.post(f"/v1/memory_stores/{s}/memories", json={"path": "/b", "content": "x"}).status_code == 409
        )
        assert counter(c, s) == 3  # refused writes do not count
        versions = c.get(f"/v1/memory_stores/{s}/memory_versions").json()["data"]
        assert c.post(f"/v1/memory_stores/{s}/memory_versions/{versions[-1]['id']}/redact").status_code == 200
        assert counter(c, s) == 3  # redaction does not count
        assert c.delete(f"/v1/memory_stores/{s}/memories/{m['id']}").status_code == 200
        assert counter(c, s) == 4
        assert len(c.get(f"/v1/memory_stores/{s}/memory_versions").json()["data"]) == 4


def test_counters_for_several_stores_in_one_request(service):
    a, b, other = (service.create_store(n)["id"] for n in ("a", "b", "other"))
    with service.admin_client() as c:
        create(c, a, "/1", "x")
        create(c, a, "/2", "x")
        create(c, b, "/1", "x")
        r = c.get("/v1/memory_store_counters", params={"ids": f"{a},{b},{other}"})
        assert r.status_code == 200
        assert r.json() == {
            "type": "list",
            "data": [
                {"type": "memory_store_counter", "memory_store_id": a, "counter": 2},
                {"type": "memory_store_counter", "memory_store_id": b, "counter": 1},
                {"type": "memory_store_counter", "memory_store_id": other, "counter": 0},
            ],
        }
        assert c.get("/v1/memory_store_counters", params={"ids": f"{a},memstore_nope"}).status_code == 404
        assert c.get("/v1/memory_store_counters").status_code == 400
        too_many = ",".join(f"memstore_{i}" for i in range(101))
        assert c.get("/v1/memory_store_counters", params={"ids": too_many}).status_code == 400
    token = _token(service.create_session([(a, "read_only")]))
    with httpx.Client(
        base_url=service.base_url, headers={"x-api-key": token, "anthropic-beta": "agent-memory-2026-07-22"}
    ) as agent:
        assert agent.get("/v1/memory_store_counters", params={"ids": a}).json()["data"][0]["counter"] == 2
        # one unreachable store fails the whole request, without saying whether it exists
        assert agent.get("/v1/memory_store_counters", params={"ids": f"{a},{b}"}).status_code == 404
        assert agent.get(f"/v1/memory_stores/{b}/counter").status_code == 404


def _token(session: dict) -> str:
    import base64

    return json.loads(base64.urlsafe_b64decode(session["work_secret"]))["sessions_token"]


def test_list_pages_carry_the_counter_they_were_read_at(service):
    s = service.create_store("pages")["id"]
    with service.admin_client() as c:
        for i in range(5):
            create(c, s, f"/m{i}", "x")
        p1 = c.get(f"/v1/memory_stores/{s}/memories", params={"limit": 2})
        assert p1.headers["memfs-store-counter"] == "5"
        p2 = c.get(f"/v1/memory_stores/{s}/memories", params={"limit": 2, "page": p1.json()["next_page"]})
        assert p2.headers["memfs-store-counter"] == "5"  # consistent with page 1
        create(c, s, "/m0a", "inserted between pages")
        p3 = c.get(f"/v1/memory_stores/{s}/memories", params={"limit": 2, "page": p2.json()["next_page"]})
        assert p3.headers["memfs-store-counter"] == "6"  # a client can tell the listing moved under it
        assert [m["path"] for m in p3.json()["data"]] == ["/m4"]
        for params in ({"depth": 1}, {"view": "full"}, {"path_prefix": "/x/"}):
            assert (
                c.get(f"/v1/memory_stores/{s}/memories", params=params).headers["memfs-store-counter"] == "6"
            )


def test_changes_since_returns_exactly_what_was_written_after(service):
    s = service.create_store("changes")["id"]
    with service.admin_client() as c:
        keep = create(c, s, "/keep", "k")
        upd = create(c, s, "/upd", "u1")
        ren = create(c, s, "/dir/ren", "r")
        gone = create(c, s, "/gone", "g")
        both = create(c, s, "/both", "b")  # renamed and then deleted
        since = counter(c, s)
        assert since == 5
        update(c, s, upd["id"], content="u2")
        update(c, s, upd["id"], content="u3")  # two writes, one entry
        update(c, s, ren["id"], path="/dir2/ren")
        c.delete(f"/v1/memory_stores/{s}/memories/{gone['id']}")
        update(c, s, both["id"], path="/both2")
        c.delete(f"/v1/memory_stores/{s}/memories/{both['id']}")
        new = create(c, s, "/new", "n")
        temp = create(c, s, "/temp", "t")
        c.delete(f"/v1/memory_stores/{s}/memories/{temp['id']}")
        recreated = create(c, s, "/temp", "t2")  # a new memory at a path freed after N

        r = c.get(f"/v1/memory_stores/{s}/changes", params={"since": since})
        assert r.status_code == 200
        body = r.json()
        assert (body["type"], body["status"], body["since"], body["counter"]) == (
            "memory_store_changes",
            "ok",
            5,
            15,
        )
        got = {(ch["memory_id"], ch["operation"], ch["path"], ch["previous_path"]) for ch in body["changes"]}
        assert got == {
            (upd["id"], "upserted", "/upd", None),
            (ren["id"], "upserted", "/dir2/ren", "/dir/ren"),
            (gone["id"], "deleted", "/gone", None),
            (both["id"], "deleted", "/both2", "/both"),
            (new["id"], "upserted", "/new", None),
            (temp["id"], "deleted", "/temp", None),
            (recreated["id"], "upserted", "/temp", None),
        }
        assert keep["id"] not in {ch["memory_id"] for ch in body["changes"]}
        paths = [ch["path"] for ch in body["changes"]]
        assert paths == sorted(paths)
        by_id = {ch["memory_id"]: ch for ch in body["changes"]}
        assert (
            by_id[upd["id"]]["content_sha256"]
            == c.get(f"/v1/memory_stores/{s}/memories/{upd['id']}").json()["content_sha256"]
        )
        assert by_id[gone["id"]]["content_sha256"] is None and by_id[gone["id"]]["content_size_bytes"] is None
        # the tombstone comes before the live memory at the same path
        assert [ch["memory_id"] for ch in body["changes"] if ch["path"] == "/temp"] == [
            temp["id"],
            recreated["id"],
        ]

        assert c.get(f"/v1/memory_stores/{s}/changes", params={"since": 15}).json()["changes"] == []
        assert len(c.get(f"/v1/memory_stores/{s}/changes", params={"since": 0}).json()["changes"]) == 8
        for bad in ({"since": 16}, {"since": -1}, {"since": "x"}, {}):
            assert c.get(f"/v1/memory_stores/{s}/changes", params=bad).status_code == 400, bad

        assert all("content" not in ch for ch in body["changes"])  # basic, the default: no key
        bad_view = c.get(f"/v1/memory_stores/{s}/changes", params={"since": since, "view": "all"})
        assert bad_view.status_code == 400 and "view" in bad_view.text
        # view=full: each change carries `content`, the memory's current one or null (deleted),
        # and null where the caller wrote the current version itself (it has that content)
        full = c.get(f"/v1/memory_stores/{s}/changes", params={"since": since, "view": "full"}).json()
        assert [{k: v for k, v in ch.items() if k != "content"} for ch in full["changes"]] == body["changes"]
        assert {ch["content"] for ch in full["changes"]} == {None}  # the admin key wrote them all

    token = _token(service.create_session([(s, "read_write")]))
    with httpx.Client(
        base_url=service.base_url, headers={"x-api-key": token, "anthropic-beta": "agent-memory-2026-07-22"}
    ) as agent:
        full = agent.get(f"/v1/memory_stores/{s}/changes", params={"since": since, "view": "full"}).json()
        contents = {ch["memory_id"]: ch["content"] for ch in full["changes"]}
        assert contents == {
            upd["id"]: "u3", ren["id"]: "r", gone["id"]: None, both["id"]: None,
            new["id"]: "n", temp["id"]: None, recreated["id"]: "t2",
        }  # fmt: skip
        assert update(agent, s, upd["id"], content="u4").status_code == 200
        full = agent.get(f"/v1/memory_stores/{s}/changes", params={"since": since, "view": "full"}).json()
        assert {ch["memory_id"]: ch["content"] for ch in full["changes"]} == {**contents, upd["id"]: None}
    with service.admin_client() as c:
        full = c.get(f"/v1/memory_stores/{s}/changes", params={"since": since, "view": "full"}).json()
        assert {ch["memory_id"]: ch["content"] for ch in full["changes"]}[upd["id"]] == "u4"


def test_snapshot_is_one_consistent_read(service):
    s = service.create_store("snap")["id"]
    with service.admin_client() as c:
        counter_at, mems, _ = read_snapshot(c, s)
        assert (counter_at, mems) == (0, [])
        for i in range(30):
            create(c, s, f"/seed/{i:03}", "é" * i)
        counter_at, mems, _ = read_snapshot(c, s)
        assert counter_at == 30
        assert [m["path"] for m in mems] == [f"/seed/{i:03}" for i in range(30)]
        assert all(m["content"] == "é" * int(m["path"][-3:]) for m in mems)

    # A writer appends /w/00000, /w/00001, ... (one counter step each) while snapshots are read:
    # a snapshot at counter N must hold exactly the first N-30 of them.
    stop = threading.Event()
    written = []

    def writer():
        with service.admin_client() as w:
            i = 0
            while not stop.is_set():
                create(w, s, f"/w/{i:05}", "x" * 2000)
                written.append(i)
                i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while not written and time.monotonic() < deadline:
            time.sleep(0.01)
        seen = set()
        with service.admin_client() as c:
            while len(seen) < 4 and time.monotonic() < deadline:
                counter_at, mems, _ = read_snapshot(c, s)
                w_paths = [m["path"] for m in mems if m["path"].startswith("/w/")]
                assert w_paths == [f"/w/{i:05}" for i in range(counter_at - 30)]
                seen.add(counter_at)
    finally:
        stop.set()
        t.join()
    assert len(seen) >= 4  # the writer really moved the store between and during the reads


def test_snapshot_ignores_writes_committed_while_it_streams(service):
    s = service.create_store("stream")["id"]
    big = "y" * 100_000
    with service.admin_client() as c:
        # ~12 MB: more than the socket buffers hold, so the server is still reading when we write.
        ids = [create(c, s, f"/m{i:03}", big)["id"] for i in range(120)]
        with service.admin_client() as w, c.stream("GET", f"/v1/memory_stores/{s}/snapshot") as r:
            lines = r.iter_lines()
            head = json.loads(next(lines))
            assert head["counter"] == 120
            assert w.delete(f"/v1/memory_stores/{s}/memories/{ids[0]}").status_code == 200
            assert update(w, s, ids[119], content="changed").status_code == 200
            create(w, s, "/zzz", "new")
            rest = [json.loads(line) for line in lines if line]
        mems, end = rest[:-1], rest[-1]
        assert end == {"type": "snapshot_end", "count": 120}
        assert [m["path"] for m in mems] == [f"/m{i:03}" for i in range(120)]
        assert all(m["content"] == big for m in mems)
        counter_at, after, _ = read_snapshot(c, s)
        assert counter_at == 123
        assert [m["path"] for m in after][-2:] == ["/m119", "/zzz"] and after[-2]["content"] == "changed"


def test_snapshot_and_changes_respect_scoping(service):
    a, b = service.create_store("a")["id"], service.create_store("b")["id"]
    token = _token(service.create_session([(a, "read_only")]))
    with httpx.Client(
        base_url=service.base_url,
        headers={"authorization": f"Bearer {token}", "anthropic-beta": "agent-memory-2026-07-22"},
    ) as agent:
        assert agent.get(f"/v1/memory_stores/{a}/snapshot").status_code == 200
        assert agent.get(f"/v1/memory_stores/{a}/changes", params={"since": 0}).status_code == 200
        assert agent.get(f"/v1/memory_stores/{b}/snapshot").status_code == 404
        assert agent.get(f"/v1/memory_stores/{b}/changes", params={"since": 0}).status_code == 404
    with httpx.Client(base_url=service.base_url) as anon:
        r = anon.get(f"/v1/memory_stores/{a}/counter", headers={"anthropic-beta": "agent-memory-2026-07-22"})
        assert r.status_code == 401
        assert (
            anon.get(f"/v1/memory_stores/{a}/counter", headers={"x-api-key": service.admin_key}).status_code
            == 400
        )


@pytest.mark.parametrize("n", [0, 250])
def test_snapshot_sizes(service, n):
    s = service.create_store("big")["id"]
    with service.admin_client() as c:
        for i in range(n):
            create(c, s, f"/d{i % 7}/m{i:04}", f"content {i}")
        counter_at, mems, count = read_snapshot(c, s)
        assert counter_at == n == count
        assert [m["path"] for m in mems] == sorted(f"/d{i % 7}/m{i:04}" for i in range(n))


def test_counter_reads_answer_for_the_token_as_it_is_now(service):
    """The counter fast path (counter_path.py) checks the credential in the database on every read:
    a session archived a moment ago is refused at once, a write shows in the next read, and the
    errors are the full path's envelopes."""
    a, b = service.create_store("a")["id"], service.create_store("b")["id"]
    session = service.create_session([(a, "read_write")])
    token = _token(session)
    beta = {"anthropic-beta": "agent-memory-2026-07-22"}
    with httpx.Client(
        base_url=service.base_url, headers={"authorization": f"Bearer {token}", **beta}
    ) as agent:
        r = agent.get(f"/v1/memory_stores/{a}/counter")
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.headers["request-id"].startswith("req_")
        assert r.json() == {"type": "memory_store_counter", "memory_store_id": a, "counter": 0}
        create(agent, a, "/x", "1")
        assert counter(agent, a) == 1  # read-your-write
        r = agent.get("/v1/memory_store_counters", params=[("ids", a), ("ids", f" {a} ,")])
        assert r.json()["data"] == [{"type": "memory_store_counter", "memory_store_id": a, "counter": 1}]
        r = agent.get(f"/v1/memory_stores/{b}/counter")
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
        assert r.json()["request_id"] == r.headers["request-id"]
        both = agent.get(
            f"/v1/memory_stores/{a}/counter",
            headers={"anthropic-beta": "agent-memory-2026-07-22,managed-agents-2026-04-01"},
        )
        assert both.status_code == 400
        with service.admin_client("managed-agents-2026-04-01") as admin:
            assert admin.post(f"/v1/sessions/{session['id']}/archive").status_code == 200
        for path, params in (
            (f"/v1/memory_stores/{a}/counter", None),
            ("/v1/memory_store_counters", {"ids": a}),
        ):
            r = agent.get(path, params=params)
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error", path
    with service.admin_client() as c:
        assert c.head(f"/v1/memory_stores/{a}/counter").status_code == 200  # HEAD: the full path
        assert counter(c, a) == 1
