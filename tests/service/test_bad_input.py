"""Bad input never crashes the service or corrupts the db: each case is a clear 4xx, then all still works."""

from __future__ import annotations

import json
import socket
import sqlite3

import httpx

from tests.service.dbcheck import rows

MEMORY = {"anthropic-beta": "agent-memory-2026-07-22"}
SQL = "x'; DROP TABLE memories; --\"%_\\"


def test_bad_input_table(service):
    store = service.create_store("victim")["id"]
    base = f"/v1/memory_stores/{store}"
    with service.admin_client() as c:
        mem = c.post(f"{base}/memories", json={"path": "/keep.md", "content": "safe"}).json()
    mm = f"{base}/memories/{mem['id']}"

    def js(obj) -> bytes:
        return json.dumps(obj).encode()

    # (name, method, url, body bytes or None, extra headers, status, error type, words in the message)
    cases = [
        (
            "malformed JSON",
            "POST",
            f"{base}/memories",
            b'{"path": "/a", ',
            {},
            400,
            "invalid_request_error",
            "not valid JSON",
        ),
        (
            "JSON array",
            "POST",
            f"{base}/memories",
            b"[1, 2]",
            {},
            400,
            "invalid_request_error",
            "JSON object",
        ),
        (
            "JSON string",
            "POST",
            "/v1/memory_stores",
            b'"name"',
            {},
            400,
            "invalid_request_error",
            "JSON object",
        ),
        (
            "bad UTF-8 body",
            "POST",
            f"{base}/memories",
            b'{"path": "/\xff\xfe", "content": "x"}',
            {},
            400,
            "invalid_request_error",
            "UTF-8",
        ),
        (
            "path not a string",
            "POST",
            f"{base}/memories",
            js({"path": 123, "content": "x"}),
            {},
            400,
            "invalid_request_error",
            "path: must be a string",
        ),
        (
            "content null",
            "POST",
            f"{base}/memories",
            js({"path": "/n", "content": None}),
            {},
            400,
            "invalid_request_error",
            "content: must be a string",
        ),
        (
            "content number",
            "POST",
            f"{base}/memories",
            js({"path": "/n", "content": 5}),
            {},
            400,
            "invalid_request_error",
            "content",
        ),
        (
            "missing content",
            "POST",
            f"{base}/memories",
            js({"path": "/n"}),
            {},
            400,
            "invalid_request_error",
            "content: is required",
        ),
        (
            "unknown field",
            "POST",
            f"{base}/memories",
            js({"path": "/n", "content": "x", "mode": "upsert"}),
            {},
            400,
            "invalid_request_error",
            "unknown field 'mode'",
        ),
        (
            "dotdot path",
            "POST",
            f"{base}/memories",
            js({"path": "/a/../../etc/passwd", "content": "x"}),
            {},
            400,
            "invalid_request_error",
            "'..'",
        ),
        (
            "NUL in path",
            "POST",
            f"{base}/memories",
            js({"path": "/a\x00b", "content": "x"}),
            {},
            400,
            "invalid_request_error",
            "U+0000",
        ),
        (
            "lone surrogate path",
            "POST",
            f"{base}/memories",
            b'{"path": "/a\\udc80", "content": "x"}',
            {},
            400,
            "invalid_request_error",
            "UTF-8",
        ),
        (
            "lone surrogate content",
            "POST",
            f"{base}/memories",
            b'{"path": "/s", "content": "\\ud800"}',
            {},
            400,
            "invalid_request_error",
            "UTF-8",
        ),
        (
            "lone surrogate name",
            "POST",
            "/v1/memory_stores",
            b'{"name": "\\udfff"}',
            {},
            400,
            "invalid_request_error",
            "name",
        ),
        (
            "NUL in description",
            "POST",
            "/v1/memory_stores",
            js({"name": "n", "description": "a\x00"}),
            {},
            400,
            "invalid_request_error",
            "description",
        ),
        (
            "name is a list",
            "POST",
            "/v1/memory_stores",
            js({"name": ["x"]}),
            {},
            400,
            "invalid_request_error",
            "name: must be a string",
        ),
        (
            "metadata is a list",
            "POST",
            "/v1/memory_stores",
            js({"name": "n", "metadata": ["a"]}),
            {},
            400,
            "invalid_request_error",
            "metadata",
        ),
        (
            "metadata value int",
            "POST",
            "/v1/memory_stores",
            js({"name": "n", "metadata": {"k": 1}}),
            {},
            400,
            "invalid_request_error",
            "metadata",
        ),
        (
            "precondition string",
            "POST",
            mm,
            js({"content": "x", "precondition": "abc"}),
            {},
            400,
            "invalid_request_error",
            "precondition",
        ),
        (
            "precondition not hex",
            "POST",
            mm,
            js({"content": "x", "precondition": {"type": "content_sha256", "content_sha256": SQL}}),
            {},
            400,
            "invalid_request_error",
            "64 hexadecimal",
        ),
        (
            "expected sha not hex",
            "DELETE",
            f"{mm}?expected_content_sha256=zz",
            None,
            {},
            400,
            "invalid_request_error",
            "expected_content_sha256",
        ),
        (
            "limit not a number",
            "GET",
            f"{base}/memories?limit=abc",
            None,
            {},
            400,
            "invalid_request_error",
            "limit",
        ),
        (
            "limit overflow",
            "GET",
            f"{base}/memories?limit=99999999999999999999999",
            None,
            {},
            400,
            "invalid_request_error",
            "limit",
        ),
        ("depth text", "GET", f"{base}/memories?depth=x", None, {}, 400, "invalid_request_error", "depth"),
        (
            "bool garbage",
            "GET",
            "/v1/memory_stores?include_archived=maybe",
            None,
            {},
            400,
            "invalid_request_error",
            "include_archived",
        ),
        (
            "bad timestamp",
            "GET",
            "/v1/memory_stores?created_at%5Bgte%5D=yesterday",
            None,
            {},
            400,
            "invalid_request_error",
            "created_at[gte]",
        ),
        (
            "SQL in page cursor",
            "GET",
            f"{base}/memories?page={SQL}",
            None,
            {},
            400,
            "invalid_request_error",
            "page",
        ),
        (
            "SQL in memory id",
            "GET",
            f"{base}/memories/mem_'%20OR%20'1'='1",
            None,
            {},
            404,
            "not_found_error",
            "not found",
        ),
        (
            "SQL in store id",
            "GET",
            "/v1/memory_stores/x'%20OR%201=1%20--/memories",
            None,
            {},
            404,
            "not_found_error",
            "not found",
        ),
        (
            "non-UTF-8 URL path",
            "GET",
            "/v1/memory_stores/%FF%FE/memories",
            None,
            {},
            404,
            "not_found_error",
            "not found",
        ),
        (
            "traversal in URL",
            "GET",
            "/v1/memory_stores/../../etc/passwd",
            None,
            {},
            404,
            "not_found_error",
            "",
        ),
        (
            "no beta header",
            "GET",
            "/v1/memory_stores",
            None,
            {"anthropic-beta": ""},
            400,
            "invalid_request_error",
            "anthropic-beta",
        ),
        (
            "both betas",
            "GET",
            "/v1/memory_stores",
            None,
            {"anthropic-beta": "agent-memory-2026-07-22,managed-agents-2026-04-01"},
            400,
            "invalid_request_error",
            "not both",
        ),
        ("wrong method", "PUT", f"{base}/memories", b"{}", {}, 405, "invalid_request_error", "not allowed"),
        (
            "body over 1 MiB",
            "POST",
            f"{base}/memories",
            js({"path": "/big", "content": "x" * (1024 * 1024)}),
            {},
            413,
            "request_too_large",
            "1 MiB",
        ),
    ]
    with httpx.Client(
        base_url=service.base_url, headers={"x-api-key": service.admin_key, **MEMORY}, timeout=30
    ) as c:
        for name, method, url, body, headers, status, etype, words in cases:
            r = c.request(method, url, content=body, headers=headers)
            assert r.status_code == status, (name, r.status_code, r.text)
            err = r.json()
            assert err["type"] == "error" and err["error"]["type"] == etype, (name, err)
            assert words in err["error"]["message"], (name, err)
            assert err["request_id"] == r.headers["request-id"], name

        # a body over 1 MiB without Content-Length (chunked) is cut off while streaming
        def chunks():
            for _ in range(40):
                yield b"x" * 65536

        r = c.post(f"{base}/memories", content=chunks())
        assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"

        # SQL metacharacters are data: stored and returned verbatim, matched literally
        s2 = c.post("/v1/memory_stores", json={"name": SQL, "description": SQL, "metadata": {SQL: SQL}})
        assert s2.status_code == 200
        assert (s2.json()["name"], s2.json()["metadata"]) == (SQL, {SQL: SQL})
        odd_path = "/a%_'; DROP TABLE versions;--/b\"c"
        m = c.post(f"{base}/memories", json={"path": odd_path, "content": SQL})
        assert m.status_code == 200, m.text
        assert c.get(f"{base}/memories/{m.json()['id']}").json()["content"] == SQL
        c.post(f"{base}/memories", json={"path": "/abc/d", "content": "x"})
        listed = c.get(f"{base}/memories", params={"path_prefix": "/a%_'; DROP TABLE versions;--/"}).json()[
            "data"
        ]
        assert [x["path"] for x in listed] == [odd_path]  # no LIKE wildcards: /abc/d is not matched
        assert c.get(f"{base}/memory_versions", params={"session_id": "' OR 1=1 --"}).json()["data"] == []

        # afterwards: everything still works and nothing else was written
        assert c.get(f"{base}/memories/{mem['id']}").json()["content"] == "safe"
        paths = sorted(x["path"] for x in c.get(f"{base}/memories").json()["data"])
        assert paths == sorted(["/keep.md", odd_path, "/abc/d"])
        assert c.get(f"{base}/counter").json()["counter"] == 3
        metrics = c.get("/metrics").text
        assert 'status="500"' not in metrics

    assert "Traceback" not in service.stderr()
    tables = {"stores", "memories", "versions", "store_kv", "sessions", "session_resources"}
    if service.db_url:
        names = rows(service, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    else:
        with sqlite3.connect(service.db_path) as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        names = rows(service, "SELECT name FROM sqlite_master WHERE type='table'")
    assert {r[0] for r in names} >= tables


def test_content_length_lies_and_empty_bodies(service):
    store = service.create_store("s")["id"]
    # A Content-Length far over the limit is refused at once, before any of the body is read.
    port = int(service.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        head = (
            f"POST /v1/memory_stores/{store}/memories HTTP/1.1\r\nHost: x\r\nx-api-key: {service.admin_key}\r\n"
            f"anthropic-beta: agent-memory-2026-07-22\r\ncontent-length: {100 * 1024 * 1024}\r\n\r\n{{}}"
        )
        sock.sendall(head.encode())
        reply = b""
        while b"request_too_large" not in reply:
            data = sock.recv(65536)
            if not data:
                break
            reply += data
    assert reply.startswith(b"HTTP/1.1 413") and b"request_too_large" in reply
    with httpx.Client(base_url=service.base_url, headers={"x-api-key": service.admin_key, **MEMORY}) as c:
        r = c.post(f"/v1/memory_stores/{store}/memories", content=b"")
        assert r.status_code == 400 and "path: is required" in r.json()["error"]["message"]
        assert c.post(f"/v1/memory_stores/{store}", content=b"").status_code == 200  # empty update: no-op
        assert c.get(f"/v1/memory_stores/{store}").json()["name"] == "s"


def test_a_nul_anywhere_in_a_request_gets_the_same_clear_answer_on_every_backend(service):
    """PostgreSQL's text cannot hold NUL (psycopg refuses such a parameter), SQLite's can: an id, a
    filter or a field with NUL must get the same answer on both, never a 500. Content may hold
    NUL (it is bytea on PostgreSQL, docs/SEMANTICS.md#d-storage)."""
    store = service.create_store("nul")["id"]
    base = f"/v1/memory_stores/{store}"
    with service.admin_client() as c:
        mem = c.post(f"{base}/memories", json={"path": "/keep.md", "content": "safe"}).json()
        version = c.get(f"{base}/memory_versions").json()["data"][0]["id"]
    sess = service.create_session([(store, "read_write")])
    nul, z = "%00", chr(0)
    not_found, invalid = (404, "not_found_error"), (400, "invalid_request_error")
    cases = [  # (method, url, body, expected answer)
        ("GET", f"/v1/memory_stores/{store}{nul}x", None, not_found),
        ("GET", f"{base}{nul}/memories", None, not_found),
        ("GET", f"{base}/memories/{mem['id']}{nul}", None, not_found),
        ("POST", f"{base}/memories/{mem['id']}{nul}", {"content": "x"}, not_found),
        ("DELETE", f"{base}/memories/{mem['id']}{nul}", None, not_found),
        ("GET", f"{base}/memory_versions/{version}{nul}", None, not_found),
        ("POST", f"{base}/memory_versions/{version}{nul}/redact", None, not_found),
        ("POST", f"{base}{nul}/archive", None, not_found),
        ("DELETE", f"{base}{nul}", None, not_found),
        ("GET", f"{base}{nul}/counter", None, not_found),
        ("GET", f"{base}{nul}/changes?since=0", None, not_found),
        ("GET", f"{base}{nul}/snapshot", None, not_found),
        ("POST", f"{base}{nul}/memory_batch", {"ops": []}, invalid),  # the body is checked first
        ("GET", f"{base}{nul}/memory_versions", None, not_found),
        ("GET", f"{base}/memories?path_prefix=/a{nul}/", None, invalid),
        ("GET", f"{base}/memories?page=abc{nul}", None, invalid),
        ("GET", f"{base}/memory_versions?memory_id=mem{nul}", None, invalid),
        ("GET", f"{base}/memory_versions?session_id=sesn{nul}", None, invalid),
        ("GET", f"/v1/memory_stores?page=x{nul}", None, invalid),
        ("GET", f"/v1/sessions/{sess['id']}{nul}", None, invalid),
        ("POST", f"{base}/memories", {"path": f"/a{z}b.md", "content": "x"}, invalid),
        ("POST", "/v1/memory_stores", {"name": f"n{z}"}, invalid),
        ("POST", "/v1/memory_stores", {"name": "n", "description": f"d{z}"}, invalid),
        ("POST", "/v1/memory_stores", {"name": "n", "metadata": {f"k{z}": "v"}}, invalid),
        ("POST", "/v1/memory_stores", {"name": "n", "metadata": {"k": f"v{z}"}}, invalid),
        ("POST", f"{base}/memories", {"path": "/nul-content.md", "content": f"a{z}b"}, (200, None)),
    ]
    with service.admin_client() as c:
        got = {}
        for method, url, body, _want in cases:
            r = c.request(method, url, json=body)
            got[(method, url)] = (r.status_code, r.json().get("error", {}).get("type"))
        res = [{"type": "memory_store", "memory_store_id": f"{store}{z}", "access": "read_write"}]
        r = c.post(
            "/v1/sessions", json={"resources": res}, headers={"anthropic-beta": "managed-agents-2026-04-01"}
        )
        got[("POST", "/v1/sessions")] = (r.status_code, r.json().get("error", {}).get("type"))
        cases.append(("POST", "/v1/sessions", res, invalid))
        assert got == {(m, u): want for m, u, _b, want in cases}
        assert c.get(f"{base}/memories/{mem['id']}").json()["content"] == "safe"
        listed = c.get(f"{base}/memories", params={"view": "full", "path_prefix": "/"}).json()["data"]
        assert {m["path"]: m["content"] for m in listed} == {"/keep.md": "safe", "/nul-content.md": f"a{z}b"}
