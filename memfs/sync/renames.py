"""Ordering renames so that none lands on a path still in use (pure; the planner's helper).

A sync applies a batch of renames, in the view and on the store. Memories are files and a
directory is only a path prefix, so a rename must wait until nothing is at its destination or
around it (a file `/a` and a file `/a/b` cannot both be). `schedule` orders the moves into waves of
independent ones, and sends a cycle (a swap) or a move into its own subtree through a temporary
path first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# A rename cycle (a swap) goes through a temporary path, on the store and in the view. Seeing it
# again later (an interrupted swap) means "our own move", never a remote/local rename.
TEMP_PREFIX = "/.memfs-tmp-"


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(2, len(parts))]


def _nested(a: str, b: str) -> bool:
    return a.startswith(b + "/") or b.startswith(a + "/")


_NOT_IN_TEMP = re.compile(r"[^A-Za-z0-9_-]")


def temp_path(memory_id: str) -> str:
    return TEMP_PREFIX + (_NOT_IN_TEMP.sub("_", memory_id)[:200] or "x")


def is_temp_path(path: str, memory_id: str) -> bool:
    """Whether `path` is the memory's temporary path (a rename through it was cut short). Every
    memory is asked twice per plan: a path outside TEMP_PREFIX is answered without building it
    (a 2,000-file plan spent a quarter of its time in `temp_path`)."""
    return path.startswith(TEMP_PREFIX) and path == temp_path(memory_id)


class PathsInUse:
    """Files in use (path -> owners), answering "who is at or around path P" (same path, an
    ancestor that is a file, or files below P). Two owners may claim one path while a decision
    is still open (a local rename onto a path the store now uses)."""

    def __init__(self, items: Iterable[tuple[str, str]] = ()):
        self.files: dict[str, set[str]] = {}
        self.under: dict[str, set[str]] = {}
        for path, owner in items:
            self.add(path, owner)

    def add(self, path: str, owner: str) -> None:
        self.files.setdefault(path, set()).add(owner)
        for a in _ancestors(path):
            self.under.setdefault(a, set()).add(owner)

    def discard(self, path: str, owner: str) -> None:
        self.files.get(path, set()).discard(owner)
        for a in _ancestors(path):
            self.under.get(a, set()).discard(owner)

    def blockers(self, path: str, me: str | None) -> set[str]:
        found = set(self.under.get(path, ()))
        for p in [path, *_ancestors(path)]:
            found |= self.files.get(p, set())
        found.discard(me)
        return found

    def free_temp(self, owner: str) -> str:
        base = temp_path(owner)
        path, n = base, 1
        while self.blockers(path, None):
            n += 1
            path = f"{base}-{n}"
        return path


def schedule(moves: list[tuple[str, str, str]], tree: PathsInUse) -> list[list[tuple[str, str, str]]]:
    """Order renames (owner, src, dst) into waves of independent moves: a move waits until nothing
    is at or around its destination. A cycle (a swap), or a move into its own subtree, first goes
    through a temporary path. `tree` holds every path in use and is updated as moves happen."""
    pending = sorted(moves)
    hopped: set[str] = set()
    waves: list[list[tuple[str, str, str]]] = []
    while pending:
        ready = [mv for mv in pending if not _nested(mv[1], mv[2]) and not tree.blockers(mv[2], mv[0])]
        if ready:
            pending = [mv for mv in pending if mv not in ready]
        else:
            i = next((i for i, mv in enumerate(pending) if mv[0] not in hopped), None)
            if i is None:  # blocked by something that never moves: cannot happen by construction
                waves.append(pending)
                break
            owner, src, dst = pending[i]
            tmp = tree.free_temp(owner)
            hopped.add(owner)
            pending[i] = (owner, tmp, dst)
            ready = [(owner, src, tmp)]
        for owner, src, dst in ready:
            tree.discard(src, owner)
            tree.add(dst, owner)
        waves.append(ready)
    return waves
