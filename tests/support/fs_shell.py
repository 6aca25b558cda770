"""The one path-level helper: what a shell does at a path, minus the kernel.

`FsShell` makes the kernel-free Filesystem's calls (memfs/mount/filesystem.py, the object at
`self.fs`) by root-relative path ("/work-notes/a/b.md": memory /a/b.md of the store whose slug is
work-notes), as the kernel would for `cat`, `echo >`, `mkdir`, `mv`, `rm` and `ls`. The mount rung's
Harness (tests/mount/conftest.py) and the engine rung's EngineMount (tests/support/inprocess.py)
are both one.
"""

from __future__ import annotations

import errno
import os

from memfs.mount.filesystem import Filesystem
from memfs.mount.replies import ROOT_INO, FsError

_READ_AT_MOST = 1 << 25  # more than any file a test writes


class FsShell:
    fs: Filesystem

    def ino(self, path: str) -> int:
        ino = ROOT_INO
        for part in [p for p in path.split("/") if p]:
            ino = self.fs.lookup(ino, part.encode()).ino
        return ino

    def split(self, path: str) -> tuple[int, bytes]:
        """(the parent directory's inode, the last name)."""
        parent, _, name = path.rstrip("/").rpartition("/")
        return self.ino(parent), name.encode()

    def exists(self, path: str) -> bool:
        try:
            self.ino(path)
        except FsError as e:
            if e.errno == errno.ENOENT:
                return False
            raise
        return True

    def _open_write(self, path: str) -> tuple[int, int]:
        parent, name = self.split(path)
        try:
            ino = self.fs.lookup(parent, name).ino
            return self.fs.open(ino, os.O_WRONLY | os.O_TRUNC).fh, ino
        except FsError as e:
            if e.errno != errno.ENOENT:
                raise
        reply, attr = self.fs.create(parent, name, 0o644, os.O_WRONLY | os.O_CREAT)
        return reply.fh, attr.ino

    def open_write(self, path: str) -> int:
        """Open (creating, truncating) for writing; the caller writes and closes (`close`)."""
        return self._open_write(path)[0]

    def close(self, fh: int) -> None:
        """close(2): the kernel's flush, then its release."""
        self.fs.flush(fh)
        self.fs.release(fh)

    def write_file(self, path: str, data: bytes, *, flush: bool = True) -> int:
        """`printf … > path`: open (creating, truncating), write, close; the file's inode. With
        `flush` False the handle is released unflushed (a writer that died)."""
        fh, ino = self._open_write(path)
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
            return self.fs.read(fh, 0, _READ_AT_MOST)
        finally:
            self.fs.release(fh)

    def mkdir(self, path: str) -> int:
        return self.fs.mkdir(*self.split(path), 0o755).ino

    def unlink(self, path: str) -> None:
        self.fs.unlink(*self.split(path))

    def rmdir(self, path: str) -> None:
        self.fs.rmdir(*self.split(path))

    def rename(self, old: str, new: str, flags: int = 0) -> None:
        self.fs.rename(*self.split(old), *self.split(new), flags)

    def listdir(self, path: str) -> list[str]:
        fh = self.fs.opendir(self.ino(path))
        try:
            return [e.name.decode() for e in self.fs.readdir(fh, 0) if not e.is_dot]
        finally:
            self.fs.releasedir(fh)
