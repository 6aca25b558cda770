"""The official `anthropic` client (2.10.0), unchanged, against `memfs serve`: every endpoint, success and errors."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime, timedelta

import anthropic
import pytest

from tests.support.service import ServiceProcess


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def error_type(exc: anthropic.APIStatusError) -> str:
    return exc.body["error"]["type"]


def session_client(service, token: str, *, bearer: bool = False) -> anthropic.Anthropic:
    if bearer:
        return anthropic.Anthropic(auth_token=token, base_url=service.base_url, max_retries=0)
    return anthropic.Anthropic(api_key=token, base_url=service.base_url, max_retries=0)


def token_of(session: dict) -> str:
    import base64
    import json

    return json.loads(base64.urlsafe_b64decode(session["work_secret"]))["sessions_token"]


# --- memory stores -------------------------------------------------------------------------------


def test_store_lifecycle(client):
    stores = client.beta.memory_stores
    s = stores.create(name="Notes", description="d", metadata={"owner": "ann", "team": "x"})
    assert s.id.startswith("memstore_") and s.type == "memory_store"
    assert (s.name, s.description, s.metadata, s.archived_at) == (
        "Notes",
        "d",
        {"owner": "ann", "team": "x"},
        None,
    )
    assert stores.retrieve(s.id) == s
    bare = stores.create(name="Bare")
    assert bare.description == "" and bare.metadata == {}

    u = stores.update(s.id, name="Notes 2", description="", metadata={"owner": None, "new": "v"})
    assert (u.name, u.description, u.metadata) == ("Notes 2", "", {"team": "x", "new": "v"})
    assert u.updated_at >= s.updated_at and u.created_at == s.created_at

    a = stores.archive(s.id)
    assert a.archived_at is not None
    assert stores.archive(s.id).archived_at == a.archived_at  # idempotent, one-way
    with pytest.raises(anthropic.BadRequestError) as e:
        stores.update(s.id, name="nope")
    assert "archived" in e.value.body["error"]["message"]

    assert [x.id for x in stores.list()] == [bare.id]
    assert {x.id for x in stores.list(include_archived=True)} == {s.id, bare.id}

    deleted = stores.delete(s.id)
    assert (deleted.id, deleted.type) == (s.id, "memory_store_deleted")
    with pytest.raises(anthropic.NotFoundError) as e:
        stores.retrieve(s.id)
    assert error_type(e.value) == "not_found_error" and e.value.request_id.startswith("req_")
    with pytest.raises(anthropic.NotFoundError):
        stores.delete(s.id)


def test_store_list_pagination_and_time_filters(client):
    stores = client.beta.memory_stores
    made = []
    for i in range(5):
        made.append(stores.create(name=f"s{i}"))
        time.sleep(0.002)
    first = stores.list(limit=2)
    assert len(first.data) == 2 and first.next_page
    assert [x.id for x in first.data] == [made[4].id, made[3].id]  # newest first
    second = stores.list(limit=2, page=first.next_page)
    assert [x.id for x in second.data] == [made[2].id, made[1].id]
    assert [x.id for x in stores.list(limit=2)] == [m.id for m in reversed(made)]  # auto-pagination
    mid = made[2].created_at
    assert [x.id for x in stores.list(created_at_gte=mid)] == [made[4].id, made[3].id, made[2].id]
    assert [x.id for x in stores.list(created_at_lte=mid)] == [made[2].id, made[1].id, made[0].id]
    assert list(stores.list(created_at_gte=datetime.now(UTC) + timedelta(hours=1))) == []
    with pytest.raises(anthropic.BadRequestError):
        stores.list(limit=0)
    with pytest.raises(anthropic.BadRequestError):
        stores.list(limit=101)
    with pytest.raises(anthropic.BadRequestError):
        stores.list(page="not-a-cursor")


def test_store_field_rules(client):
    stores = client.beta.memory_stores
    bad = [
        dict(name=""),
        dict(name="x" * 256),
        dict(name="a\nb"),
        dict(name="ok", description="d" * 1025),
        dict(name="ok", metadata={f"k{i}": "v" for i in range(17)}),
        dict(name="ok", metadata={"k" * 65: "v"}),
        dict(name="ok", metadata={"": "v"}),
        dict(name="ok", metadata={"k": "v" * 513}),
    ]
    for fields in bad:
        with pytest.raises(anthropic.BadRequestError) as e:
            stores.create(**fields)
        assert error_type(e.value) == "invalid_request_error", fields
    assert (
        stores.create(name="x" * 255, description="d" * 1024, metadata={"k" * 64: "v" * 512}).name
        == "x" * 255
    )
    s = stores.create(name="ok", metadata={f"k{i}": "v" for i in range(16)})
    with pytest.raises(anthropic.BadRequestError):
        stores.update(s.id, metadata={"one-too-many": "v"})


# --- memories ------------------------------------------------------------------------------------


def test_memory_crud(client, store):
    mems = client.beta.memory_stores.memories
    m = mems.create(store.id, path="/notes/a.md", content="hello")
    assert m.id.startswith("mem_") and m.memory_version_id.startswith("memver_")
    assert (m.path, m.content, m.content_sha256, m.content_size_bytes) == (
        "/notes/a.md",
        None,
        sha("hello"),
        5,
    )
    assert mems.create(store.id, path="/full.md", content="x", view="full").content == "x"

    got = mems.retrieve(m.id, memory_store_id=store.id)
    assert got.content == "hello" and got.memory_store_id == store.id
    assert mems.retrieve(m.id, memory_store_id=store.id, view="basic").content is None

    u = mems.update(m.id, memory_store_id=store.id, content="héllo")
    assert u.content_sha256 == sha("héllo") and u.content_size_bytes == 6 and u.content is None
    assert u.memory_version_id != m.memory_version_id
    r = mems.update(m.id, memory_store_id=store.id, path="/notes/b.md", view="full")
    assert (r.id, r.path, r.content) == (m.id, "/notes/b.md", "héllo")
    assert mems.update(m.id, memory_store_id=store.id, content="").content_size_bytes == 0

    d = mems.delete(m.id, memory_store_id=store.id)
    assert (d.id, d.type) == (m.id, "memory_deleted")
    for call in (
        lambda: mems.retrieve(m.id, memory_store_id=store.id),
        lambda: mems.update(m.id, memory_store_id=store.id, content="x"),
        lambda: mems.delete(m.id, memory_store_id=store.id),
        lambda: mems.retrieve("mem_nope", memory_store_id=store.id),
        lambda: mems.list("memstore_nope"),
    ):
        with pytest.raises(anthropic.NotFoundError):
            call()


def test_memory_list_options(client, store):
    mems = client.beta.memory_stores.memories
    paths = [
        "/a.md",
        "/notes/todo.md",
        "/notes/deep/x.md",
        "/notes/deep/y.md",
        "/notes-archive/old.md",
        "/z/q/r.md",
    ]
    for p in paths:
        mems.create(store.id, path=p, content=f"content of {p}")

    page = mems.list(store.id)
    assert [m.path for m in page.data] == sorted(paths)
    assert all(m.type == "memory" and m.content is None for m in page.data)
    assert all(m.content == f"content of {m.path}" for m in mems.list(store.id, view="full").data)

    p1 = mems.list(store.id, limit=4)
    assert len(p1.data) == 4 and p1.next_page
    p2 = mems.list(store.id, limit=4, page=p1.next_page)
    assert [m.path for m in p1.data + p2.data] == sorted(paths) and not p2.next_page
    assert [m.path for m in mems.list(store.id, limit=1)] == sorted(paths)  # auto-pagination

    assert [m.path for m in mems.list(store.id, path_prefix="/notes/")] == [
        "/notes/deep/x.md",
        "/notes/deep/y.md",
        "/notes/todo.md",
    ]  # whole segments: /notes-archive/ is not under /notes/

    top = mems.list(store.id, depth=1)
    assert [(i.type, i.path) for i in top.data] == [
        ("memory", "/a.md"),
        ("memory_prefix", "/notes-archive/"),
        ("memory_prefix", "/notes/"),
        ("memory_prefix", "/z/"),
    ]
    under = mems.list(store.id, path_prefix="/notes/", depth=1)
    assert [(i.type, i.path) for i in under.data] == [
        ("memory_prefix", "/notes/deep/"),
        ("memory", "/notes/todo.md"),
    ]
    # roll-ups count toward the limit and paginate like memories
    assert [i.path for i in mems.list(store.id, depth=1, limit=1)] == [
        "/a.md",
        "/notes-archive/",
        "/notes/",
        "/z/",
    ]
    assert [i.path for i in mems.list(store.id, path_prefix="/nothing/")] == []

    for kwargs in (dict(depth=2), dict(depth=-1), dict(path_prefix="/notes"), dict(path_prefix="notes/"),
                   dict(limit=0), dict(limit=101), dict(view="huge"), dict(page="garbage")):  # fmt: skip
        with pytest.raises(anthropic.BadRequestError):
            mems.list(store.id, **kwargs)


def test_full_view_pages_hold_at_most_20(client, store):
    mems = client.beta.memory_stores.memories
    for i in range(25):
        mems.create(store.id, path=f"/m{i:02}", content="x")
    assert len(mems.list(store.id, limit=50).data) == 25
    full = mems.list(store.id, limit=50, view="full")
    assert len(full.data) == 20 and full.next_page


def test_precondition_rules(client, store):
    mems = client.beta.memory_stores.memories
    m = mems.create(store.id, path="/p.md", content="v1")
    with pytest.raises(anthropic.ConflictError) as e:
        mems.update(m.id, memory_store_id=store.id, content="v2",
                    precondition={"type": "content_sha256", "content_sha256": sha("other")})  # fmt: skip
    assert error_type(e.value) == "memory_precondition_failed_error"
    assert mems.retrieve(m.id, memory_store_id=store.id).content == "v1"

    ok = mems.update(m.id, memory_store_id=store.id, content="v2",
                     precondition={"type": "content_sha256", "content_sha256": sha("v1")})  # fmt: skip
    assert ok.content_sha256 == sha("v2")
    # a retry of the same update: precondition no longer matches, but the store already holds it
    again = mems.update(m.id, memory_store_id=store.id, content="v2",
                        precondition={"type": "content_sha256", "content_sha256": sha("v1")})  # fmt: skip
    assert again.memory_version_id == ok.memory_version_id
    noop = mems.update(m.id, memory_store_id=store.id, content="v2", path="/p.md")
    assert noop.memory_version_id == ok.memory_version_id
    versions = client.beta.memory_stores.memory_versions.list(store.id, memory_id=m.id)
    assert [v.operation for v in versions] == ["modified", "created"]

    with pytest.raises(anthropic.ConflictError) as e:
        mems.delete(m.id, memory_store_id=store.id, expected_content_sha256=sha("v1"))
    assert error_type(e.value) == "memory_precondition_failed_error"
    assert mems.retrieve(m.id, memory_store_id=store.id).content == "v2"  # nothing deleted
    mems.delete(m.id, memory_store_id=store.id, expected_content_sha256=sha("v2"))
    with pytest.raises(anthropic.NotFoundError):
        mems.retrieve(m.id, memory_store_id=store.id)

    with pytest.raises(anthropic.BadRequestError):
        mems.update(m.id, memory_store_id=store.id, content="x", precondition={"type": "etag"})


def test_path_conflicts(client, store):
    mems = client.beta.memory_stores.memories
    ab = mems.create(store.id, path="/a/b", content="1")
    cases = [
        ("/a/b", ab.id, "/a/b"),  # occupied
        ("/a/b/c", ab.id, "/a/b"),  # below a memory
        ("/a", ab.id, "/a/b"),  # above a memory
    ]
    for path, conflict_id, conflict_path in cases:
        with pytest.raises(anthropic.ConflictError) as e:
            mems.create(store.id, path=path, content="x")
        err = e.value.body["error"]
        assert err["type"] == "memory_path_conflict_error", path
        assert (err["conflicting_memory_id"], err["conflicting_path"]) == (conflict_id, conflict_path)

    other = mems.create(store.id, path="/other", content="2")
    with pytest.raises(anthropic.ConflictError) as e:
        mems.update(other.id, memory_store_id=store.id, path="/a/b")  # rename never overwrites
    assert e.value.body["error"]["conflicting_memory_id"] == ab.id
    assert mems.retrieve(other.id, memory_store_id=store.id).path == "/other"
    # a memory may move below its own old path: it no longer occupies it
    assert mems.update(ab.id, memory_store_id=store.id, path="/a/b/c").path == "/a/b/c"
    assert mems.create(store.id, path="/Other", content="case-sensitive").path == "/Other"


def test_path_rules_are_400(client, store):
    mems = client.beta.memory_stores.memories
    bad = {
        "no leading slash": "a.md",
        "empty": "",
        "empty segment": "/a//b",
        "trailing slash": "/a/",
        "dot segment": "/a/./b",
        "dotdot segment": "/a/../b",
        "NUL": "/a\x00b",
        "newline": "/a\nb",
        "U+2028": "/a\u2028b",
        "U+2029": "/a\u2029b",
        "format char": "/a\u200db",
        "backslash": "/a\\b",
        "not NFC": "/cafe\u0301",
        "over 1024 bytes": "/" + "/".join(["x" * 200] * 6),
        "21 segments": "/a" * 21,
    }
    for why, path in bad.items():
        with pytest.raises(anthropic.BadRequestError) as e:
            mems.create(store.id, path=path, content="x")
        assert error_type(e.value) == "invalid_request_error", why
        assert "path" in e.value.body["error"]["message"], why
    ok = mems.create(store.id, path="/" + "/".join(["s"] * 20), content="x")
    assert ok.path.count("/") == 20
    assert mems.create(store.id, path="/café/日本語 notes.md", content="x").path == "/café/日本語 notes.md"
    # no per-segment limit (the hosted API has none); a mount skips such a memory instead
    assert mems.create(store.id, path="/" + "x" * 256, content="x").path == "/" + "x" * 256
    assert len(list(mems.list(store.id))) == 3


def test_content_limits(client, store):
    mems = client.beta.memory_stores.memories
    assert mems.create(store.id, path="/max", content="x" * 102_400).content_size_bytes == 102_400
    with pytest.raises(anthropic.BadRequestError) as e:
        mems.create(store.id, path="/over", content="x" * 102_401)
    assert "102400" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        mems.create(store.id, path="/multibyte", content="é" * 51_201)  # 102,402 bytes
    m = mems.create(store.id, path="/small", content="x")
    with pytest.raises(anthropic.BadRequestError):
        mems.update(m.id, memory_store_id=store.id, content="x" * 102_401)
    with pytest.raises(anthropic.APIStatusError) as e:
        mems.create(store.id, path="/huge", content="x" * (2 * 1024 * 1024))
    assert e.value.status_code == 413 and error_type(e.value) == "request_too_large"
    assert [m.path for m in mems.list(store.id)] == ["/max", "/small"]


def test_max_memories(tmp_path):
    svc = ServiceProcess(tmp_path / "svc", max_memories=3)
    try:
        c = anthropic.Anthropic(api_key=svc.admin_key, base_url=svc.base_url, max_retries=0)
        s = c.beta.memory_stores.create(name="small")
        mems = [c.beta.memory_stores.memories.create(s.id, path=f"/m{i}", content="x") for i in range(3)]
        with pytest.raises(anthropic.BadRequestError) as e:
            c.beta.memory_stores.memories.create(s.id, path="/m3", content="x")
        assert "--max-memories 3" in e.value.body["error"]["message"]
        # existing memories stay editable
        c.beta.memory_stores.memories.update(mems[0].id, memory_store_id=s.id, content="y", path="/renamed")
        c.beta.memory_stores.memories.delete(mems[1].id, memory_store_id=s.id)
        c.beta.memory_stores.memories.create(s.id, path="/m3", content="x")
    finally:
        svc.stop()


def test_archived_store_read_and_delete_only(client, store):
    mems = client.beta.memory_stores.memories
    a = mems.create(store.id, path="/a", content="1")
    b = mems.create(store.id, path="/b", content="2")
    client.beta.memory_stores.archive(store.id)
    for call in (
        lambda: mems.create(store.id, path="/c", content="3"),
        lambda: mems.update(a.id, memory_store_id=store.id, content="changed"),
    ):
        with pytest.raises(anthropic.BadRequestError) as e:
            call()
        assert "archived" in e.value.body["error"]["message"]
    assert mems.retrieve(a.id, memory_store_id=store.id).content == "1"
    mems.delete(b.id, memory_store_id=store.id)
    assert [m.path for m in mems.list(store.id)] == ["/a"]
    v = client.beta.memory_stores.memory_versions.list(store.id, memory_id=a.id).data[0]
    assert client.beta.memory_stores.memory_versions.redact(v.id, memory_store_id=store.id).redacted_at


# --- versions ------------------------------------------------------------------------------------


def test_versions_and_redaction(client, store):
    mems, versions = client.beta.memory_stores.memories, client.beta.memory_stores.memory_versions
    m = mems.create(store.id, path="/v.md", content="one")
    mems.update(m.id, memory_store_id=store.id, content="two")
    mems.update(m.id, memory_store_id=store.id, path="/w.md")
    other = mems.create(store.id, path="/other", content="o")
    mems.delete(m.id, memory_store_id=store.id)

    all_v = versions.list(store.id)
    assert [(v.operation, v.path) for v in all_v.data] == [
        ("deleted", "/w.md"),
        ("created", "/other"),
        ("modified", "/w.md"),
        ("modified", "/v.md"),
        ("created", "/v.md"),
    ]
    assert all(v.content is None for v in all_v.data)  # list defaults to basic
    d = all_v.data[0]
    assert (d.content_sha256, d.content_size_bytes) == (None, None)
    created_by = all_v.data[-1].created_by
    assert created_by.type == "api_actor" and created_by.api_key_id.startswith("apikey_")
    assert all(v.created_by == created_by for v in all_v.data)  # one stable id for the admin key

    mine = versions.list(store.id, memory_id=m.id, view="full")
    assert [v.content for v in mine.data] == [None, "two", "two", "one"]
    assert [v.id for v in versions.list(store.id, operation="created")] == [
        all_v.data[1].id,
        all_v.data[4].id,
    ]
    assert [v.id for v in versions.list(store.id, limit=2)] == [v.id for v in all_v.data]  # auto-pagination
    assert len(versions.list(store.id, limit=2).data) == 2
    assert [v.id for v in versions.list(store.id, api_key_id=created_by.api_key_id)] == [
        v.id for v in all_v.data
    ]
    assert list(versions.list(store.id, session_id="sesn_nobody")) == []
    t_other = all_v.data[1].created_at
    assert {v.id for v in versions.list(store.id, created_at_gte=t_other)} == {
        all_v.data[0].id,
        all_v.data[1].id,
    }
    assert len(list(versions.list(store.id, created_at_lte=t_other))) == 4
    with pytest.raises(anthropic.BadRequestError):
        versions.list(store.id, operation="renamed")  # type: ignore[arg-type]

    first = all_v.data[-1]
    got = versions.retrieve(first.id, memory_store_id=store.id)
    assert (got.content, got.content_sha256, got.memory_id) == ("one", sha("one"), m.id)
    assert versions.retrieve(first.id, memory_store_id=store.id, view="basic").content is None

    red = versions.redact(first.id, memory_store_id=store.id)
    assert (red.content, red.path, red.content_sha256, red.content_size_bytes) == (None, None, None, None)
    assert red.redacted_at is not None and red.redacted_by.type == "api_actor"
    again = versions.retrieve(first.id, memory_store_id=store.id)
    assert again.redacted_at == red.redacted_at and again.content is None and again.operation == "created"
    assert versions.redact(first.id, memory_store_id=store.id).redacted_at == red.redacted_at  # idempotent
    assert mems.retrieve(other.id, memory_store_id=store.id).content == "o"
    with pytest.raises(anthropic.NotFoundError):
        versions.retrieve("memver_nope", memory_store_id=store.id)
    with pytest.raises(anthropic.NotFoundError):
        versions.redact("memver_nope", memory_store_id=store.id)


# --- credentials ---------------------------------------------------------------------------------


def test_auth_and_session_scoping(service, client):
    rw = client.beta.memory_stores.create(name="rw")
    ro = client.beta.memory_stores.create(name="ro")
    hidden = client.beta.memory_stores.create(name="hidden")
    client.beta.memory_stores.memories.create(ro.id, path="/seed", content="s")
    session = service.create_session([(rw.id, "read_write"), (ro.id, "read_only")])
    token = token_of(session)

    for bearer in (False, True):
        agent = session_client(service, token, bearer=bearer)
        mems = agent.beta.memory_stores.memories
        written = mems.create(rw.id, path=f"/by-agent-{bearer}", content="hi")
        v = agent.beta.memory_stores.memory_versions.retrieve(
            written.memory_version_id, memory_store_id=rw.id
        )
        assert (v.created_by.type, v.created_by.session_id) == ("session_actor", session["id"])
        assert [m.path for m in mems.list(ro.id)] == ["/seed"]
        with pytest.raises(anthropic.PermissionDeniedError) as e:
            mems.create(ro.id, path="/nope", content="x")
        assert error_type(e.value) == "permission_error"
        seed = mems.list(ro.id).data[0]
        with pytest.raises(anthropic.PermissionDeniedError):
            mems.update(seed.id, memory_store_id=ro.id, content="x")
        with pytest.raises(anthropic.PermissionDeniedError):
            mems.delete(seed.id, memory_store_id=ro.id)
        with pytest.raises(anthropic.NotFoundError):  # not attached: existence is not leaked
            mems.list(hidden.id)
        with pytest.raises(anthropic.NotFoundError):
            agent.beta.memory_stores.retrieve(hidden.id)
        assert {s.id for s in agent.beta.memory_stores.list()} == {rw.id, ro.id}
        with pytest.raises(anthropic.PermissionDeniedError):
            agent.beta.memory_stores.create(name="agent store")
        with pytest.raises(anthropic.PermissionDeniedError):
            agent.beta.memory_stores.delete(rw.id)
        with pytest.raises(anthropic.PermissionDeniedError):
            agent.beta.memory_stores.memory_versions.redact(v.id, memory_store_id=rw.id)

    by_session = client.beta.memory_stores.memory_versions.list(rw.id, session_id=session["id"])
    assert sorted(v.path for v in by_session) == ["/by-agent-False", "/by-agent-True"]

    for bad in ("wrong-key", service.admin_key + "x", token[:-1]):
        with pytest.raises(anthropic.AuthenticationError) as e:
            session_client(service, bad).beta.memory_stores.list()
        assert error_type(e.value) == "authentication_error"
