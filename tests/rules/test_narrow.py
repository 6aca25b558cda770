"""A clean store's pull planned on the memories the store changed (memfs/sync/narrow.py) gives the
whole store's plan, on random stores and random remote changes: edits, deletes, creates, moves
onto a path another memory leaves or holds (a swap, a clash), under a file or where a directory
is, and through a temporary path. Pure: no I/O."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfs.records import BaseEntry, LocalFile
from memfs.sync.narrow import MOST, narrowed, narrowed_inputs
from memfs.sync.plan import Inputs, RemoteEntry, plan_store, temp_path
from memfs.sync.remote import prefix_sizes

pytestmark = pytest.mark.timeout(120)

PATHS = ["/a", "/b", "/a/x", "/a/y", "/c/x", "/c/d/y", "/d", "/c/d", "/e.md", "/f/e.md"]


def _fits(paths: set[str], path: str) -> bool:
    """`path` can be a file beside `paths`: none of them is it, under it or above it."""
    return all(p != path and not p.startswith(path + "/") and not path.startswith(p + "/") for p in paths)


@st.composite
def clean_stores(draw):
    """(base by path, the base as the store by id, the store now): unchanged entries are the
    base's own objects, as the reader keeps them."""
    base: dict[str, BaseEntry] = {}
    for i, path in enumerate(draw(st.lists(st.sampled_from(PATHS), unique=True, max_size=7))):
        if _fits(set(base), path):
            base[path] = BaseEntry(f"m{i}", path, f"s{i}", i + 1)
    base_remote = {b.memory_id: RemoteEntry(b.memory_id, b.path, b.sha, b.size) for b in base.values()}
    remote = dict(base_remote)
    for k, op in enumerate(
        draw(st.lists(st.sampled_from(["edit", "delete", "create", "move", "temp"]), max_size=4))
    ):
        ids = sorted(remote)
        if op == "create":
            path = draw(st.sampled_from(PATHS))
            remote[f"n{k}"] = RemoteEntry(f"n{k}", path, f"new{k}", 3)
            continue
        if not ids:
            continue
        m = draw(st.sampled_from(ids))
        r = remote[m]
        if op == "edit":
            remote[m] = RemoteEntry(m, r.path, f"e{k}", r.size + 1)
        elif op == "delete":
            del remote[m]
        elif op == "move":
            remote[m] = RemoteEntry(m, draw(st.sampled_from(PATHS)), r.sha, r.size)
        else:
            remote[m] = RemoteEntry(m, temp_path(m), r.sha, r.size)
    return base, base_remote, remote


def _whole(base, remote, **kw) -> Inputs:
    local = {b.path: LocalFile(b.path, b.memory_id, b.sha, b.size) for b in base.values()}
    return Inputs(
        base=base,
        local=local,
        remote=remote,
        remote_order=tuple(sorted(remote, key=lambda m: remote[m].path)),
        **kw,
    )


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    clean_stores(),
    st.sampled_from(["read_write", "read_only"]),
    st.sampled_from(["enabled", "log_only"]),
    st.integers(1, 12),
)
def test_the_narrowed_plan_is_the_whole_stores_plan(store, access, deletions, max_files):
    base, base_remote, remote = store
    kw = {"access": access, "deletions": deletions, "max_files": max_files, "max_bytes": 1000}
    some = narrowed_inputs(
        base,
        base_remote,
        prefix_sizes(base),
        remote,
        lambda path: (
            LocalFile(path, base[path].memory_id, base[path].sha, base[path].size) if path in base else None
        ),
        **kw,
    )
    if some is None:
        return
    assert plan_store(some) == plan_store(_whole(base, remote, **kw))


def test_what_is_planned_whole():
    base = {f"/f{i}": BaseEntry(f"m{i}", f"/f{i}", "s", 1) for i in range(200)}
    base["/d/x"] = BaseEntry("mx", "/d/x", "s", 1)
    base_remote = {b.memory_id: RemoteEntry(b.memory_id, b.path, b.sha, b.size) for b in base.values()}
    dirs = prefix_sizes(base)
    kw = {"max_files": 1000, "max_bytes": 10_000}

    def edit(*ids: str, **moves: str) -> dict[str, RemoteEntry]:
        remote = dict(base_remote)
        for m in ids:
            remote[m] = RemoteEntry(m, remote[m].path, "new", 2)
        for m, path in moves.items():
            remote[m] = RemoteEntry(m, path, "s", 1)
        return remote

    assert narrowed(base, base_remote, dirs, dict(base_remote), **kw) == set()  # nothing changed
    assert narrowed(base, base_remote, dirs, edit("m3"), **kw) == {"m3"}
    assert narrowed(base, base_remote, dirs, edit(m3="/f4"), **kw) == {"m3", "m4"}  # onto another's path
    assert narrowed(base, base_remote, dirs, edit(m3="/f4/z"), **kw) == {"m3", "m4"}  # under a file
    assert narrowed(base, base_remote, dirs, edit(m3="/d"), **kw) is None  # where a directory is
    assert narrowed(base, base_remote, dirs, edit(*[f"m{i}" for i in range(MOST + 1)]), **kw) is None
    assert narrowed(base, base_remote, dirs, edit("m3"), max_files=200, max_bytes=10_000) is None  # over
    gone = dict(base_remote)
    del gone["m7"]
    assert narrowed(base, base_remote, dirs, gone, **kw) == {"m7"}
