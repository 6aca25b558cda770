"""Fixtures for the kernel-free core tests: a temp State and a Filesystem over two stores."""

from __future__ import annotations

import hashlib

import pytest

from memfs.mount.filesystem import Filesystem
from memfs.mount.replies import FsError
from memfs.mount.state import State
from memfs.mount.view_rows import FLAG_UNBORN
from memfs.records import StoreInfo
from tests.support.fs_shell import FsShell

RW = StoreInfo("memstore_rw", "Work Notes", "work-notes", "read_write")
RO = StoreInfo("memstore_ro", "Team Handbook", "team-handbook", "read_only")


class Clock:
    """Deterministic nanosecond clock: every call is one microsecond later."""

    def __init__(self) -> None:
        self.t = 1_700_000_000_000_000_000

    def __call__(self) -> int:
        self.t += 1000
        return self.t


class Harness(FsShell):
    """A Filesystem over a temp State, and the path-level helpers (tests/support/fs_shell.py)."""

    def __init__(self, state_dir, *, max_files=2000, max_bytes=32 * 1024 * 1024, stores=(RW, RO)):
        self.state_dir = state_dir
        self.stores = list(stores)
        self.limits = dict(max_files=max_files, max_bytes=max_bytes)
        self.state = State(state_dir)
        self.clock = Clock()
        self.fs = Filesystem(self.state, self.stores, uid=1234, gid=5678, now=self.clock, **self.limits)

    def reopen(self) -> Harness:
        """A fresh State and Filesystem on the same dir (what a restart sees)."""
        return Harness(self.state_dir, stores=self.stores, **self.limits)

    def assert_staged(self) -> None:
        """A fresh State on the same dir describes exactly the current view (files and dirs)."""
        fresh = State(self.state_dir)
        try:
            for info in self.stores:
                sid = info.store_id
                # A file whose creating writer has not closed it is staged flagged (a restart
                # drops it) and is not in local_view(): nothing of it may be pushed yet.
                rows = {p: r for p, r in fresh.load_files(sid).items() if not r.flags & FLAG_UNBORN}
                staged = {p: (r.memory_id, r.sha, r.size, r.bad_utf8) for p, r in rows.items()}
                view = {
                    p: (f.memory_id, f.sha, f.size, f.bad_utf8) for p, f in self.fs.local_view(sid).items()
                }
                assert staged == view, sid
                assert set(fresh.load_dirs(sid)) == self.fs.dir_paths(sid), sid
                for p, r in rows.items():
                    assert hashlib.sha256(fresh.get_blob(r.sha)).hexdigest() == r.sha, (sid, p)
        finally:
            fresh.close()

    def close(self) -> None:
        self.state.close()


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path / "state")
    yield harness
    harness.close()


def errno_of(fn, *args, **kwargs) -> int | None:
    try:
        fn(*args, **kwargs)
    except FsError as e:
        return e.errno
    return None


from tests.support.mounts import devmounts  # noqa: E402,F401  (fixture re-export)
