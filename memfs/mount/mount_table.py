"""The kernel's mount table (/proc/mounts), read the one way: who is mounted where.

The kernel writes each mount as "source mount-point type options 0 0" and escapes, in every
field, the four bytes that would break that line: space, tab, newline and backslash, as octal
`\\ooo` (`\\040`, `\\011`, `\\012`, `\\134`). Nothing else is escaped, and a path is bytes: the
table is read as bytes, unescaped, then decoded the way `os` decodes paths (`os.fsdecode`), so a
mount point compares equal to the `os.path.realpath` of the same path, whatever its name holds.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

MOUNTS = "/proc/mounts"

_ESCAPE = re.compile(rb"\\([0-7]{3})")


def unescape(field: bytes) -> str:
    """One field of the table as the path (or name) it stands for."""
    return os.fsdecode(_ESCAPE.sub(lambda m: bytes([int(m.group(1), 8) & 0xFF]), field))


class MountEntry(NamedTuple):  # not a dataclass: `memfs mount` reads the table before it forks
    source: str
    mount_point: str
    fstype: str


def read_mount_table(table: str = MOUNTS) -> list[MountEntry]:
    """Every mount, in the table's order; [] when the table cannot be read."""
    try:
        with open(table, "rb") as f:
            raw = f.read()
    except OSError:
        return []
    entries = []
    for line in raw.split(b"\n"):
        fields = line.split(b" ")
        if len(fields) >= 3:
            entries.append(MountEntry(unescape(fields[0]), unescape(fields[1]), unescape(fields[2])))
    return entries


def mounted_at(path: str | os.PathLike[str], table: str = MOUNTS) -> bool:
    """Whether anything is mounted exactly at `path` (made absolute, not resolved)."""
    target = os.path.abspath(path)
    return any(e.mount_point == target for e in read_mount_table(table))


def fuse_mount_at(path: str, *, resolve: bool = True, table: str = MOUNTS) -> str | None:
    """The filesystem type of a FUSE mount at path ('fuse.memfs', ...) or None. `resolve=False`:
    path is already resolved (realpath stats the path itself, which a live mount must answer)."""
    real = os.path.realpath(path) if resolve else path
    for e in read_mount_table(table):
        if e.mount_point == real and e.fstype.startswith("fuse"):
            return e.fstype
    return None
