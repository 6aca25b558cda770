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
