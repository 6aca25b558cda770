"""Close-to-open (SEMANTICS.md#d-when): which of the store's changes a live pull holds back
because a process has the file open. Pure.

A live pull applies what moved on the store as soon as the mount knows of it, busy or not, but a
file that is open (or has unflushed writes) keeps the content it was opened with until it is
closed. `hold_open` gives the store to plan against: the store as it is now, except that every
memory at a busy path — where the baseline had it, where the store has it now, or the file the
view has there — is as the baseline saw it (a memory the baseline did not know is left out). A
memory that would then land on a path such a memory holds, or on a parent or child of one, is
held too, until nothing collides: what the plan makes of it is a state the store was in or could
have been in for those paths, and no view action touches a busy path. The held changes stay
pending: the pull does not record the store's counter, and the next pull (once the file is
closed) reads them again.

For a store with staged changes (its view differs from its baseline), a live pull while the
mount is busy adds the staged paths to the busy ones (`staged_paths`: the view's files whose
memory, path or content differ from the baseline's, and the baseline's paths of the memories the
view moved or deleted). Every staged memory is then planned against the store as the baseline saw
it: the plan leaves its file as it is and pushes it against the baseline (a memory someone else
changed meanwhile is held, and its conflict is settled between commands, as before), while every
other memory of the store moves on as in a clean store. tests/rules/test_holds.py checks both on
random stores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from memfs.records import BaseEntry, LocalFile
from memfs.sync.plan import RemoteEntry


@dataclass(frozen=True)
class Held:
    """What `hold_open` held back: the memories whose change waits (not those that did not
    change), and the busy paths that made it wait (the pull is worth trying again once one of
    them is free)."""

    memories: frozenset[str]
    paths: frozenset[str]


NOTHING_HELD = Held(frozenset(), frozenset())


def _ancestors(path: str) -> list[str]:
    out = []
    i = path.rfind("/")
    while i > 0:
        path = path[:i]
        out.append(path)
        i = path.rfind("/")
    return out


def hold_open(
    remote: Mapping[str, RemoteEntry],
    base_remote: Mapping[str, RemoteEntry],
    busy: frozenset[str] | set[str],
    local_file: Callable[[str], LocalFile | None],
) -> tuple[dict[str, RemoteEntry], Held]:
    """(the store to plan against, what was held). `remote`: the store now, by memory id;
    `base_remote`: the store as the baseline saw it (its entries are used as they are, so a
    narrowed plan finds a held memory unchanged by identity); `busy`: the paths open or with
    unflushed writes; `local_file`: the view's committed file at a path."""
    if not busy:
        return dict(remote), NOTHING_HELD
    out = dict(remote)
    start: dict[str, str] = {}  # memory id -> the busy path that holds it
    for p in busy:
        lf = local_file(p)
        if lf is not None and lf.memory_id is not None:
            start.setdefault(lf.memory_id, p)
    for entries in (base_remote, remote):
        for mid, e in entries.items():
            if e.path in busy:
                start.setdefault(mid, e.path)
    held: set[str] = set()
    todo = set(start)
    while todo:
        for mid in todo:
            held.add(mid)
            b = base_remote.get(mid)
            if b is None:
                out.pop(mid, None)
            else:
                out[mid] = b
        taken = set(busy) | {out[m].path for m in held if m in out}
        above = {a for p in taken for a in _ancestors(p)}
        todo = {
            mid
            for mid, e in out.items()
            if mid not in held
            and (e.path in taken or e.path in above or any(a in taken for a in _ancestors(e.path)))
        }
    changed = frozenset(m for m in held if remote.get(m) != base_remote.get(m))
    paths = frozenset(start[m] for m in changed if m in start)
    if changed and not paths:  # held only for a collision: the busy paths it came from
        paths = frozenset(busy)
    return out, Held(changed, paths)


def staged_paths(local: Mapping[str, LocalFile], base: Mapping[str, BaseEntry]) -> set[str]:
    """The paths a store's staged changes stand on, from one pass over the view (`local`, by path)
    and the baseline (`base`, by path): a file the baseline does not know (a create), one whose
    path or content differs from its memory's baseline (both paths), and the baseline's path of a
    memory the view no longer has (a delete). Empty when the view is the baseline."""
    by_id = {b.memory_id: b for b in base.values()}
    out: set[str] = set()
    kept: set[str] = set()
    for f in local.values():
        b = by_id.get(f.memory_id) if f.memory_id is not None else None
        if b is None:
            out.add(f.path)
            continue
        kept.add(b.memory_id)
        if b.path != f.path or b.sha != f.sha:
            out.update((f.path, b.path))
    out.update(b.path for b in base.values() if b.memory_id not in kept)
    return out
