"""A mount whose applied counter fell below the store's history floor (docs/SEMANTICS.md#d-retention, #d-tick).

The service runs as usual; the retention job runs against the same SQLite file from this test,
with a clock 1,000 days ahead (the real job, an injected clock: no waiting). The mount's next
tick is told `too_old` by the changes feed, lists the store instead, and ends equal to it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from memfs.service.retention import Retention
from memfs.service.sqlite_backend import SqliteBackend

pytestmark = pytest.mark.timeout(120)
RW = "work-notes"


def local_tree(root) -> dict[str, str]:
    return {
        "/" + str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in (".anthropic-memory-store", ".sync-notices.log")
    }


def test_a_mount_below_the_history_floor_lists_and_ends_equal_to_the_store(world, api, service):
    mounted = world.sandbox("polling")
    mounted.mount("--live", "off")  # live mode would pull the remote edits before the floor moves
    mounted.sync()
    top = mounted.root / RW
    assert local_tree(top) == api.contents(world.rw)
    with service.admin_client() as c:
        applied = c.get(f"/v1/memory_stores/{world.rw}/counter").json()["counter"]

    # Remote edits of every kind while the mount is idle: rename, delete, modify, create.
    mems = api.memories(world.rw)
    api.update(world.rw, mems["/profile.md"]["id"], path="/me/profile.md")
    api.delete(world.rw, mems["/empty.md"]["id"])
    api.update(world.rw, mems["/notes/todo.md"]["id"], content="- nothing left\n")
    api.create(world.rw, "/new.md", "made remotely\n")

    backend = SqliteBackend(service.db_path)
    try:
        job = Retention(backend, 30, clock=lambda: datetime.now(UTC) + timedelta(days=1000))
        assert job.run_once() > 0
    finally:
        backend.close()
    with service.admin_client() as c:
        r = c.get(f"/v1/memory_stores/{world.rw}/changes", params={"since": applied})
    assert r.status_code == 200 and r.json()["status"] == "too_old" and r.json()["changes"] == []

    stats = mounted.sync()
    assert stats["requests"] >= 3, stats  # counters, the refused feed, then a listing (and fetches)
    store = api.contents(world.rw)
    assert local_tree(top) == store
    assert store["/me/profile.md"].startswith("name: agent") and "/empty.md" not in store
    assert (top / "notes" / "todo.md").read_text() == "- nothing left\n"
    # and the next tick is an idle one again, on the feed from the new counter
    assert mounted.sync()["requests"] == 1
    with service.admin_client() as c:
        now = c.get(f"/v1/memory_stores/{world.rw}/counter").json()["counter"]
        assert c.get(f"/v1/memory_stores/{world.rw}/changes", params={"since": now}).json()["status"] == "ok"
    assert httpx.get(service.base_url + "/readyz").status_code == 200
