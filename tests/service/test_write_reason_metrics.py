"""`/metrics` counts the writes a mount says were a merge or a conflict copy (the
`memfs-write-reason` header, SEMANTICS.md#d-merge), per store: only writes the store took, only
with a reason it knows, on the single create and update routes. In process: the real app on
SQLite, through httpx's ASGI transport (the mount's side: tests/engine/test_merge_engine.py)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator

import httpx
import pytest

from memfs.relay.upstream import forwarded_headers
from memfs.service import metrics as service_metrics
from memfs.service.app import create_app
from memfs.service.database import open_storage
from memfs.service.metrics import Metrics

pytestmark = pytest.mark.timeout(30)

REASON = "memfs-write-reason"  # spelled out: a change of protocol.WRITE_REASON_HEADER must break this


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def counted(text: str, metric: str) -> dict[str, float]:
    """store -> value of `metric` in a /metrics page."""
    return {s: float(v) for s, v in re.findall(rf'^{metric}_total{{store="([^"]+)"}} (\S+)$', text, re.M)}


ADMIN_KEY = "test-admin-key-0123456789"


@pytest.fixture
async def admin(tmp_path) -> AsyncIterator[httpx.AsyncClient]:
    storage = open_storage(tmp_path / "store.db")
    transport = httpx.ASGITransport(app=create_app(storage, ADMIN_KEY, 1000))
    headers = {"x-api-key": ADMIN_KEY, "anthropic-beta": "agent-memory-2026-07-22"}
    async with httpx.AsyncClient(transport=transport, base_url="http://memfs.test", headers=headers) as c:
        yield c
    storage.close()


async def create_store(admin: httpx.AsyncClient, name: str) -> str:
    resp = await admin.post("/v1/memory_stores", json={"name": name})
    assert resp.status_code == 200, resp.text
    return resp.json()["id"]


async def create(
    admin: httpx.AsyncClient, store: str, path: str, content: str, **headers: str
) -> httpx.Response:
    return await admin.post(
        f"/v1/memory_stores/{store}/memories", json={"path": path, "content": content}, headers=headers
    )


@pytest.mark.trio
async def test_merges_and_copies_count_per_store_only_when_the_store_took_them(admin):
    a, b = await create_store(admin, "a"), await create_store(admin, "b")
    log = (await create(admin, a, "/log.md", "one\n")).json()

    def update(store: str, mid: str, content: str, expected: str, **headers: str):
        pre = {"type": "content_sha256", "content_sha256": sha(expected)}
        url = f"/v1/memory_stores/{store}/memories/{mid}"
        return admin.post(url, json={"content": content, "precondition": pre}, headers=headers)

    merge, copy = {REASON: "merge"}, {REASON: "conflict-copy"}
    assert (await update(a, log["id"], "one\ntwo\n", "one\n", **merge)).status_code == 200
    assert (await update(a, log["id"], "x\n", "stale\n", **merge)).status_code == 409  # not taken
    assert (await update(a, log["id"], "one\ntwo\n3\n", "one\ntwo\n")).status_code == 200  # no reason
    made_up = await update(a, log["id"], "four\n", "one\ntwo\n3\n", **{REASON: "made-up"})
    assert made_up.status_code == 200
    path = "/log.conflict-sesn_x-20261204T224012Z.md"
    assert (await create(admin, a, path, "mine\n", **copy)).status_code == 200
    assert (await create(admin, a, path, "mine\n", **copy)).status_code == 409  # path taken: not counted
    other = (await create(admin, b, "/x.md", "x\n")).json()
    assert (await update(b, other["id"], "x\ny\n", "x\n", **merge)).status_code == 200
    resp = await admin.get("/metrics")
    assert resp.status_code == 200
    text = resp.text
    assert counted(text, "memfs_merges") == {a: 1.0, b: 1.0}
    assert counted(text, "memfs_conflict_copies") == {a: 1.0}


def test_past_max_store_series_the_stores_share_one_label(monkeypatch):
    """The label is the store id; a service with very many busy stores stops making series."""
    monkeypatch.setattr(service_metrics, "MAX_STORE_SERIES", 2)
    m = Metrics()
    for sid in ("s1", "s2", "s3", "s4", "s1"):
        m.write_reason(sid, "merge")
    m.write_reason("s5", None)  # no reason: nothing, not even a series
    assert counted(m.render().decode(), "memfs_merges") == {"s1": 2.0, "s2": 1.0, "other": 2.0}


def test_the_relay_passes_the_reason_upstream():
    """A mount behind `memfs serve --upstream` is counted by the upstream (when it is memfs serve):
    the relay's header filter (relay/upstream.py) keeps the reason on the writes it passes on."""
    caller = [(REASON.encode(), b"merge"), (b"connection", b"keep-alive")]
    assert forwarded_headers(caller) == [(REASON.encode(), b"merge")]
