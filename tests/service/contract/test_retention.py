"""Version history retention (docs/SEMANTICS.md#d-retention) on every backend, with an injected clock.

The clock is set so that the window's edge falls exactly on one version's `created_at`: what is
older goes, what is at or after the edge stays, whatever the real time is.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memfs.service.retention import Retention
from memfs.service.storage import Actor, VersionFilter

pytestmark = pytest.mark.timeout(60)
A = Actor("api_actor", "apikey_test")
DAYS = 30


def at(ts: str) -> datetime:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def clock_for_edge(created_at: str, days: float = DAYS):
    """A clock whose retention window starts exactly at `created_at`."""
    return lambda: at(created_at) + timedelta(days=days)


def version_ids(storage, sid: str) -> list[str]:
    return [v.id for v in storage.list_versions(sid, filters=VersionFilter(), limit=100, after=None,
                                                 with_content=False).items]  # fmt: skip


def history(storage):
    """A store whose counters 1–6 are old and 7 is recent: the edge is version 7's created_at."""
    sid = storage.create_store("s", "", {}).id
    a = storage.create_memory(sid, "/a", "one", A, max_memories=100)  # 1
    storage.update_memory(sid, a.id, content="two", path=None, expected_sha256=None, actor=A)  # 2
    b = storage.update_memory(sid, a.id, content=None, path="/b", expected_sha256=None, actor=A)  # 3
    d = storage.create_memory(sid, "/d", "gone soon", A, max_memories=100)  # 4
    storage.delete_memory(sid, d.id, expected_sha256=None, actor=A)  # 5
    e = storage.create_memory(sid, "/e", "old but current", A, max_memories=100)  # 6
    b7 = storage.update_memory(sid, a.id, content="three", path=None, expected_sha256=None, actor=A)  # 7
    edge = storage.get_version(sid, b7.memory_version_id).created_at
    return sid, a.id, b, d.id, e, b7, edge


@pytest.mark.parametrize("batch", [200, 1])
def test_old_history_goes_current_versions_stay_and_the_floor_rises(storage, backend, batch):
    sid, mid, b3, did, e6, b7, edge = history(storage)
    assert storage.get_counters([sid])[sid] == 7
    kept_before = version_ids(storage, sid)
    assert len(kept_before) == 7

    job = Retention(backend, DAYS, clock=clock_for_edge(edge), batch=batch)
    # v1, v2 of /b (v3 says where it was at the horizon 6, so it stays); /d's two versions and its
    # tombstone
    assert job.run_once() == 2 + 2 + 1
    assert set(version_ids(storage, sid)) == {
        b3.memory_version_id,
        e6.memory_version_id,
        b7.memory_version_id,
    }
    with backend.read() as tx:
        assert tx.history_floor(sid) == 6
    assert storage.changes_since(sid, 5).too_old
    ch = storage.changes_since(sid, 6)
    assert not ch.too_old and [(c.path, c.previous_path) for c in ch.changes] == [("/b", None)]
    # live memories read as before
    assert storage.get_memory(sid, mid).content == "three"
    assert storage.get_memory(sid, e6.id).content == "old but current"
    assert job.run_once() == 0  # idempotent

    # a rename after the horizon still reports the path the memory had at it
    storage.update_memory(sid, e6.id, content=None, path="/f", expected_sha256=None, actor=A)  # 8
    ch = storage.changes_since(sid, 6)
    assert [(c.path, c.previous_path) for c in ch.changes] == [("/b", None), ("/f", "/e")]


def test_each_live_memorys_current_version_is_kept_whatever_its_age(storage, backend):
    sid, mid, _b3, _did, e6, b7, _edge = history(storage)
    far = Retention(backend, DAYS, clock=lambda: datetime.now(UTC) + timedelta(days=1000))
    far.run_once()
    assert set(version_ids(storage, sid)) == {e6.memory_version_id, b7.memory_version_id}
    with backend.read() as tx:
        assert tx.history_floor(sid) == 7
    assert not storage.changes_since(sid, 7).too_old and storage.changes_since(sid, 6).too_old
    assert [m.path for m in storage.list_memories(sid, path_prefix="/", depth=0, limit=100, after=None,
                                                  with_content=False).items] == ["/b", "/e"]  # fmt: skip


def test_zero_days_keeps_everything_and_recent_history_is_untouched(storage, backend):
    sid, *_rest = history(storage)
    assert Retention(backend, 0, clock=lambda: datetime.now(UTC) + timedelta(days=10_000)).run_once() == 0
    # real time: the window starts 30 days ago, before the first version
    assert Retention(backend, DAYS, clock=lambda: datetime.now(UTC)).run_once() == 0
    assert len(version_ids(storage, sid)) == 7
    with backend.read() as tx:
        assert tx.history_floor(sid) == 0
    assert not storage.changes_since(sid, 0).too_old
