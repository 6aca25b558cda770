"""Measurement tools run by hand, one question each (not rows of `scripts/bench`), under the same
public-names rule as the bench (tests/test_layers.py). Run from the repository root:

    .venv/bin/python -m benchmarks.measure.NAME [--help]

    console_perf          every console page's time on a 10,000-memory store
    counter_rate          counter reads (or writes, or held watches) per second on one `memfs serve`
    read_ab               the read path of two memfs trees side by side on one store (as root)
    worker_sync_latency   the worker's pre-call sync, median and p99, over both control sockets
    write_rate            2,000 creates: single requests against batch writes
"""
