"""`memfs serve` as a process (start line, keys, signals, restart, schema, logs, metrics) and the admin CLI."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import httpx
import pytest

from memfs.service import postgres_backend, sqlite_backend
from tests.service.dbcheck import rows
from tests.support.service import ServiceProcess

MEMORY = {"anthropic-beta": "agent-memory-2026-07-22"}


def memfs(*args: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("MEMFS_ADMIN_KEY", "ANTHROPIC_BASE_URL")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "memfs", *args], capture_output=True, text=True, env=full_env, timeout=timeout
    )


def test_sigterm_restart_schema_and_request_log(service):
    store = service.create_store("persist")["id"]
    session = service.create_session([(store, "read_write")])
    token = json.loads(base64.urlsafe_b64decode(session["work_secret"]))["sessions_token"]
    with httpx.Client(base_url=service.base_url, headers={"x-api-key": token, **MEMORY}) as agent:
        assert (
            agent.post(f"/v1/memory_stores/{store}/memories", json={"path": "/x", "content": "y"}).status_code
            == 200
        )
    assert service.stop() == 0  # SIGTERM: clean exit
    log = service.stderr()
    assert re.search(r"POST /v1/memory_stores/\S+/memories 200 [\d.]+ms", log)
    assert service.admin_key not in log and token not in log  # never a credential in the log
    service.start()
    with service.admin_client() as c:
        assert c.get(f"/v1/memory_stores/{store}/counter").json()["counter"] == 1
    assert rows(service, "SELECT key, value FROM store_kv WHERE store_id = ?", (store,)) == [("counter", 1)]
    hashes = [r[0] for r in rows(service, "SELECT token_hash FROM sessions")]
    assert token not in hashes and len(hashes[0]) == 64  # tokens are stored hashed
    if service.db_url:
        assert rows(service, "SELECT version FROM memfs_schema") == [(postgres_backend.SCHEMA_VERSION,)]
    else:
        with sqlite3.connect(service.db_path) as db:
            assert db.execute("PRAGMA user_version").fetchone()[0] == sqlite_backend.SCHEMA_VERSION
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_generated_and_env_admin_keys(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MEMFS_ADMIN_KEY"}
    for mode in ("generated", "env"):
        err_path = tmp_path / f"{mode}.stderr"
        out_path = tmp_path / f"{mode}.stdout"
        run_env = {**env, **({"MEMFS_ADMIN_KEY": "from-env-key-0123456789"} if mode == "env" else {})}
        cmd = [
            sys.executable,
            "-m",
            "memfs",
            "serve",
            "--port",
            "0",
            "--db",
            str(tmp_path / mode / "nested" / "s.db"),
        ]
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=run_env, cwd=tmp_path)
        try:
            deadline = time.monotonic() + 20
            while "listening on" not in out_path.read_text() and time.monotonic() < deadline:
                assert proc.poll() is None, err_path.read_text()
                time.sleep(0.05)
            url = re.search(r"listening on (http://\S+)", out_path.read_text()).group(1)
            generated = re.findall(r"generated admin key.*: (\S+)", err_path.read_text())
            if mode == "generated":
                assert len(generated) == 1
                key = generated[0]
            else:
                assert generated == []
                key = "from-env-key-0123456789"
            with httpx.Client(base_url=url, headers=MEMORY) as c:
                assert c.get("/v1/memory_stores", headers={"x-api-key": key}).status_code == 200
                assert c.get("/v1/memory_stores", headers={"x-api-key": key + "x"}).status_code == 401
        finally:
            proc.send_signal(signal.SIGINT)
            assert proc.wait(10) == 0
        assert (tmp_path / mode / "nested" / "s.db").exists()


def test_db_urls_choose_the_backend_or_fail_clearly(tmp_path):
    """--db sqlite:///PATH and a bare path are SQLite; other schemes and unreachable databases
    fail at start with one clear line and exit 2, never echoing a password."""
    svc = ServiceProcess(tmp_path / "url", db_url=f"sqlite:///{tmp_path}/via-url/store.db")
    try:
        svc.create_store("via url")
    finally:
        svc.stop()
    assert (tmp_path / "via-url" / "store.db").exists()
    for db, words in (
        ("mysql://root:hunter2@localhost/x", "unknown database URL scheme"),
        (
            f"postgresql://memfs:hunter2@/nodb?host={tmp_path}/no-such-dir",
            "cannot use the PostgreSQL database",
        ),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "memfs", "serve", "--port", "0", "--db", db, "--admin-key", "k" * 16],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
        assert r.returncode == 2, (db, r.stdout, r.stderr)
        assert words in r.stderr and "hunter2" not in r.stderr + r.stdout, r.stderr
        assert "Traceback" not in r.stderr


def test_metrics(service):
    store = service.create_store("m")["id"]
    with service.admin_client() as c:
        c.get(f"/v1/memory_stores/{store}/counter")
        c.get("/v1/memory_store_counters", params={"ids": store})
        c.get("/v1/memory_stores/memstore_nope")
        r = httpx.get(service.base_url + "/metrics")  # no credentials needed
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'memfs_http_requests_total{method="POST",route="/v1/memory_stores",status="200"} 1.0' in text
    assert (
        'memfs_http_requests_total{method="GET",route="/v1/memory_stores/{store_id}",status="404"} 1.0'
        in text
    )
    assert re.search(
        r'memfs_http_request_duration_seconds_count\{method="GET",route="/v1/memory_stores/\{store_id\}/counter"\} 1\.0',
        text,
    )
    assert "memfs_counter_reads_total 2.0" in text
    assert "# TYPE memfs_http_requests_total counter" in text
    # a histogram (p50/p99 by histogram_quantile), and the process collector's figures
    assert "# TYPE memfs_http_request_duration_seconds histogram" in text
    assert re.search(
        r'memfs_http_request_duration_seconds_bucket\{le="\+Inf",method="GET",route="/v1/memory_stores/\{store_id\}/counter"\} 1\.0',
        text,
    )
    assert re.search(r"^process_resident_memory_bytes \d", text, re.M)


def test_health(service):
    """Liveness answers without the database; readiness after a database round trip; neither needs
    credentials or the beta header."""
    live = httpx.get(service.base_url + "/healthz")
    assert live.status_code == 200 and live.json() == {"status": "ok"}
    ready = httpx.get(service.base_url + "/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}
    text = httpx.get(service.base_url + "/metrics").text
    assert 'route="/readyz",status="200"' in text


def test_not_ready_when_the_database_does_not_answer(tmp_path):
    """The same app, in process, over a storage that can no longer reach its database: readiness
    is 503 (without the error's details), liveness still 200."""
    from starlette.testclient import TestClient

    from memfs.service.app import create_app
    from memfs.service.database import open_storage

    storage = open_storage(tmp_path / "store.db")
    with TestClient(create_app(storage, "k")) as c:
        assert c.get("/readyz").status_code == 200
        storage.close()  # every later connection attempt fails, as with an unreachable database
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json() == {
            "status": "unavailable",
            "reason": "the database is not reachable",
        }
        assert c.get("/healthz").status_code == 200


@pytest.mark.timeout(60)
def test_the_retention_job_runs_in_the_service(tmp_path, service_db):
    """`--version-retention-days` (fractions allowed) drives the background job: with a window of
    about 0.1 s and a pass every 0.1 s, old history goes and the feed answers too_old below the
    floor; the current versions stay. Bad values stop the service at start."""
    svc = ServiceProcess(
        tmp_path / "svc", db_url=service_db,
        extra_args=("--version-retention-days", "0.000001", "--retention-interval", "0.1"),
    )  # fmt: skip
    try:
        store = svc.create_store("r")["id"]
        with svc.admin_client() as c:
            base = f"/v1/memory_stores/{store}"
            mid = c.post(base + "/memories", json={"path": "/a", "content": "1"}).json()["id"]
            c.post(f"{base}/memories/{mid}", json={"content": "2"})
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # bounded: the job's first passes
                status = c.get(base + "/changes", params={"since": 0}).json()["status"]
                if status == "too_old":
                    break
                time.sleep(0.1)
            assert status == "too_old"
            assert c.get(base + "/changes", params={"since": 2}).json()["status"] == "ok"
            versions = c.get(base + "/memory_versions").json()["data"]
            assert [v["operation"] for v in versions] == ["modified"]  # the current one is kept
            assert c.get(f"{base}/memories/{mid}").json()["content"] == "2"
    finally:
        svc.stop()
    for bad in (("--version-retention-days", "-1"), ("--retention-interval", "0")):
        r = subprocess.run(
            [sys.executable, "-m", "memfs", "serve", "--port", "0", "--db", str(tmp_path / "x.db"), *bad],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
        assert r.returncode == 2 and "--version-retention-days" in r.stderr, r.stderr


def test_admin_cli(service):
    env = {"MEMFS_ADMIN_KEY": service.admin_key, "ANTHROPIC_BASE_URL": service.base_url}
    r = memfs("store", "create", "Team Notes", "--description", "shared", "--json", env=env)
    assert r.returncode == 0, r.stderr
    store = json.loads(r.stdout)
    assert (store["name"], store["description"]) == ("Team Notes", "shared")
    r = memfs("store", "create", "Other", "--base-url", service.base_url, "--admin-key", service.admin_key)
    assert r.returncode == 0 and r.stdout.strip().startswith("memstore_")
    other = r.stdout.strip()

    r = memfs("store", "list", "--json", env=env)
    assert r.returncode == 0 and {s["id"] for s in json.loads(r.stdout)} == {store["id"], other}
    r = memfs("store", "list", env=env)
    assert store["id"] in r.stdout and "Team Notes" in r.stdout

    r = memfs("session", "create", "--store", store["id"], "--store", f"{other}:read_only", "--json", env=env)
    assert r.returncode == 0, r.stderr
    session = json.loads(r.stdout)
    assert [x["access"] for x in session["resources"]] == ["read_write", "read_only"]
    token = json.loads(base64.urlsafe_b64decode(session["work_secret"]))["sessions_token"]
    with httpx.Client(base_url=service.base_url, headers={"x-api-key": token, **MEMORY}) as agent:
        assert (
            agent.post(f"/v1/memory_stores/{other}/memories", json={"path": "/x", "content": "y"}).status_code
            == 403
        )
    r = memfs("session", "create", "--store", store["id"], env=env)
    assert r.returncode == 0
    assert re.search(r"session_id: sesn_\w+", r.stdout) and re.search(r"work_secret: \S+", r.stdout)

    # clear one-line failures, non-zero exit
    r = memfs("session", "create", "--store", f"{store['id']}:admin", env=env)
    assert r.returncode != 0 and "read_only" in r.stderr
    r = memfs("session", "create", "--store", "memstore_nope", env=env)
    assert r.returncode != 0 and "404" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = memfs("store", "list", env={"MEMFS_ADMIN_KEY": "wrong", "ANTHROPIC_BASE_URL": service.base_url})
    assert r.returncode != 0 and "401" in r.stderr
    r = memfs("store", "list", env={"ANTHROPIC_BASE_URL": service.base_url})
    assert r.returncode != 0 and "admin key" in r.stderr
    r = memfs("store", "list", "--base-url", "http://127.0.0.1:1", "--admin-key", "k")
    assert r.returncode != 0 and "cannot reach" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(60)
def test_the_server_serves_the_service_and_stops_cleanly(tmp_path, service_db):
    """uvicorn (asyncio), the service's one server: the API, a watch woken by a write, health,
    metrics, and a SIGTERM that answers a held watch and exits 0 within two seconds."""
    import threading

    svc = ServiceProcess(tmp_path / "uv", db_url=service_db)
    try:
        store = svc.create_store("uv")["id"]
        with svc.admin_client() as c:
            base = f"/v1/memory_stores/{store}"
            assert c.post(base + "/memories", json={"path": "/a", "content": "1"}).status_code == 200
            assert c.get(base + "/counter").json()["counter"] == 1
            r = c.get("/v1/memory_store_watch", params={"known": f"{store}:0", "wait": "5"})
            assert r.json()["status"] == "changed"
        assert httpx.get(svc.base_url + "/readyz").json() == {"status": "ready"}
        assert "memfs_counter_reads_total" in httpx.get(svc.base_url + "/metrics").text
        out: dict = {}

        def held() -> None:
            with svc.admin_client() as c:
                out["r"] = c.get(
                    "/v1/memory_store_watch", params={"known": f"{store}:1", "wait": "60"}, timeout=70
                )

        t = threading.Thread(target=held)
        t.start()
        time.sleep(0.5)
        started = time.monotonic()
        svc.proc.send_signal(signal.SIGTERM)
        t.join(timeout=10)
        assert svc.proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 2.0
        assert out["r"].json()["status"] == "unchanged"
        assert "GET /v1/memory_stores/" in svc.stderr()  # our request log
    finally:
        svc.stop()
