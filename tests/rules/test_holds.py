"""Close-to-open (memfs/sync/holds.py): a live pull holds back the store's changes at the paths a
process has open, and whatever would collide with them; the plan it makes then never touches an
open path. A busy pull of a store with staged changes holds its staged paths too: the plan touches
none of them, and every other memory moves on. Pure: no I/O."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfs.records import BaseEntry, LocalFile
from memfs.sync.holds import NOTHING_HELD, hold_open, staged_paths
from memfs.sync.plan import Inputs, RemoteEntry, plan_store
from tests.rules.test_narrow import PATHS, _fits, clean_stores

pytestmark = pytest.mark.timeout(120)


def _local(base: dict[str, BaseEntry]):
    return lambda path: (
        LocalFile(path, base[path].memory_id, base[path].sha, base[path].size) if path in base else None
    )


def _touched(plan) -> set[str]:
    return {
        p
        for a in plan.view
        for p in (getattr(a, "path", None), getattr(a, "old_path", None), getattr(a, "new_path", None))
        if p
    }


def _plan(base, remote, local=None):
    """The plan of a store whose view is `local` (default: the baseline's, nothing staged)."""
    if local is None:
        local = {b.path: LocalFile(b.path, b.memory_id, b.sha, b.size) for b in base.values()}
    return plan_store(
        Inputs(
            base=base,
            local=local,
            remote=remote,
            remote_order=tuple(sorted(remote, key=lambda m: remote[m].path)),
            max_files=100,
            max_bytes=100_000,
        )
    )


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clean_stores(), st.sets(st.sampled_from(PATHS), max_size=3))
def test_the_plan_never_touches_an_open_file_and_holds_only_what_it_must(store, busy):
    base, base_remote, remote = store
    held_remote, held = hold_open(remote, base_remote, frozenset(busy), _local(base))
    assert not _touched(_plan(base, held_remote)) & busy
    for mid, e in held_remote.items():  # every entry is the store's now, or the baseline's
        assert e == remote.get(mid) or (mid in held.memories or e == base_remote.get(mid))
    for mid in set(remote) - held.memories:  # what is not held is the store's as it is now
        if remote.get(mid) != base_remote.get(mid):
            assert held_remote.get(mid) == remote[mid]
    assert held.paths <= busy
    if not busy:
        assert held_remote == remote and held == NOTHING_HELD


def test_an_open_file_keeps_its_content_and_the_rest_moves_on():
    base = {"/a.md": BaseEntry("ma", "/a.md", "a1", 1), "/b.md": BaseEntry("mb", "/b.md", "b1", 1)}
    base_remote = {b.memory_id: RemoteEntry(b.memory_id, b.path, b.sha, b.size) for b in base.values()}
    remote = {
        "ma": RemoteEntry("ma", "/a.md", "a2", 2),
        "mb": RemoteEntry("mb", "/b.md", "b2", 2),
        "mc": RemoteEntry("mc", "/c.md", "c1", 1),
    }
    out, held = hold_open(remote, base_remote, frozenset({"/a.md"}), _local(base))
    assert out == {"ma": base_remote["ma"], "mb": remote["mb"], "mc": remote["mc"]}
    assert out["ma"] is base_remote["ma"]  # the baseline's own entry: a narrowed plan sees no change
    assert held.memories == {"ma"} and held.paths == {"/a.md"}
    # nothing changed at the open path: nothing held, nothing pending
    out, held = hold_open(remote, base_remote, frozenset({"/z.md"}), _local(base))
    assert out == remote and held == NOTHING_HELD


def test_a_memory_arriving_on_an_open_path_waits_with_it():
    base = {"/a.md": BaseEntry("ma", "/a.md", "a1", 1), "/b.md": BaseEntry("mb", "/b.md", "b1", 1)}
    base_remote = {b.memory_id: RemoteEntry(b.memory_id, b.path, b.sha, b.size) for b in base.values()}
    # /a.md deleted on the store, /b.md moved onto it, a new memory where /b.md was, one under /a.md
    remote = {
        "mb": RemoteEntry("mb", "/a.md", "b1", 1),
        "mn": RemoteEntry("mn", "/b.md", "n1", 1),
        "mu": RemoteEntry("mu", "/a.md/x", "u1", 1),
        "mo": RemoteEntry("mo", "/other.md", "o1", 1),
    }
    out, held = hold_open(remote, base_remote, frozenset({"/a.md"}), _local(base))
    assert out == {"ma": base_remote["ma"], "mb": base_remote["mb"], "mo": remote["mo"]}
    assert held.memories == {"ma", "mb", "mn", "mu"} and held.paths == {"/a.md"}
    assert not _touched(_plan(base, out)) & {"/a.md"}


@st.composite
def staged_views(draw, base):
    """The view of a store whose agent changed things since the baseline (by path): edits, moves,
    deletes and new files, each only where the view stays a tree."""
    local = {b.path: LocalFile(b.path, b.memory_id, b.sha, b.size) for b in base.values()}
    for k, op in enumerate(draw(st.lists(st.sampled_from(["edit", "move", "delete", "create"]), max_size=4))):
        if op == "create":
            path = draw(st.sampled_from(PATHS))
            if _fits(set(local), path):
                local[path] = LocalFile(path, None, f"l{k}", 5)
            continue
        if not local:
            continue
        f = local[draw(st.sampled_from(sorted(local)))]
        if op == "edit":
            local[f.path] = LocalFile(f.path, f.memory_id, f"l{k}", f.size + 1)
        elif op == "delete":
            del local[f.path]
        else:
            path = draw(st.sampled_from(PATHS))
            if _fits(set(local) - {f.path}, path):
                del local[f.path]
                local[path] = LocalFile(path, f.memory_id, f.sha, f.size)
    return local


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clean_stores(), st.data(), st.sets(st.sampled_from(PATHS), max_size=2))
def test_a_busy_pull_of_a_store_with_staged_changes_leaves_them_and_holds_what_it_must(store, data, open_):
    base, base_remote, remote = store
    local = data.draw(staged_views(base))
    staged = staged_paths(local, base)
    busy = frozenset(staged | open_)
    held_remote, held = hold_open(remote, base_remote, busy, lambda p: local.get(p))
    plan = _plan(base, held_remote, local)
    assert not _touched(plan) & busy  # no view action on a staged or open path
    assert not plan.merge_wanted  # no conflict is settled mid-command
    base_ids = {b.memory_id: b for b in base.values()}
    for f in local.values():  # a staged memory is planned against the baseline: pushed as it is
        b = base_ids.get(f.memory_id) if f.memory_id else None
        if b is not None and (b.path != f.path or b.sha != f.sha):
            assert held_remote.get(b.memory_id) == base_remote[b.memory_id]
    # what differs from the store now is pending: the pull does not record the store's counter
    for mid in set(remote) | set(held_remote):
        if held_remote.get(mid) != remote.get(mid):
            assert mid in held.memories
    assert held.paths <= busy


def test_staged_paths_name_both_ends_of_a_move_and_what_was_deleted_or_created():
    base = {
        "/a.md": BaseEntry("ma", "/a.md", "a1", 1),
        "/b.md": BaseEntry("mb", "/b.md", "b1", 1),
        "/c.md": BaseEntry("mc", "/c.md", "c1", 1),
        "/d.md": BaseEntry("md", "/d.md", "d1", 1),
    }
    local = {
        "/a.md": LocalFile("/a.md", "ma", "a1", 1),  # as the baseline: not staged
        "/moved.md": LocalFile("/moved.md", "mb", "b1", 1),
        "/c.md": LocalFile("/c.md", "mc", "c2", 2),
        "/new.md": LocalFile("/new.md", None, "n1", 1),
    }
    assert staged_paths(local, base) == {"/b.md", "/moved.md", "/c.md", "/d.md", "/new.md"}
    clean = {b.path: LocalFile(b.path, b.memory_id, b.sha, b.size) for b in base.values()}
    assert staged_paths(clean, base) == set()
