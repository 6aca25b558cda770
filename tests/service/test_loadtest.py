"""A smoke run of scripts/loadtest: a few sandboxes for a few seconds, two replicas on one SQLite
file. It must finish with no errors and write the JSON the docs read (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "loadtest"


@pytest.mark.timeout(180)
def test_loadtest_smoke_run_has_no_errors_and_writes_its_json(tmp_path):
    out = tmp_path / "result.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--db", "sqlite", "--replicas", "2", "--sandboxes", "12", "--team", "4",
         "--seconds", "3", "--drain", "2", "--ramp", "0.5", "--tick", "0.5", "--write-every", "0.5", "--watch-wait", "5",
         "--json", str(out)],
        capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "watch wake-ups" in run.stdout and "replica 1" in run.stdout
    result = json.loads(out.read_text())
    assert result["errors"] == {"count": 0, "samples": []}
    assert result["config"]["sandboxes"] == 12 and result["config"]["replicas"] == 2
    for part in ("writes", "counter_reads"):
        assert (
            result[part]["count"] > 0
            and result[part]["p50_ms"] is not None
            and result[part]["p99_ms"] is not None
        )
    wake = result["wakeups"]
    assert wake["count"] == result["writes"]["count"] and wake["missed"] == 0 and wake["p99_ms"] is not None
    assert wake["watch_answers"] > 0
    assert result["throughput_rps"] > 0
    assert len(result["replicas"]) == 2
    assert all(r["rss_mib"] > 0 and r["peak_rss_mib"] > 0 for r in result["replicas"])
