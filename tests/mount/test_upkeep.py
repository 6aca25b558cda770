"""The state dir's upkeep (memfs/mount/upkeep.py), on a real state dir: the WAL copied into
state.db at once and then every interval, and the sweep of unreferenced blobs, which keeps what
the view still uses and waits while the sync is busy. (It was the sync engine's timer's job.)"""

from __future__ import annotations

import os

import pytest
import trio

from memfs.mount.state import State
from memfs.mount.upkeep import StateUpkeep

pytestmark = [pytest.mark.trio, pytest.mark.timeout(60)]


@pytest.fixture
def st(tmp_path):
    s = State(tmp_path / "state")
    yield s
    s.close()


async def until(pred, timeout: float = 10.0) -> bool:
    with trio.move_on_after(timeout):
        while not pred():
            await trio.sleep(0.02)
        return True
    return False


def _fill_wal(st: State) -> int:
    """Commit 20 blobs of 20 KB (into the WAL: no commit checkpoints); the database file's size before."""
    before = st.db_path.stat().st_size
    with st.transaction():
        for _ in range(20):
            st.put_blob(os.urandom(20_000))
    return before


async def test_the_wal_is_copied_into_the_database_at_once_and_then_every_interval(st):
    """First right after the mount (a first download's content is all in the WAL), then every
    interval, on a long interval as on a short one."""
    before = _fill_wal(st)
    assert st.db_path.stat().st_size == before  # all in the WAL
    upkeep = StateUpkeep(st, set, lambda: False, checkpoint_interval=0.3, gc_interval=3600)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(upkeep.run)
        assert await until(lambda: st.db_path.stat().st_size >= before + 20 * 20_000)
        again = _fill_wal(st)
        assert await until(lambda: st.db_path.stat().st_size >= again + 20 * 20_000)
        nursery.cancel_scope.cancel()
    quiet = StateUpkeep(st, set, lambda: False, checkpoint_interval=3600, gc_interval=3600)
    before = _fill_wal(st)
    assert st.db_path.stat().st_size == before
    async with trio.open_nursery() as nursery:
        nursery.start_soon(quiet.run)
        assert await until(lambda: st.db_path.stat().st_size >= before + 20 * 20_000)  # at once
        later = _fill_wal(st)
        await trio.sleep(0.5)
        assert st.db_path.stat().st_size == later  # the next one is an interval away
        nursery.cancel_scope.cancel()


async def test_the_sweep_keeps_what_is_referenced_or_in_use_and_waits_while_the_sync_is_busy(st):
    keep_f = st.put_blob(b"file")
    keep_b = st.put_blob(b"base")
    in_use = st.put_blob(b"held by an open handle")
    gone = st.put_blob(b"garbage")
    st.upsert_file("s", "/f", None, keep_f, 4, 1)
    st.set_baseline("s", "mem_1", "/b", keep_b, 4)
    busy = True  # a tick or a push under way: its fetched content has no row yet
    asked: list[bool] = []

    def is_busy() -> bool:
        asked.append(busy)
        return busy

    upkeep = StateUpkeep(st, lambda: {in_use}, is_busy, checkpoint_interval=3600, gc_interval=1.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(upkeep.run)
        assert await until(lambda: len(asked) >= 5)  # due, and asked again while busy
        assert st.has_blob(gone) and upkeep.swept == 0
        busy = False
        assert await until(lambda: not st.has_blob(gone))
        assert st.has_blob(keep_f) and st.has_blob(keep_b) and st.has_blob(in_use)
        assert upkeep.swept == 1
        swept_at = len(asked)
        await trio.sleep(0.3)
        assert len(asked) == swept_at  # the next sweep is an interval (1 s) away
        nursery.cancel_scope.cancel()
