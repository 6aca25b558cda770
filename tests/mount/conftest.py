"""Fixtures for the kernel-free core tests: a temp State and a Filesystem over two stores."""

from __future__ import annotations

import errno
import hashlib
import os

import pytest

from memfs.mount.filesystem import Filesystem
from memfs.mount.replies import ROOT_INO, FsError
from memfs.mount.state import State
from memfs.mount.view_rows import FLAG_UNBORN
from memfs.records import StoreInfo

RW = StoreInfo("memstore_rw", "Work Notes", "work-notes", "read_write")
RO = StoreInfo("memstore_ro", "Team Handbook", "team-handbook", "read_only")


class Clock:
    """Deterministic nanosecond clock: every call is one microsecond later."""

    def __init__(self) -> None:
        self.t = 1_700_000_000_000_000_000

    def __call__(self) -> int:
        self.t += 1000
        return self.t


class Harness:
    """A Filesystem plus path-level helpers (what a shell would do, minus the kernel)."""

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

    # -- path helpers: "/work-notes/a/b.md" style (root-relative) --
    def ino(self, path: str) -> int:
        ino = ROOT_INO
        for part in [p for p in path.split("/") if p]:
            ino = self.fs.lookup(ino, part.encode()).ino
        return ino

    def split(self, path: str) -> tuple[int, bytes]:
        parent, _, name = path.rstrip("/").rpartition("/")
        return self.ino(parent), name.encode()

    def write_file(self, path: str, data: bytes, *, flush: bool = True) -> int:
        parent, name = self.split(path)
        try:
            ino = self.fs.lookup(parent, name).ino
            fh = self.fs.open(ino, os.O_WRONLY | os.O_TRUNC).fh
        except FsError as e:
            if e.errno != errno.ENOENT:
                raise
            reply, attr = self.fs.create(parent, name, 0o644, os.O_WRONLY | os.O_CREAT)
            fh, ino = reply.fh, attr.ino
        try:
            if data:
                self.fs.write(fh, 0, data)
            if flush:
                self.fs.flush(fh)
        finally:
            self.fs.release(fh)
        return ino

    def read_file(self, path: str) -> bytes:
        fh = self.fs.open(self.ino(path), os.O_RDONLY).fh
        try:
            return self.fs.read(fh, 0, 1 << 20)
        finally:
            self.fs.release(fh)

    def mkdir(self, path: str) -> int:
        parent, name = self.split(path)
        return self.fs.mkdir(parent, name, 0o755).ino

    def unlink(self, path: str) -> None:
        self.fs.unlink(*self.split(path))

    def rmdir(self, path: str) -> None:
        self.fs.rmdir(*self.split(path))

    def rename(self, old: str, new: str, flags: int = 0) -> None:
        po, no = self.split(old)
        pn, nn = self.split(new)
        self.fs.rename(po, no, pn, nn, flags)

    def listdir(self, path: str) -> list[str]:
        fh = self.fs.opendir(self.ino(path))
        try:
            return [e.name.decode() for e in self.fs.readdir(fh, 0) if not e.is_dot]
        finally:
            self.fs.releasedir(fh)

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
