"""Authenticated input that used to answer 500 now answers 400, and nothing partial is written
(docs/API.md): out-of-range dates, JSON nested past the parser's limit, and JSON
that is not UTF-8 (UTF-16, a byte order mark), which docs/API.md says is a 400."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.timeout(60)

DEEP = b"[" * 100_000 + b"]" * 100_000  # 200 KB: well under the 1 MiB body limit
OUT_OF_RANGE = ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00")


def error_of(r) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["type"]


@pytest.mark.parametrize("when", OUT_OF_RANGE)
@pytest.mark.parametrize("bound", ["gte", "lte"])
def test_out_of_range_dates_are_400_on_stores_and_versions(service, when, bound):
    store = service.create_store("dates")["id"]
    with service.admin_client() as c:
        for url in ("/v1/memory_stores", f"/v1/memory_stores/{store}/memory_versions"):
            r = c.get(url, params={f"created_at[{bound}]": when})
            assert error_of(r) == (400, "invalid_request_error"), (url, r.text)
            assert "created_at" in r.json()["error"]["message"]


def test_json_nested_past_the_parsers_limit_is_400_and_writes_nothing(service):
    store = service.create_store("nested")["id"]
    base = f"/v1/memory_stores/{store}"
    deep_memory = b'{"path": "/a.md", "content": "x", "extra": ' + DEEP + b"}"
    deep_batch = b'{"operations": [{"type": "create", "path": "/b.md", "content": ' + DEEP + b"}]}"
    with service.admin_client() as c:
        for url, body in ((f"{base}/memories", deep_memory), (f"{base}/memory_batch", deep_batch)):
            r = c.post(url, content=body, headers={"content-type": "application/json"})
            assert error_of(r) == (400, "invalid_request_error"), (url, r.text)
            assert "nested too deeply" in r.json()["error"]["message"], r.text
        assert c.get(f"{base}/memories").json()["data"] == []


@pytest.mark.parametrize(
    "encoded",
    [
        json.dumps({"name": "utf16"}).encode("utf-16"),
        json.dumps({"name": "utf16le"}).encode("utf-16-le"),
        b"\xef\xbb\xbf" + json.dumps({"name": "bom"}).encode(),
    ],
    ids=["utf-16-with-bom", "utf-16-le", "utf-8-bom"],
)
def test_a_json_body_that_is_not_plain_utf8_is_400(service, encoded):
    with service.admin_client() as c:
        r = c.post("/v1/memory_stores", content=encoded, headers={"content-type": "application/json"})
        assert error_of(r) == (400, "invalid_request_error"), r.text
        assert c.get("/v1/memory_stores").json()["data"] == []
