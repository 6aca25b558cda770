"""The bench's request counting (benchmarks/admin.py `Admin.requests`) against a real `memfs serve`.

The idle-tick, one-change-tick and write-burst rows subtract two of its readings: if it misreads
/metrics, every row reads 0 requests on both sides (prometheus_client writes its counters as
floats, `… 3.0`, which a digits-only pattern never matched)."""

from __future__ import annotations

import pytest

from benchmarks.admin import MEMORY_HEADERS, Admin
from benchmarks.config import ADMIN_KEY
from tests.support.service import ServiceProcess

pytestmark = pytest.mark.timeout(60)


def test_requests_counts_what_the_service_answered_and_not_metrics_itself(tmp_path):
    svc = ServiceProcess(tmp_path / "service", admin_key=ADMIN_KEY)
    admin = Admin(svc.base_url)
    try:
        store = admin.create_store("counted")
        before = admin.requests()
        assert before >= 1  # the create
        for _ in range(3):  # the counter fast path (counter_path.py) counts as any other route
            admin.http.get("/v1/memory_store_counters", params={"ids": store}, headers=MEMORY_HEADERS)
        admin.list_basic(store)
        admin.http.get("/v1/memory_stores/memstore_missing", headers=MEMORY_HEADERS)  # a 404 counts too
        assert admin.requests() - before == 5
        assert admin.requests() - before == 5  # reading /metrics is not a request of the row's
        by_route = admin.requests_by_route()
        assert (
            by_route["/v1/memory_store_counters"] == 3
            and by_route["/v1/memory_stores/{store_id}/memories"] == 1
        )
        assert admin.requests(but=("/v1/memory_store_counters",)) - before == 2
    finally:
        admin.close()
        svc.stop()


def test_org_requests_counts_what_the_emulators_limits_saw(tmp_path):
    """The hosted rows (benchmarks/rows/hosted.py) subtract two `Admin.org_requests` readings of
    `memfs serve --hosted-api`'s per-organisation counters, 429s included."""
    svc = ServiceProcess(
        tmp_path / "service",
        admin_key=ADMIN_KEY,
        hosted_api=True,
        extra_args=("--org-limits", "60,60", "--org-burst", "3"),
    )
    admin = Admin(svc.base_url)
    try:
        before = admin.org_requests()
        assert before["total"] == 0 and before["limited"] == 0
        store = admin.create_store("counted")  # a write
        codes = [
            admin.http.get(f"/v1/memory_stores/{store}", headers=MEMORY_HEADERS).status_code for _ in range(6)
        ]
        after = admin.org_requests()
        assert after["write_ok"] == 1 and after["read_ok"] == codes.count(200) >= 3
        assert after["read_limited"] == codes.count(429) >= 1
        assert after["total"] == 7 and after["limited"] == codes.count(429)
        assert admin.org_requests() == after  # reading /metrics is not counted
    finally:
        admin.close()
        svc.stop()
