"""`/metrics` counts the writes a mount says were a merge or a conflict copy (the
`memfs-write-reason` header, SEMANTICS.md#d-merge), per store: only writes the store took, only
with a reason it knows, on the single create and update routes. In process: the real app."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator

import pytest

from memfs.relay.upstream import forwarded_headers
from memfs.service import metrics as service_metrics
from memfs.service.metrics import Metrics
from tests.support.inprocess import InProcessService

pytestmark = pytest.mark.timeout(30)

REASON = "memfs-write-reason"  # spelled out: a change of protocol.WRITE_REASON_HEADER must break this


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def counted(text: str, metric: str) -> dict[str, float]:
    """store -> value of `metric` in a /metrics page."""
    return {s: float(v) for s, v in re.findall(rf'^{metric}_total{{store="([^"]+)"}} (\S+)$', text, re.M)}


@pytest.fixture
async def svc(tmp_path) -> AsyncIterator[InProcessService]:
    s = InProcessService(tmp_path)
    yield s
    await s.aclose()


async def metrics(svc: InProcessService) -> str:
    resp = await svc.admin.get("/metrics")
    assert resp.status_code == 200
    return resp.text


@pytest.mark.trio
async def test_merges_and_copies_count_per_store_only_when_the_store_took_them(svc):
    a, b = await svc.create_store("a"), await svc.create_store("b")
    log = await svc.create(a, "/log.md", "one\n")
    url = f"/v1/memory_stores/{a}/memories/{log['id']}"

    def update(content: str, expected: str, **headers: str):
        pre = {"type": "content_sha256", "content_sha256": sha(expected)}
        return svc.admin.post(url, json={"content": content, "precondition": pre}, headers=headers)

    assert (await update("one\ntwo\n", "one\n", **{REASON: "merge"})).status_code == 200
    assert (await update("x\n", "stale\n", **{REASON: "merge"})).status_code == 409  # not taken
    assert (await update("one\ntwo\nthree\n", "one\ntwo\n")).status_code == 200  # no reason
    assert (await update("four\n", "one\ntwo\nthree\n", **{REASON: "made-up"})).status_code == 200
    copy = {"path": "/log.conflict-sesn_x-20261204T224012Z.md", "content": "mine\n"}
    created = await svc.admin.post(
        f"/v1/memory_stores/{a}/memories", json=copy, headers={REASON: "conflict-copy"}
    )
    assert created.status_code == 200
    again = await svc.admin.post(
        f"/v1/memory_stores/{a}/memories", json=copy, headers={REASON: "conflict-copy"}
    )
    assert again.status_code == 409  # the path is taken: not counted
    other = await svc.create(b, "/x.md", "x\n")
    pre = {"type": "content_sha256", "content_sha256": sha("x\n")}
    resp = await svc.admin.post(
        f"/v1/memory_stores/{b}/memories/{other['id']}",
        json={"content": "x\ny\n", "precondition": pre},
        headers={REASON: "merge"},
    )
    assert resp.status_code == 200
    text = await metrics(svc)
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
