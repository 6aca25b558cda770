"""Rules of the memory-store API that the hosted API has and memfs serve must match (docs/SEMANTICS.md#d-api).

The metadata limit applies to the result of a patch; an update must change content or path; a
path segment may be longer than 255 bytes; page cursors are opaque and valid only for the listing
that produced them.
"""

from __future__ import annotations

import base64
import json

import httpx
import pytest

MEMORY = {"anthropic-beta": "agent-memory-2026-07-22"}


@pytest.fixture
def http(service):
    with httpx.Client(
        base_url=service.base_url, headers={"x-api-key": service.admin_key, **MEMORY}, timeout=30
    ) as c:
        yield c


def _error(r: httpx.Response, status: int, words: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["error"]["type"] == "invalid_request_error", r.text
    assert words in r.json()["error"]["message"], r.text


# --- metadata ------------------------------------------------------------------------------------


def test_metadata_limit_applies_to_the_result_of_the_patch(http):
    full = {f"k{i:02}": "v" for i in range(16)}
    store = http.post("/v1/memory_stores", json={"name": "m", "metadata": full}).json()
    url = f"/v1/memory_stores/{store['id']}"
    # 17 entries in the patch (16 deletions, one addition) leave one pair: allowed
    patch = {k: None for k in full} | {"new": "x"}
    r = http.post(url, json={"metadata": patch})
    assert r.status_code == 200, r.text
    assert r.json()["metadata"] == {"new": "x"}
    # replace one pair by another at 16: allowed
    http.post(url, json={"metadata": {k: "v" for k in list(full)[:15]}})
    assert len(http.get(url).json()["metadata"]) == 16
    r = http.post(url, json={"metadata": {"new": None, "other": "y"}})
    assert r.status_code == 200 and len(r.json()["metadata"]) == 16, r.text
    # one more than 16 in the result: refused, and nothing changed
    _error(http.post(url, json={"metadata": {"seventeenth": "z"}}), 400, "16")
    assert len(http.get(url).json()["metadata"]) == 16
    # deleting a key that is not there is not counted
    r = http.post(url, json={"metadata": {f"absent{i}": None for i in range(20)}})
    assert r.status_code == 200 and len(r.json()["metadata"]) == 16, r.text
    # each value is still checked, in a patch as on create
    _error(http.post(url, json={"metadata": {"k00": "v" * 513}}), 400, "metadata")


# --- updates that change nothing ------------------------------------------------------------------


def test_an_update_needs_content_or_path(http):
    store = http.post("/v1/memory_stores", json={"name": "u"}).json()["id"]
    mem = http.post(f"/v1/memory_stores/{store}/memories", json={"path": "/a", "content": "a"}).json()
    url = f"/v1/memory_stores/{store}/memories/{mem['id']}"
    sha = mem["content_sha256"]
    for body in (
        {},
        {"content": None, "path": None},
        {"precondition": {"type": "content_sha256", "content_sha256": sha}},
    ):
        _error(http.post(url, json=body), 400, "content")
    # an update that names one of them but changes nothing is a 200 no-op, as before
    assert http.post(url, json={"content": "a"}).status_code == 200
    counter = http.get(f"/v1/memory_stores/{store}/counter").json()["counter"]
    assert counter == 1


# --- long path segments ---------------------------------------------------------------------------


def test_a_segment_over_255_bytes_is_a_valid_memory(http):
    store = http.post("/v1/memory_stores", json={"name": "long"}).json()["id"]
    long_name = "é" * 200  # 400 bytes in one segment
    r = http.post(f"/v1/memory_stores/{store}/memories", json={"path": f"/d/{long_name}", "content": "x"})
    assert r.status_code == 200, r.text
    mem = r.json()
    listed = http.get(f"/v1/memory_stores/{store}/memories", params={"path_prefix": "/d/"}).json()["data"]
    assert [m["path"] for m in listed] == [f"/d/{long_name}"]
    r = http.post(f"/v1/memory_stores/{store}/memories/{mem['id']}", json={"path": "/" + "x" * 1000})
    assert r.status_code == 200 and r.json()["path"] == "/" + "x" * 1000, r.text
    # the whole path is still at most 1,024 bytes
    _error(
        http.post(f"/v1/memory_stores/{store}/memories", json={"path": "/" + "x" * 1024, "content": "x"}),
        400,
        "1024",
    )


# --- page cursors -----------------------------------------------------------------------------------


def _pages(http, url: str, params: dict) -> list[str]:
    r = http.get(url, params=params)
    assert r.status_code == 200, r.text
    return r.json()["next_page"]


def test_cursors_are_opaque(http):
    store = http.post("/v1/memory_stores", json={"name": "c"}).json()["id"]
    url = f"/v1/memory_stores/{store}/memories"
    for i in range(3):
        http.post(url, json={"path": f"/p{i}", "content": "x"})
    cursor = _pages(http, url, {"limit": 1})
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    with pytest.raises(ValueError):
        json.loads(raw)  # not a JSON document a client could read or edit
    # a cursor in the old readable shape, or one edited by a client, is refused
    forged = base64.urlsafe_b64encode(json.dumps(["memories", "/p0"]).encode()).decode().rstrip("=")
    _error(http.get(url, params={"limit": 1, "page": forged}), 400, "page")
    flipped = cursor[:-2] + ("A" if cursor[-2] != "A" else "B") + cursor[-1]
    _error(http.get(url, params={"limit": 1, "page": flipped}), 400, "page")
    _error(http.get(url, params={"limit": 1, "page": "not-a-cursor"}), 400, "page")
    # the real cursor still works, and any limit may be used with it
    r = http.get(url, params={"limit": 5, "page": cursor})
    assert [m["path"] for m in r.json()["data"]] == ["/p1", "/p2"]


def test_a_cursor_is_valid_only_for_its_listing(http):
    s1 = http.post("/v1/memory_stores", json={"name": "one"}).json()["id"]
    s2 = http.post("/v1/memory_stores", json={"name": "two"}).json()["id"]
    for s in (s1, s2):
        for i in range(3):
            http.post(f"/v1/memory_stores/{s}/memories", json={"path": f"/d/p{i}", "content": "x"})
            http.post(f"/v1/memory_stores/{s}/memories", json={"path": f"/e/p{i}/q", "content": "x"})
    mems = f"/v1/memory_stores/{s1}/memories"
    cursor = _pages(http, mems, {"limit": 1})
    others = [
        (f"/v1/memory_stores/{s2}/memories", {}),  # another store
        (mems, {"path_prefix": "/d/"}),  # another prefix
        (mems, {"depth": 1}),  # another depth
        (mems, {"view": "full"}),  # another view
        (f"/v1/memory_stores/{s1}/memory_versions", {}),  # another kind of listing
        ("/v1/memory_stores", {}),
    ]
    for url, params in others:
        _error(http.get(url, params={"limit": 1, **params, "page": cursor}), 400, "page")
    assert http.get(mems, params={"limit": 1, "page": cursor}).status_code == 200

    versions = f"/v1/memory_stores/{s1}/memory_versions"
    vcursor = _pages(http, versions, {"limit": 1})
    for params in ({"operation": "created"}, {"view": "full"}, {"memory_id": "mem_x"}):
        _error(http.get(versions, params={"limit": 1, **params, "page": vcursor}), 400, "page")
    _error(http.get(f"/v1/memory_stores/{s2}/memory_versions", params={"page": vcursor}), 400, "page")
    assert http.get(versions, params={"limit": 1, "page": vcursor}).status_code == 200

    scursor = _pages(http, "/v1/memory_stores", {"limit": 1})
    _error(http.get("/v1/memory_stores", params={"include_archived": "true", "page": scursor}), 400, "page")
    _error(http.get(mems, params={"page": scursor}), 400, "page")
    assert http.get("/v1/memory_stores", params={"limit": 1, "page": scursor}).status_code == 200
