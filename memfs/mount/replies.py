"""What the filesystem core's operations answer: the error they raise and the values they return
(plain Python; `fuse_ops.py` turns them into pyfuse3's types)."""

from __future__ import annotations

import os
from dataclasses import dataclass

ROOT_INO = 1
RENAME_NOREPLACE = 1  # linux/fs.h values (what pyfuse3 passes through)
RENAME_EXCHANGE = 2
BLOCK_SIZE = 4096


class FsError(OSError):
    """An operation fails with this errno (the adapter turns it into FUSEError)."""

    def __init__(self, err: int, message: str = ""):
        super().__init__(err, message or os.strerror(err))


@dataclass(slots=True)
class Attr:
    ino: int
    mode: int
    nlink: int
    size: int
    uid: int
    gid: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    # Its directory does not let everyone search it: the kernel must ask again on every path walk
    # (entry timeout 0), since without `default_permissions` it never checks a cached name itself.
    guarded: bool = False

    @property
    def blocks(self) -> int:
        return (self.size + 511) // 512


@dataclass(frozen=True, slots=True)
class DirEntry:
    name: bytes
    attr: Attr
    cursor: int  # pass back as `start` to continue after this entry
    is_dot: bool  # "." / "..": the kernel's lookup count must not be bumped for these


@dataclass(frozen=True, slots=True)
class OpenReply:
    fh: int
    keep_cache: bool
    direct_io: bool = False
    # The kernel may hold the file's old attributes (size, mtime): a change's invalidation has not
    # reached it yet. The adapter tells the kernel to drop them before it answers the open.
    stale_attr: bool = False


@dataclass(frozen=True, slots=True)
class StatFs:
    bsize: int
    blocks: int
    bfree: int
    files: int
    ffree: int
    namemax: int
