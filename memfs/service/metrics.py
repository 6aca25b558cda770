"""In-process request metrics rendered in the Prometheus text format (version 0.0.4)."""

from __future__ import annotations

import threading
from collections import defaultdict

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, str], int] = defaultdict(int)
        self._latency_sum: dict[tuple[str, str], float] = defaultdict(float)
        self._latency_count: dict[tuple[str, str], int] = defaultdict(int)
        self._counter_reads = 0

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self._requests[(method, route, str(status))] += 1
            self._latency_sum[(method, route)] += seconds
            self._latency_count[(method, route)] += 1

    def counter_reads(self, n: int) -> None:
        with self._lock:
            self._counter_reads += n

    def render(self) -> str:
        with self._lock:
            lines = [
                "# HELP memfs_http_requests_total HTTP requests answered, by method, route template and status.",
                "# TYPE memfs_http_requests_total counter",
            ]
            for (m, r, s), n in sorted(self._requests.items()):
                lines.append(
                    f'memfs_http_requests_total{{method="{m}",route="{_label(r)}",status="{s}"}} {n}'
                )
            lines += [
                "# HELP memfs_http_request_duration_seconds Time to answer a request, by method and route template.",
                "# TYPE memfs_http_request_duration_seconds summary",
            ]
            for (m, r), total in sorted(self._latency_sum.items()):
                labels = f'method="{m}",route="{_label(r)}"'
                lines.append(f"memfs_http_request_duration_seconds_sum{{{labels}}} {total:.6f}")
                lines.append(
                    f"memfs_http_request_duration_seconds_count{{{labels}}} {self._latency_count[(m, r)]}"
                )
            lines += [
                "# HELP memfs_counter_reads_total Store counters read through the counter extension endpoints.",
                "# TYPE memfs_counter_reads_total counter",
                f"memfs_counter_reads_total {self._counter_reads}",
            ]
        return "\n".join(lines) + "\n"
