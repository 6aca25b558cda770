"""A pull of a few remote changes into a clean store, planned on the memories they name only
(SEMANTICS.md#d-tick). Pure: no I/O.

The plan (plan.py) merges every memory of a store: ~30 ms of the daemon's CPU for one changed
memory of a 2,000-memory store, on the thread that serves FUSE, paid by every mount that a write
wakes (through a relay, 20 on one host at once: SEMANTICS.md#d-relay). When the view equals the
baseline (nothing staged), a memory the store did not change either has base == remote == local:
its merge decides nothing, and it matters to the others only through the paths it holds. So the
plan of the changed memories, plus the unchanged ones whose paths a changed one arrives on (the
same path, or a file where it needs a directory), is the whole store's plan. `narrowed` says
which memories those are, or None where that argument does not hold and the whole store is
planned:
- skipped, refused or held-delete entries (their bookkeeping is store-wide);
- a store over --max-files/--max-bytes (SEMANTICS.md#d-over-limits cuts in list order);
- a changed memory arriving where the baseline has a directory (a file/directory clash);
- many changes (a listing or snapshot builds every entry anew: nothing to gain).
tests/rules/test_narrow.py checks the equality against the whole plan on random stores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from memfs.protocol import Access, Deletions
from memfs.records import BaseEntry, LocalFile
from memfs.sync.plan import DropBase, Inputs, KeepLocal, Plan, RemoteEntry, SetBase

MOST = 64  # changed memories past which the whole store is planned


def narrowed(
    base: Mapping[str, BaseEntry],
    base_remote: Mapping[str, RemoteEntry],
    dirs: Mapping[str, int],
    remote: Mapping[str, RemoteEntry],
    *,
    max_files: int,
    max_bytes: int,
) -> set[str] | None:
    """The memory ids a clean store's plan needs, or None (plan the whole store).

    `base`: the baseline by path; `base_remote`: the same by id, as `RemoteEntry` (the reader's
    `Baseline.remote`); `dirs`: every directory prefix of the baseline ("/d/", the reader's
    `Baseline.sizes`); `remote`: the store now, whose unchanged entries are `base_remote`'s own
    objects (the reader keeps them), so a change is found by identity."""
    changed = {m for m, e in remote.items() if base_remote.get(m) is not e}
    if len(remote) != len(base_remote) or changed:
        changed |= {m for m in base_remote if m not in remote}
    if len(changed) > MOST:
        return None
    if len(remote) > max_files or sum(e.size for e in remote.values()) > max_bytes:
        return None
    ids = set(changed)
    for m in changed:
        r = remote.get(m)
        b = base_remote.get(m)
        if r is None or (b is not None and b.path == r.path):
            continue  # deleted, or changed in place: the path it holds is its own
        if r.path + "/" in dirs:
            return None  # a file where the baseline has a directory
        if (other := base.get(r.path)) is not None:
            ids.add(other.memory_id)
        parent = r.path.rfind("/")
        while parent > 0:  # a baseline file where this one needs a directory
            if (other := base.get(r.path[:parent])) is not None:
                ids.add(other.memory_id)
            parent = r.path.rfind("/", 0, parent)
    return ids


def narrowed_inputs(
    base: Mapping[str, BaseEntry],
    base_remote: Mapping[str, RemoteEntry],
    dirs: Mapping[str, int],
    remote: Mapping[str, RemoteEntry],
    local_file: Callable[[str], LocalFile | None],
    *,
    access: Access,
    deletions: Deletions,
    max_files: int,
    max_bytes: int,
) -> Inputs | None:
    """The plan's inputs for the memories `narrowed` names (`local_file`: the view's file at a
    path), or None. The caller knows the store has no skipped, refused or held-delete entry."""
    ids = narrowed(base, base_remote, dirs, remote, max_files=max_files, max_bytes=max_bytes)
    if ids is None:
        return None
    some_base = {}
    for m in ids:
        if (r := base_remote.get(m)) is not None and (b := base.get(r.path)) is not None:
            some_base[b.path] = b
    local = {p: f for p in some_base if (f := local_file(p)) is not None}
    some_remote = {m: remote[m] for m in ids if m in remote}
    return Inputs(
        base=some_base,
        local=local,
        remote=some_remote,
        remote_order=tuple(sorted(some_remote, key=lambda m: some_remote[m].path)),
        access=access,
        deletions=deletions,
        max_files=max_files,
        max_bytes=max_bytes,
        remote_changed=True,
    )


def leaves_view_as_base(plan: Plan) -> bool:
    """The plan places the store's memories in the view and the baseline alike (no kept copy,
    no skipped memory, no other bookkeeping): after it a clean store is clean still, and its
    cached baseline moves by the plan's SetBase and DropBase alone (store_pull.py)."""
    return all(not isinstance(a, KeepLocal) for a in plan.view) and all(
        isinstance(a, (SetBase, DropBase)) for a in plan.bookkeeping
    )
