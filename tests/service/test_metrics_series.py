"""Metrics.observe looks a (method, route, status)'s series up once, and still counts each request."""

from __future__ import annotations

import pytest

from memfs.service.metrics import Metrics


@pytest.mark.timeout(30)
def test_observe_reuses_the_series_and_counts_every_request(monkeypatch):
    m = Metrics()
    route = "/v1/memory_stores/{store_id}/memories"
    m.observe("GET", route, 200, 0.001)

    def no_lookup(*_a, **_kw):
        raise AssertionError("labels() looked up again")

    monkeypatch.setattr(m._requests, "labels", no_lookup)
    monkeypatch.setattr(m._latency, "labels", no_lookup)
    m.observe("GET", route, 200, 0.002)
    m.observe("GET", route, 200, 0.003)
    monkeypatch.undo()
    m.observe("GET", route, 404, 0.001)  # another status: its own series
    text = m.render().decode()
    assert f'memfs_http_requests_total{{method="GET",route="{route}",status="200"}} 3.0' in text
    assert f'memfs_http_requests_total{{method="GET",route="{route}",status="404"}} 1.0' in text
    assert f'memfs_http_request_duration_seconds_count{{method="GET",route="{route}"}} 4.0' in text
