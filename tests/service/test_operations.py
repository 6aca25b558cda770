"""Operations (docs/OPERATIONS.md): the image's entry command on a PostgreSQL URL, and
the backups the document tells operators to take, each restored and served again."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.api import Api
from tests.support.service import ServiceProcess

REPO = Path(__file__).resolve().parents[2]
ADMIN_KEY = "ops-admin-key-0123456789"


def entry_command() -> list[str]:
    """docker/serve.Dockerfile's ENTRYPOINT, as the image runs it."""
    text = (REPO / "docker" / "serve.Dockerfile").read_text()
    m = re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M)
    assert m, "serve.Dockerfile has no exec-form ENTRYPOINT"
    return json.loads(m.group(1))


def run_entry(tmp: Path, db: str, *extra: str) -> tuple[subprocess.Popen, str]:
    argv = entry_command()
    assert argv[:2] == ["memfs", "serve"] and "--db" not in argv  # the database comes from MEMFS_DB
    # Outside Docker: this venv's memfs, on loopback and a free port (later flags win in argparse).
    cmd = [sys.executable, "-m", "memfs", *argv[1:], "--host", "127.0.0.1", "--port", "0", *extra]
    env = {**os.environ, "MEMFS_DB": db, "MEMFS_ADMIN_KEY": ADMIN_KEY}
    out = tmp / "entry.stdout"
    with open(out, "wb") as o, open(tmp / "entry.stderr", "wb") as e:
        proc = subprocess.Popen(cmd, stdout=o, stderr=e, env=env, cwd=tmp)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        m = re.search(r"listening on (http://\S+)", out.read_text())
        if m:
            return proc, m.group(1)
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise AssertionError("the entry command did not start:\n" + (tmp / "entry.stderr").read_text())


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_the_image_entry_command_serves_a_postgresql_url_from_memfs_db(tmp_path, pg_cluster):
    url = pg_cluster.create_database("entry")
    proc, base = run_entry(tmp_path, url)
    try:
        assert httpx.get(base + "/readyz", timeout=10).json() == {"status": "ready"}
        api = Api(base, ADMIN_KEY)
        store = api.create_store("from the image's command")
        api.create(store, "/a.md", "on postgresql\n")
        api.close()
    finally:
        stop(proc)
    # It really was that database: a second service on the URL sees the store.
    svc = ServiceProcess(tmp_path / "again", admin_key=ADMIN_KEY, db_url=url)
    try:
        api = Api(svc.base_url, ADMIN_KEY)
        assert api.contents(store) == {"/a.md": "on postgresql\n"}
        api.close()
    finally:
        svc.stop()
        pg_cluster.drop_database(url)


def write_while(api: Api, store: str, stop_at: threading.Event, acked: list[str]) -> None:
    i = 0
    while not stop_at.is_set() and i < 2000:  # bounded
        api.create(store, f"/during/{i:04d}.md", f"written during the backup {i}\n")
        acked.append(f"/during/{i:04d}.md")
        i += 1


def check_restored(
    tmp: Path, name: str, db: str, store: str, before: dict[str, str], during_max: int
) -> None:
    svc = ServiceProcess(tmp / name, admin_key=ADMIN_KEY, db_url=db)
    try:
        api = Api(svc.base_url, ADMIN_KEY)
        got = api.contents(store)
        api.close()
    finally:
        svc.stop()
    # Everything acknowledged before the backup began is in it, whole; of the writes during it, a
    # prefix (one consistent moment), each whole.
    assert {p: got[p] for p in before} == before
    during = sorted(p for p in got if p.startswith("/during/"))
    assert during == [f"/during/{i:04d}.md" for i in range(len(during))] and len(during) <= during_max
    for p in during:
        assert got[p] == f"written during the backup {int(p[8:12])}\n"


@pytest.mark.timeout(120)
def test_sqlite_online_backups_while_the_service_writes(tmp_path):
    db = tmp_path / "service" / "data" / "store.db"
    svc = ServiceProcess(tmp_path / "service", admin_key=ADMIN_KEY, db_path=db)
    try:
        api = Api(svc.base_url, ADMIN_KEY)
        store = api.create_store("Backed up")
        before = {f"/before/{i}.md": f"before {i}\n" for i in range(30)}
        for p, c in before.items():
            api.create(store, p, c)
        stop_at, acked = threading.Event(), []
        writer = threading.Thread(target=write_while, args=(api, store, stop_at, acked))
        writer.start()
        try:
            while len(acked) < 5:
                time.sleep(0.01)
            # 1. the sqlite3 shell's online backup (docs/OPERATIONS.md)
            cli = tmp_path / "backup-cli.db"
            subprocess.run(
                ["sqlite3", str(db), f".backup '{cli}'"], check=True, timeout=60, capture_output=True
            )
            # 2. Python's, for images without the sqlite3 shell
            py = tmp_path / "backup-py.db"
            subprocess.run([sys.executable, "-c",
                            "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); "
                            "s.backup(d); d.close(); s.close()", str(db), str(py)],
                           check=True, timeout=60)  # fmt: skip
        finally:
            stop_at.set()
            writer.join(30)
        api.close()
    finally:
        svc.stop()
    for name, path in (("from-cli", cli), ("from-python", py)):
        assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone() == ("ok",)
        check_restored(tmp_path, name, str(path), store, before, len(acked))


@pytest.mark.timeout(120)
def test_pg_dump_and_restore(tmp_path, pg_cluster):
    url = pg_cluster.create_database("dump")
    restored = pg_cluster.create_database("restored")
    svc = ServiceProcess(tmp_path / "service", admin_key=ADMIN_KEY, db_url=url)
    dump = pg_cluster.dir / "memfs.dump"  # the cluster's own directory: its user writes there
    try:
        api = Api(svc.base_url, ADMIN_KEY)
        store = api.create_store("Dumped")
        before = {f"/before/{i}.md": f"before {i}\n" for i in range(30)}
        for p, c in before.items():
            api.create(store, p, c)
        stop_at, acked = threading.Event(), []
        writer = threading.Thread(target=write_while, args=(api, store, stop_at, acked))
        writer.start()
        try:
            while len(acked) < 5:
                time.sleep(0.01)
            pg_cluster._run("pg_dump", "--format=custom", "--file", str(dump), "--dbname", url)
        finally:
            stop_at.set()
            writer.join(30)
        api.close()
    finally:
        svc.stop()
    try:
        pg_cluster._run("pg_restore", "--no-owner", "--dbname", restored, str(dump))
        check_restored(tmp_path, "restored", restored, store, before, len(acked))
    finally:
        pg_cluster.drop_database(url)
        pg_cluster.drop_database(restored)
