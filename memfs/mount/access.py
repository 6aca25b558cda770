"""Who may do what: the kernel's mode-bit check (`generic_permission`), as a plain function.

memfs mounts without `default_permissions` so that a read_only store can answer EROFS to every
user (with it, the kernel checks the 0444 mode first and a non-root owner gets EACCES; see
docs/SEMANTICS.md, "Permissions"). The mount therefore checks modes itself, with the rules
the kernel would have applied.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

R, W, X = os.R_OK, os.W_OK, os.X_OK  # 4, 2, 1: the bits of one rwx triplet


def _proc_groups(pid: int) -> frozenset[int]:
    """Supplementary groups of `pid` (FUSE tells only the primary gid); empty if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Groups:"):
                    return frozenset(int(g) for g in line.split()[1:])
    except (OSError, ValueError):
        pass
    return frozenset()


@dataclass(slots=True)
class Caller:
    """The process behind one request. Supplementary groups are read only when a check needs them."""

    uid: int
    gid: int
    pid: int = 0
    _groups: frozenset[int] | None = field(default=None, repr=False)
    read_groups: Callable[[int], frozenset[int]] = field(default=_proc_groups, repr=False)

    @property
    def root(self) -> bool:
        return self.uid == 0

    def in_group(self, gid: int) -> bool:
        if gid == self.gid:
            return True
        if self._groups is None:
            self._groups = self.read_groups(self.pid) if self.pid else frozenset()
        return gid in self._groups


def allowed(mode: int, uid: int, gid: int, caller: Caller, want: int) -> bool:
    """Whether `caller` may `want` (R|W|X bits) an inode of `mode` owned by uid:gid.

    Root may read and write anything, search any directory, and execute a file with any x bit
    (CAP_DAC_OVERRIDE). Everyone else gets the owner's, the group's or the others' bits: exactly
    one triplet, chosen in that order, as in Linux."""
    want &= R | W | X
    if caller.root:
        if want & X and not stat.S_ISDIR(mode) and not mode & 0o111:
            return False
        return True
    if caller.uid == uid:
        bits = (mode >> 6) & 7
    elif (mode >> 3) & 7 == mode & 7 or not caller.in_group(gid):
        bits = mode & 7  # equal group and other bits: no need to read the caller's groups
    else:
        bits = (mode >> 3) & 7
    return want & bits == want


def may_change_owner_fields(uid: int, caller: Caller) -> bool:
    """chmod, and setting explicit times: the owner or root only (else EPERM)."""
    return caller.root or caller.uid == uid


def sticky_allows(dir_mode: int, owner_uid: int, caller: Caller) -> bool:
    """In a sticky directory only root or the owner (of the directory or the entry) may remove or
    rename an entry. Every memfs inode has the same owner, so that is one comparison."""
    return not dir_mode & stat.S_ISVTX or caller.root or caller.uid == owner_uid


def open_wants(flags: int) -> int:
    """The access an open(2) with `flags` asks for."""
    acc = flags & os.O_ACCMODE
    want = R if acc == os.O_RDONLY else W if acc == os.O_WRONLY else R | W
    if flags & os.O_TRUNC:
        want |= W
    return want
