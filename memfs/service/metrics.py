"""The service's Prometheus metrics, through `prometheus_client` (the ecosystem's own library).

One registry per app (tests run several apps in one process, each must count only its own), with
the process collector (CPU, RSS, open fds, start time) and the platform collector (Python version)
on it. Each replica is its own process and exposes its own figures: Prometheus scrapes every
replica and sums across them, so nothing is shared between processes (no multiprocess mode).
"""

from __future__ import annotations

import prometheus_client
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST

# `_created` series double every counter's output for a value nobody here graphs.
prometheus_client.disable_created_metrics()

# Request latencies: the counter path answers in about a millisecond, a snapshot of a large store
# in seconds, a watch is held up to 60 s; p50/p99 come from these buckets by histogram_quantile.
_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 65.0,
)  # fmt: skip
# (method, route, status) series kept looked up (Metrics.observe); the routes are templates, so
# real traffic needs a few dozen.
_MAX_CACHED_SERIES = 1024
# The concurrent-writer counters are labelled by store id, a series made at a store's first merge
# or copy only; past this many stores the rest share the label OTHER_STORES, so a service with
# many busy stores cannot grow the scrape without bound.
MAX_STORE_SERIES = 1000
OTHER_STORES = "other"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._requests = Counter(
            "memfs_http_requests",
            "HTTP requests answered, by method, route template and status.",
            ("method", "route", "status"),
            registry=self.registry,
        )
        self._latency = Histogram(
            "memfs_http_request_duration_seconds",
            "Time to answer a request, by method and route template.",
            ("method", "route"),
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._counter_reads = Counter(
            "memfs_counter_reads",
            "Store counters read through the counter extension endpoints.",
            registry=self.registry,
        )
        self._rate_limited = Counter(
            "memfs_rate_limited_requests",
            "Requests refused with 429 by the per-credential rate limit, by credential kind (admin, session).",
            ("credential",),
            registry=self.registry,
        )
        org = Counter(
            "memfs_org_requests",
            "Requests counted by the per-organisation limits (--org-limits), by class (read, write) "
            "and outcome (ok, limited: answered 429).",
            ("class", "outcome"),
            registry=self.registry,
        )
        # every series up front (zeros included), looked up once: a bench reads them before any 429
        self._org = {(c, o): org.labels(c, o) for c in ("read", "write") for o in ("ok", "limited")}
        self._series: dict[tuple[str, str, int], tuple] = {}
        # the writes a mount said were a merge or a conflict copy (protocol.WRITE_REASON_HEADER)
        self._reasons = {
            "merge": Counter(
                "memfs_merges",
                "Merged texts the mounts wrote (SEMANTICS.md, merging concurrent writers) that the store took, by store.",
                ("store",),
                registry=self.registry,
            ),
            "conflict-copy": Counter(
                "memfs_conflict_copies",
                "Conflict copies (a true conflict's losing version) the mounts created on the store, by store.",
                ("store",),
                registry=self.registry,
            ),
        }
        self._stores: set[str] = set()  # store labels given out (MAX_STORE_SERIES)
        self.watches_held = Gauge(
            "memfs_watches_held",
            "Watch requests held open now, waiting for a counter to move.",
            registry=self.registry,
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        # The two series of a (method, route, status), looked up once: `labels()` checks and
        # joins its label values under a lock every call, ~5 µs of a list page's ~9 µs here.
        key = (method, route, status)
        series = self._series.get(key)
        if series is None:
            series = (self._requests.labels(method, route, str(status)), self._latency.labels(method, route))
            if len(self._series) < _MAX_CACHED_SERIES:  # a client's made-up methods stay uncached
                self._series[key] = series
        series[0].inc()
        series[1].observe(seconds)

    def write_reason(self, store_id: str, reason: str | None) -> None:
        """A write the store took, with the reason its mount gave (none, or one not known: not counted)."""
        counter = self._reasons.get(reason or "")
        if counter is None:
            return
        if store_id not in self._stores and len(self._stores) >= MAX_STORE_SERIES:
            store_id = OTHER_STORES
        self._stores.add(store_id)
        counter.labels(store_id).inc()

    def counter_reads(self, n: int) -> None:
        self._counter_reads.inc(n)

    def rate_limited(self, kind: str) -> None:
        self._rate_limited.labels(kind).inc()

    def org_request(self, cls: str, limited: bool) -> None:
        self._org[cls, "limited" if limited else "ok"].inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
