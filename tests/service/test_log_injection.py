"""A forged log line stays one line: the access log used to print the decoded
path, so `%0a` in a URL (no credential needed) started a line of the sender's choosing and `%00`
wrote a NUL into the log. A real `memfs serve`, its real stderr."""

from __future__ import annotations

import socket
import time

import pytest

pytestmark = pytest.mark.timeout(60)

FORGED = "2026-01-01 00:00:00,000 INFO memfs.service.access: DELETE /v1/memory_stores/all 200 1.0ms"


def test_a_forged_log_line_stays_one_line(service):
    path = "/v1/forged-probe%0a" + FORGED.replace(" ", "%20") + "%00%e2%80%a8%e2%80%ae-end"
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
        while sock.recv(65536):
            pass
    deadline = time.monotonic() + 10
    while "forged-probe" not in service.stderr() and time.monotonic() < deadline:
        time.sleep(0.1)  # the access log is written in batches, every 0.5 s
    log = service.stderr()
    assert "\x00" not in log and "\u2028" not in log and "\u202e" not in log
    probes = [line for line in log.splitlines() if "forged-probe" in line or "DELETE" in line]
    assert len(probes) == 1, probes
    assert probes[0].split(" INFO ")[1].startswith("memfs.service.access: GET /v1/forged-probe\\x0a2026"), (
        probes
    )
    assert probes[0].endswith("ms") and "\\x00\\u2028\\u202e-end 404 " in probes[0], probes
