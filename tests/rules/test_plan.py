"""Pure tests of the sync decisions (memfs/sync/plan.py): no I/O, no kernel, no service.

The exhaustive table below is written from the rules (docs/SEMANTICS.md#d-three-way and "Sync
decisions"), not from running the code. One memory M is at /a with content s0 in the base; the
agent changes it to s1 and/or renames it to /b; the store changes it to s2 and/or renames it to /c;
"new-at-path" is a new local file (no memory id) at /a, or a new store memory N at /a (M gone).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfs.records import BaseEntry, LocalFile, RefusedEntry, SkippedEntry
from memfs.sync.plan import (
    ClearHeld,
    ClearRefused,
    DropBase,
    HoldDelete,
    Inputs,
    KeepLocal,
    Materialise,
    MoveLocal,
    Notice,
    Plan,
    PushCreate,
    PushDelete,
    PushUpdate,
    RemoteEntry,
    RemoveLocal,
    SetBase,
    SetLocalMemoryId,
    Skip,
    Unskip,
    is_temp_path,
    plan_store,
    temp_path,
)

M, N = "mem_m", "mem_n"
S0, S1, S2 = "s0", "s1", "s2"
Z = {S0: 10, S1: 11, S2: 12}
SWC, DBS, OBS = "store-won-conflict", "deleted-by-store", "overwritten-by-store"


# ---- shorthand --------------------------------------------------------------------------------


def mat(m, p, s):
    return Materialise(m, p, s, Z[s])


def base(m, p, s):
    return SetBase(BaseEntry(m, p, s, Z[s]))


def keep(p, s):
    return KeepLocal(p, s)


def rm(p):
    return RemoveLocal(p)


def mv(a, b):
    return MoveLocal(a, b)


def note(kind, p, kept=False):
    return Notice(kind, p, kept=kept)


def upd(m, p, exp, new_path=None, new_sha=None):
    return PushUpdate(m, p, exp, new_path, new_sha)


def create(p, s):
    return PushCreate(p, s, Z[s])


def lid(p, m):
    return SetLocalMemoryId(p, m)


def L(path, mid, sha, bad=False):  # noqa: N802
    return LocalFile(path, mid, sha, Z.get(sha, len(sha)), bad)


def R(mid, path, sha):  # noqa: N802
    return RemoteEntry(mid, path, sha, Z.get(sha, len(sha)))


def B(mid, path, sha):  # noqa: N802
    return BaseEntry(mid, path, sha, Z.get(sha, len(sha)))


def inputs(base=(), local=(), remote=(), **kw) -> Inputs:
    return Inputs(
        base={b.memory_id: b for b in base},
        local={f.path: f for f in local},
        remote={r.memory_id: r for r in remote},
        **kw,
    )


def plan(base=(), local=(), remote=(), **kw) -> Plan:
    return plan_store(inputs(base, local, remote, **kw))


# ---- the exhaustive table -----------------------------------------------------------------------

LOCAL = {
    "absent": None,
    "same": ("/a", M, S0),
    "modified": ("/a", M, S1),
    "renamed": ("/b", M, S0),
    "renamed+modified": ("/b", M, S1),
    "new-at-path": ("/a", None, S1),
}
REMOTE = {
    "absent": None,
    "same": (M, "/a", S0),
    "modified": (M, "/a", S2),
    "renamed": (M, "/c", S0),
    "renamed+modified": (M, "/c", S2),
    "new-at-path": (N, "/a", S2),
}

# read_write, deletions enabled. Order inside each list: view (keep, remove, move, materialise),
# bookkeeping (DropBase, SetBase, SetLocalMemoryId, ...), notices, pushes.
RW = {
    # -- M in the base
    (True, "absent", "absent"): [DropBase(M)],
    (True, "absent", "same"): [PushDelete(M, "/a", S0)],
    (True, "absent", "modified"): [mat(M, "/a", S2), base(M, "/a", S2), note(SWC, "/a")],
    (True, "absent", "renamed"): [mat(M, "/c", S0), base(M, "/c", S0), note(SWC, "/a")],
    (True, "absent", "renamed+modified"): [mat(M, "/c", S2), base(M, "/c", S2), note(SWC, "/a")],
    (True, "absent", "new-at-path"): [mat(N, "/a", S2), DropBase(M), base(N, "/a", S2)],
    (True, "same", "absent"): [rm("/a"), DropBase(M)],
    (True, "same", "same"): [],
    (True, "same", "modified"): [mat(M, "/a", S2), base(M, "/a", S2)],
    (True, "same", "renamed"): [mv("/a", "/c"), base(M, "/c", S0)],
    (True, "same", "renamed+modified"): [mv("/a", "/c"), mat(M, "/c", S2), base(M, "/c", S2)],
    (True, "same", "new-at-path"): [rm("/a"), mat(N, "/a", S2), DropBase(M), base(N, "/a", S2)],
    (True, "modified", "absent"): [keep("/a", S1), rm("/a"), DropBase(M), note(DBS, "/a", True)],
    (True, "modified", "same"): [upd(M, "/a", S0, new_sha=S1)],
    (True, "modified", "modified"): [
        keep("/a", S1),
        mat(M, "/a", S2),
        base(M, "/a", S2),
        note(SWC, "/a", True),
    ],
    (True, "modified", "renamed"): [mv("/a", "/c"), base(M, "/c", S0), upd(M, "/c", S0, new_sha=S1)],
    (True, "modified", "renamed+modified"): [
        keep("/a", S1),
        mv("/a", "/c"),
        mat(M, "/c", S2),
        base(M, "/c", S2),
        note(SWC, "/a", True),
    ],
    (True, "modified", "new-at-path"): [
        keep("/a", S1),
        rm("/a"),
        mat(N, "/a", S2),
        DropBase(M),
        base(N, "/a", S2),
        note(DBS, "/a", True),
    ],
    (True, "renamed", "absent"): [keep("/b", S0), rm("/b"), DropBase(M), note(DBS, "/b", True)],
    (True, "renamed", "same"): [upd(M, "/a", S0, new_path="/b")],
    (True, "renamed", "modified"): [mat(M, "/b", S2), base(M, "/a", S2), upd(M, "/a", S2, new_path="/b")],
    (True, "renamed", "renamed"): [mv("/b", "/c"), base(M, "/c", S0), note(SWC, "/b")],
    (True, "renamed", "renamed+modified"): [
        mv("/b", "/c"),
        mat(M, "/c", S2),
        base(M, "/c", S2),
        note(SWC, "/b"),
    ],
    (True, "renamed", "new-at-path"): [
        keep("/b", S0),
        rm("/b"),
        mat(N, "/a", S2),
        DropBase(M),
        base(N, "/a", S2),
        note(DBS, "/b", True),
    ],
    (True, "renamed+modified", "absent"): [keep("/b", S1), rm("/b"), DropBase(M), note(DBS, "/b", True)],
    (True, "renamed+modified", "same"): [upd(M, "/a", S0, new_path="/b", new_sha=S1)],
    (True, "renamed+modified", "modified"): [
        keep("/b", S1),
        mat(M, "/b", S2),
        base(M, "/a", S2),
        note(SWC, "/b", True),
        upd(M, "/a", S2, new_path="/b"),
    ],
    (True, "renamed+modified", "renamed"): [
        mv("/b", "/c"),
        base(M, "/c", S0),
        note(SWC, "/b"),
        upd(M, "/c", S0, new_sha=S1),
    ],
    (True, "renamed+modified", "renamed+modified"): [
        keep("/b", S1),
        mv("/b", "/c"),
        mat(M, "/c", S2),
        base(M, "/c", S2),
        note(SWC, "/b", True),
    ],
    (True, "renamed+modified", "new-at-path"): [
        keep("/b", S1),
        rm("/b"),
        mat(N, "/a", S2),
        DropBase(M),
        base(N, "/a", S2),
        note(DBS, "/b", True),
    ],
    # rm + create at the same path continues M when the store still holds it there
    (True, "new-at-path", "absent"): [DropBase(M), create("/a", S1)],
    (True, "new-at-path", "same"): [lid("/a", M), upd(M, "/a", S0, new_sha=S1)],
    (True, "new-at-path", "modified"): [
        keep("/a", S1),
        mat(M, "/a", S2),
        base(M, "/a", S2),
        note(SWC, "/a", True),
    ],
    (True, "new-at-path", "renamed"): [
        mat(M, "/c", S0),
        base(M, "/c", S0),
        note(SWC, "/a"),
        create("/a", S1),
    ],
    (True, "new-at-path", "renamed+modified"): [
        mat(M, "/c", S2),
        base(M, "/c", S2),
        note(SWC, "/a"),
        create("/a", S1),
    ],
    (True, "new-at-path", "new-at-path"): [
        keep("/a", S1),
        rm("/a"),
        mat(N, "/a", S2),
        DropBase(M),
        base(N, "/a", S2),
        note(OBS, "/a", True),
    ],
    # -- M not in the base: store memories are new; local files carrying M's id are new files
    (False, "absent", "absent"): [],
    (False, "absent", "same"): [mat(M, "/a", S0), base(M, "/a", S0)],
    (False, "absent", "modified"): [mat(M, "/a", S2), base(M, "/a", S2)],
    (False, "absent", "renamed"): [mat(M, "/c", S0), base(M, "/c", S0)],
    (False, "absent", "renamed+modified"): [mat(M, "/c", S2), base(M, "/c", S2)],
    (False, "absent", "new-at-path"): [mat(N, "/a", S2), base(N, "/a", S2)],
    (False, "same", "absent"): [lid("/a", None), create("/a", S0)],
    (False, "same", "same"): [base(M, "/a", S0), lid("/a", M)],  # equal content: adopt
    (False, "same", "modified"): [
        keep("/a", S0),
        rm("/a"),
        mat(M, "/a", S2),
        base(M, "/a", S2),
        note(OBS, "/a", True),
    ],
    (False, "same", "renamed"): [mat(M, "/c", S0), base(M, "/c", S0), lid("/a", None), create("/a", S0)],
    (False, "same", "renamed+modified"): [
        mat(M, "/c", S2),
        base(M, "/c", S2),
        lid("/a", None),
        create("/a", S0),
    ],
    (False, "same", "new-at-path"): [
        keep("/a", S0),
        rm("/a"),
        mat(N, "/a", S2),
        base(N, "/a", S2),
        note(OBS, "/a", True),
    ],
    (False, "modified", "absent"): [lid("/a", None), create("/a", S1)],
    (False, "modified", "same"): [
        keep("/a", S1),
        rm("/a"),
        mat(M, "/a", S0),
        base(M, "/a", S0),
        note(OBS, "/a", True),
    ],
    (False, "modified", "modified"): [
        keep("/a", S1),
        rm("/a"),
        mat(M, "/a", S2),
        base(M, "/a", S2),
        note(OBS, "/a", True),
    ],
    (False, "modified", "renamed"): [mat(M, "/c", S0), base(M, "/c", S0), lid("/a", None), create("/a", S1)],
    (False, "modified", "renamed+modified"): [
        mat(M, "/c", S2),
        base(M, "/c", S2),
        lid("/a", None),
        create("/a", S1),
    ],
    (False, "modified", "new-at-path"): [
        keep("/a", S1),
        rm("/a"),
        mat(N, "/a", S2),
        base(N, "/a", S2),
        note(OBS, "/a", True),
    ],
    (False, "new-at-path", "absent"): [create("/a", S1)],
    (False, "new-at-path", "same"): [
        keep("/a", S1),
        rm("/a"),
        mat(M, "/a", S0),
        base(M, "/a", S0),
        note(OBS, "/a", True),
    ],
    (False, "new-at-path", "modified"): [
        keep("/a", S1),
        rm("/a"),
        mat(M, "/a", S2),
        base(M, "/a", S2),
        note(OBS, "/a", True),
    ],
    (False, "new-at-path", "renamed"): [mat(M, "/c", S0), base(M, "/c", S0), create("/a", S1)],
    (False, "new-at-path", "renamed+modified"): [mat(M, "/c", S2), base(M, "/c", S2), create("/a", S1)],
    (False, "new-at-path", "new-at-path"): [
        keep("/a", S1),
        rm("/a"),
        mat(N, "/a", S2),
        base(N, "/a", S2),
        note(OBS, "/a", True),
    ],
}
for _l, _s in (("renamed", S0), ("renamed+modified", S1)):  # a new file at /b (it carries M's stale id)
    RW[(False, _l, "absent")] = [lid("/b", None), create("/b", _s)]
    for _r, _rem in REMOTE.items():
        if _rem:
            RW[(False, _l, _r)] = [mat(*_rem), base(*_rem), lid("/b", None), create("/b", _s)]

# read_only: only where it differs from RW (the store wins every local difference; nothing pushed).
RO = {
    (True, "absent", "same"): [mat(M, "/a", S0), note(SWC, "/a")],
    (True, "modified", "same"): [keep("/a", S1), mat(M, "/a", S0), note(SWC, "/a", True)],
    (True, "modified", "renamed"): [
        keep("/a", S1),
        mv("/a", "/c"),
        mat(M, "/c", S0),
        base(M, "/c", S0),
        note(SWC, "/a", True),
    ],
    (True, "renamed", "same"): [mv("/b", "/a"), note(SWC, "/b")],
    (True, "renamed", "modified"): [mv("/b", "/a"), mat(M, "/a", S2), base(M, "/a", S2), note(SWC, "/b")],
    (True, "renamed+modified", "same"): [
        keep("/b", S1),
        mv("/b", "/a"),
        mat(M, "/a", S0),
        note(SWC, "/b", True),
    ],
    (True, "renamed+modified", "modified"): [
        keep("/b", S1),
        mv("/b", "/a"),
        mat(M, "/a", S2),
        base(M, "/a", S2),
        note(SWC, "/b", True),
    ],
    (True, "renamed+modified", "renamed"): [
        keep("/b", S1),
        mv("/b", "/c"),
        mat(M, "/c", S0),
        base(M, "/c", S0),
        note(SWC, "/b", True),
    ],
    (True, "new-at-path", "absent"): [keep("/a", S1), rm("/a"), DropBase(M), note(SWC, "/a", True)],
    (True, "new-at-path", "same"): [keep("/a", S1), mat(M, "/a", S0), note(SWC, "/a", True)],
    (True, "new-at-path", "renamed"): [
        keep("/a", S1),
        rm("/a"),
        mat(M, "/c", S0),
        base(M, "/c", S0),
        note(SWC, "/a", True),
        note(SWC, "/a"),
    ],
    (True, "new-at-path", "renamed+modified"): [
        keep("/a", S1),
        rm("/a"),
        mat(M, "/c", S2),
        base(M, "/c", S2),
        note(SWC, "/a", True),
        note(SWC, "/a"),
    ],
}
for _l, _p, _s in (
    ("same", "/a", S0),
    ("modified", "/a", S1),
    ("new-at-path", "/a", S1),
    ("renamed", "/b", S0),
    ("renamed+modified", "/b", S1),
):
    # M not in the base: every local file is new and cannot be uploaded; store paths at /a are
    # the store created it, docs/SEMANTICS.md#d-store-created (as in RW), anything else is lost to the read-only store.
    for _r, rem in REMOTE.items():
        if _p == "/a" and _r in ("same", "modified", "new-at-path"):
            continue
        RO[(False, _l, _r)] = (
            [keep(_p, _s), rm(_p)]
            + ([mat(rem[0], rem[1], rem[2]), base(*rem)] if rem else [])
            + [note(SWC, _p, True)]
        )

DELETE_KEY = (True, "absent", "same")


def table_inputs(in_base: bool, lstate: str, rstate: str, **kw) -> Inputs:
    lo, re_ = LOCAL[lstate], REMOTE[rstate]
    return inputs(
        base=[B(M, "/a", S0)] if in_base else [],
        local=[L(*lo)] if lo else [],
        remote=[R(*re_)] if re_ else [],
        **kw,
    )


def expected(key, access, deletions, held=False):
    if access == "read_only":
        return RO.get(key, RW[key])
    if key == DELETE_KEY and deletions != "enabled":
        return [] if held else [HoldDelete(M, "/a", deletions)]
    return RW[key]


CASES = [(b, lo, r) for b in (True, False) for lo in LOCAL for r in REMOTE]


def test_table_is_complete():
    assert set(RW) == set(CASES)
    assert set(RO) <= set(CASES)


@pytest.mark.parametrize("deletions", ["enabled", "log_only", "disabled"])
@pytest.mark.parametrize("access", ["read_write", "read_only"])
@pytest.mark.parametrize("key", CASES, ids=lambda k: f"{'base' if k[0] else 'nobase'}-{k[1]}-{k[2]}")
def test_three_way_table(key, access, deletions):
    got = plan_store(table_inputs(*key, access=access, deletions=deletions))
    assert list(got.actions) == expected(key, access, deletions)
    if access == "read_only":
        assert got.push == ()


@pytest.mark.parametrize("deletions", ["log_only", "disabled"])
def test_held_delete_is_logged_once(deletions):
    got = plan_store(table_inputs(*DELETE_KEY, deletions=deletions, deletes_held=frozenset({M})))
    assert got.empty


# ---- decisions 2 and 3 ---------------------------------------------------------------------------


def test_decision_2_deleted_memory_is_never_recreated():
    p = plan(base=[B(M, "/a", S0)], local=[L("/a", M, S1)], remote=[])
    assert not any(isinstance(a, (PushCreate, PushUpdate)) for a in p.actions)
    assert p.view == (keep("/a", S1), rm("/a"))


def test_decision_3_equal_content_adopts_a_lost_create():
    p = plan(local=[L("/notes/x", None, S1)], remote=[R(N, "/notes/x", S1)])
    assert list(p.actions) == [SetBase(B(N, "/notes/x", S1)), lid("/notes/x", N)]


def test_decision_3_twin_of_a_memory_moving_in_is_dropped_quietly():
    # The store renamed M /a -> /x and the agent created /x with the same content.
    p = plan(base=[B(M, "/a", S0)], local=[L("/a", M, S0), L("/x", None, S0)], remote=[R(M, "/x", S0)])
    assert list(p.actions) == [rm("/x"), mv("/a", "/x"), base(M, "/x", S0)]


def test_decision_3_store_rename_onto_a_new_local_file_overwrites_it():
    p = plan(base=[B(M, "/a", S0)], local=[L("/a", M, S0), L("/x", None, S1)], remote=[R(M, "/x", S0)])
    assert list(p.actions) == [
        keep("/x", S1),
        rm("/x"),
        mv("/a", "/x"),
        base(M, "/x", S0),
        note(OBS, "/x", True),
    ]


# ---- concurrent renames and edits ----------------------------------------------------------------


def test_local_rename_onto_a_path_the_store_just_created_is_undone():
    p = plan(base=[B(M, "/a", S0)], local=[L("/b", M, S1)], remote=[R(M, "/a", S0), R(N, "/b", S2)])
    assert list(p.actions) == [
        mv("/b", "/a"),
        mat(N, "/b", S2),
        base(N, "/b", S2),
        note(SWC, "/b"),
        upd(M, "/a", S0, new_sha=S1),
    ]


def test_local_rename_beside_a_store_file_is_undone():
    # /d/x cannot exist while the store has a file /d.
    p = plan(base=[B(M, "/a", S0)], local=[L("/d/x", M, S0)], remote=[R(M, "/a", S0), R(N, "/d", S2)])
    assert list(p.actions) == [mv("/d/x", "/a"), mat(N, "/d", S2), base(N, "/d", S2), note(SWC, "/d/x")]


def test_local_rename_onto_a_path_freed_by_a_local_delete_goes_after_the_delete():
    p = plan(
        base=[B(M, "/a", S0), B(N, "/b", S2)], local=[L("/b", M, S0)], remote=[R(M, "/a", S0), R(N, "/b", S2)]
    )
    assert p.push_stages == ((PushDelete(N, "/b", S2),), (upd(M, "/a", S0, new_path="/b"),))


def test_local_rename_onto_a_held_delete_is_undone():
    # log_only: the store keeps N at /b, so M cannot go there.
    p = plan(
        base=[B(M, "/a", S0), B(N, "/b", S2)],
        local=[L("/b", M, S0)],
        remote=[R(M, "/a", S0), R(N, "/b", S2)],
        deletions="log_only",
    )
    assert list(p.actions) == [mv("/b", "/a"), note(SWC, "/b"), HoldDelete(N, "/b", "log_only")]


# ---- over the limits (docs/SEMANTICS.md#d-over-limits) ----------------------------------------------------


def _many(n, sha=S0):
    return [R(f"mem_{i}", f"/f{i}", sha) for i in range(n)]


def test_limits_follow_the_list_order_not_the_path_order():
    rs = _many(3)
    order = ("mem_2", "mem_0", "mem_1")
    p = plan(remote=rs, remote_order=order, max_files=2)
    assert [a.memory_id for a in p.view] == ["mem_0", "mem_2"]
    assert Skip("mem_1", "/f1", S0, 10, p.bookkeeping[-1].reason) in p.bookkeeping
    assert p.notices == (Notice("over-limit", "/f1"),)


def test_limits_count_bytes_and_stop_at_the_first_that_does_not_fit():
    rs = [R("mem_0", "/a", S2), R("mem_1", "/b", S2), R("mem_2", "/c", S0)]  # 12 + 12 + 10
    p = plan(remote=rs, max_bytes=30)
    assert [a.path for a in p.view] == ["/a", "/b"]  # 24 + 10 > 30
    assert {n.path for n in p.notices} == {"/c"}
    p = plan(
        remote=[R("mem_0", "/a", S2), R("mem_1", "/b", S2), R("mem_2", "/c", S0), R("mem_3", "/d", "x")],
        max_bytes=30,
    )
    assert {n.path for n in p.notices} == {"/c", "/d"}  # /d (1 byte) would fit, but it comes after the cut


def test_over_limit_notice_once_and_room_appearing_later():
    rs = _many(3)
    first = plan(remote=rs, max_files=2)
    skip = next(a for a in first.bookkeeping if isinstance(a, Skip))
    skipped = {skip.memory_id: SkippedEntry(skip.path, skip.sha, skip.size, skip.reason)}
    synced = [B(r.memory_id, r.path, r.sha) for r in rs[:2]]
    local = [L(r.path, r.memory_id, r.sha) for r in rs[:2]]
    assert plan(base=synced, local=local, remote=rs, max_files=2, skipped=skipped).empty
    # the skipped memory changes: noticed again
    changed = [*rs[:2], R("mem_2", "/f2", S1)]
    again = plan(base=synced, local=local, remote=changed, max_files=2, skipped=skipped)
    assert again.notices == (Notice("over-limit", "/f2"),)
    assert [a for a in again.bookkeeping if isinstance(a, Skip)] == [
        Skip("mem_2", "/f2", S1, 11, skip.reason)
    ]
    # room appears: materialised, the skip forgotten
    roomy = plan(base=synced[:1], local=local[:1], remote=[rs[0], rs[2]], max_files=2, skipped=skipped)
    assert list(roomy.actions) == [mat("mem_2", "/f2", S0), base("mem_2", "/f2", S0), Unskip("mem_2")]


def test_a_materialised_memory_pushed_over_the_limit_is_removed_not_left_stale():
    rs = [R("mem_0", "/a", S0), R("mem_1", "/b", S0)]
    p = plan(base=[B("mem_1", "/b", S0)], local=[L("/b", "mem_1", S0)], remote=rs, max_files=1)
    assert list(p.view) == [rm("/b"), mat("mem_0", "/a", S0)]
    assert DropBase("mem_1") in p.bookkeeping and p.notices == (Notice("over-limit", "/b"),)


def test_over_limit_with_local_changes():
    rs = [R("mem_0", "/a", S0), R("mem_1", "/b", S0)]
    synced = [B("mem_1", "/b", S0)]
    # only the agent changed it: the change goes out first (the next tick applies the limit)
    p = plan(base=synced, local=[L("/b", "mem_1", S1)], remote=rs, max_files=1)
    assert p.push == (upd("mem_1", "/b", S0, new_sha=S1),) and not p.notices
    # the store changed it too: the agent's version is kept, the file leaves the view
    p = plan(base=synced, local=[L("/b", "mem_1", S1)], remote=[rs[0], R("mem_1", "/b", S2)], max_files=1)
    assert list(p.view) == [keep("/b", S1), rm("/b"), mat("mem_0", "/a", S0)]
    assert p.notices == (Notice("over-limit", "/b", kept=True),) and p.push == ()


def test_new_local_file_at_the_path_of_an_over_limit_memory():
    rs = [R("mem_0", "/a", S0), R("mem_1", "/b", S2)]
    p = plan(local=[L("/b", None, S1)], remote=rs, max_files=1)
    assert list(p.view) == [keep("/b", S1), rm("/b"), mat("mem_0", "/a", S0)]
    assert p.notices == (Notice("over-limit", "/b"), Notice(OBS, "/b", kept=True)) and p.push == ()


# ---- paths that cannot exist here -----------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/" + "x" * 256, "/d/" + "é" * 128, "/.anthropic-memory-store", "/.sync-notices.log"]
)
def test_unmaterialisable_paths_are_skipped_once(path):
    p = plan(remote=[R(N, path, S2)])
    assert p.view == () and p.notices == (Notice("not-materialised", path),)
    (skip,) = p.bookkeeping
    assert (skip.memory_id, skip.path, skip.sha) == (N, path, S2)
    assert plan(remote=[R(N, path, S2)], skipped={N: SkippedEntry(path, S2)}).empty
    # a reserved name below the root is an ordinary file
    if path.startswith("/."):
        assert plan(remote=[R(N, "/d" + path, S2)]).view == (mat(N, "/d" + path, S2),)


def test_store_file_where_local_new_files_make_a_directory():
    p = plan(local=[L("/d/x", None, S1)], remote=[R(N, "/d", S2)])
    assert p.view == () and p.push == ()  # the local file stays, unsent (it would be a 409)
    assert p.notices == (Notice("not-materialised", "/d"),)
    assert plan(
        local=[L("/d/x", None, S1)], remote=[R(N, "/d", S2)], skipped={N: SkippedEntry("/d", S2)}
    ).empty
    # once the store moves it away, both sides go ahead
    p = plan(local=[L("/d/x", None, S1)], remote=[R(N, "/e", S2)], skipped={N: SkippedEntry("/d", S2)})
    assert list(p.actions) == [mat(N, "/e", S2), base(N, "/e", S2), Unskip(N), create("/d/x", S1)]


def test_store_directory_where_a_local_new_file_is():
    p = plan(local=[L("/d", None, S1)], remote=[R(N, "/d/x", S2)])
    assert p.view == () and p.push == () and p.notices == (Notice("not-materialised", "/d/x"),)


def test_skip_forgotten_when_the_memory_is_gone():
    skipped = {N: SkippedEntry("/.sync-notices.log", S2)}
    assert list(plan(skipped=skipped).actions) == [Unskip(N)]
    # without a listing (the counter did not move), absence from `remote` says nothing
    assert plan(skipped=skipped, remote_changed=False).empty


# ---- refused and bad UTF-8 ------------------------------------------------------------------------


def test_refused_upload_is_not_retried_until_the_content_changes():
    assert plan(local=[L("/big", None, S1)], refused={"/big": RefusedEntry(S1)}).empty
    assert list(plan(local=[L("/big", None, S2)], refused={"/big": RefusedEntry(S1)}).actions) == [
        ClearRefused("/big"),
        create("/big", S2),
    ]
    synced = [B(M, "/a", S0)]
    assert plan(
        base=synced, local=[L("/a", M, S1)], remote=[R(M, "/a", S0)], refused={"/a": RefusedEntry(S1)}
    ).empty
    assert list(
        plan(
            base=synced, local=[L("/a", M, S0)], remote=[R(M, "/a", S0)], refused={"/a": RefusedEntry(S1)}
        ).actions
    ) == [ClearRefused("/a")]


def test_refused_file_overridden_by_the_store_forgets_the_refusal():
    p = plan(
        base=[B(M, "/a", S0)],
        local=[L("/a", M, S1)],
        remote=[R(M, "/a", S2)],
        refused={"/a": RefusedEntry(S1)},
    )
    assert ClearRefused("/a") in p.bookkeeping and keep("/a", S1) in p.view


def test_bad_utf8_is_never_pushed():
    assert plan(local=[L("/x", None, S1, bad=True)]).empty
    assert plan(base=[B(M, "/a", S0)], local=[L("/a", M, S1, bad=True)], remote=[R(M, "/a", S0)]).empty


# ---- convergence: answers that were lost -------------------------------------------------------


@pytest.mark.parametrize(
    "local,remote,want",
    [
        (L("/a", M, S1), R(M, "/a", S1), [base(M, "/a", S1)]),  # update
        (L("/b", M, S0), R(M, "/b", S0), [base(M, "/b", S0)]),  # rename
        (L("/b", M, S1), R(M, "/b", S1), [base(M, "/b", S1)]),  # rename + update
        (None, None, [DropBase(M)]),  # delete
    ],
)
def test_convergent_changes_are_settled_without_conflict(local, remote, want):
    p = plan(base=[B(M, "/a", S0)], local=[local] if local else [], remote=[remote] if remote else [])
    assert list(p.actions) == want


def test_interrupted_swap_on_the_store_is_not_a_remote_rename():
    # our first hop (M -> temp) went through, its answer was lost; the view already shows /b
    p = plan(base=[B(M, "/a", S0)], local=[L("/b", M, S0)], remote=[R(M, temp_path(M), S0)])
    assert list(p.actions) == [base(M, temp_path(M), S0), upd(M, temp_path(M), S0, new_path="/b")]


# ---- read-only -------------------------------------------------------------------------------------


def test_read_only_never_pushes():
    p = plan(base=[B(M, "/a", S0)], local=[L("/x", None, S1)], remote=[R(M, "/a", S0)], access="read_only")
    assert p.push == () and list(p.actions) == [
        keep("/x", S1),
        rm("/x"),
        mat(M, "/a", S0),
        note(SWC, "/a"),
        note(SWC, "/x", True),
    ]


# ---- ordering: pushes and view moves ----------------------------------------------------------------


def _renamed(pairs, sha=S0):
    """Memories mem_<i> renamed locally from a to b (the store unchanged)."""
    base_ = [B(f"mem_{i}", a, sha) for i, (a, _) in enumerate(pairs)]
    local = [L(b, f"mem_{i}", sha) for i, (_, b) in enumerate(pairs)]
    remote = [R(f"mem_{i}", a, sha) for i, (a, _) in enumerate(pairs)]
    return base_, local, remote


def test_push_chain_goes_from_the_free_end():
    # /a -> /b, /b -> /c, /c -> /d: the last link first
    p = plan(*_renamed([("/a", "/b"), ("/b", "/c"), ("/c", "/d")]))
    assert p.push_stages == (
        (upd("mem_2", "/c", S0, new_path="/d"),),
        (upd("mem_1", "/b", S0, new_path="/c"),),
        (upd("mem_0", "/a", S0, new_path="/b"),),
    )


def test_push_swap_goes_through_a_temporary_path():
    p = plan(*_renamed([("/a", "/b"), ("/b", "/a")]))
    tmp = temp_path("mem_0")
    assert p.push == (
        upd("mem_0", "/a", S0, new_path=tmp),
        upd("mem_1", "/b", S0, new_path="/a"),
        upd("mem_0", tmp, S0, new_path="/b"),
    )


def test_push_rename_into_its_own_subtree_goes_through_a_temporary_path():
    p = plan(*_renamed([("/a", "/a/b")]))
    tmp = temp_path("mem_0")
    assert p.push == (upd("mem_0", "/a", S0, new_path=tmp), upd("mem_0", tmp, S0, new_path="/a/b"))


def test_push_order_deletes_then_renames_then_creates():
    # mem_0 deleted at /x; mem_1 /d -> /x/y (needs /x gone); a new file at /d/e (needs /d gone)
    base_ = [B("mem_0", "/x", S0), B("mem_1", "/d", S0)]
    remote = [R("mem_0", "/x", S0), R("mem_1", "/d", S0)]
    local = [L("/x/y", "mem_1", S1), L("/d/e", None, S2)]
    p = plan(base_, local, remote)
    assert p.push_stages == (
        (PushDelete("mem_0", "/x", S0),),
        (upd("mem_1", "/d", S0, "/x/y", S1),),
        (create("/d/e", S2),),
    )


def test_content_updates_go_with_the_first_rename_wave():
    base_, local, remote = _renamed([("/a", "/b"), ("/b", "/c")])
    p = plan([*base_, B("mem_9", "/z", S0)], [*local, L("/z", "mem_9", S1)], [*remote, R("mem_9", "/z", S0)])
    assert p.push_stages[0] == (upd("mem_1", "/b", S0, new_path="/c"), upd("mem_9", "/z", S0, new_sha=S1))


def test_view_swap_from_the_store_goes_through_a_temporary_path():
    base_ = [B("mem_0", "/a", S0), B("mem_1", "/b", S1)]
    local = [L("/a", "mem_0", S0), L("/b", "mem_1", S1)]
    remote = [R("mem_0", "/b", S0), R("mem_1", "/a", S1)]
    p = plan(base_, local, remote)
    tmp = temp_path("mem_0")
    assert p.view == (mv("/a", tmp), mv("/b", "/a"), mv(tmp, "/b"))
    assert p.push == ()


def test_view_moves_wait_for_the_path_they_need():
    # the store renamed mem_0 /a -> /b/c and mem_1 /b -> /a: /b must move before /b/c can exist
    base_ = [B("mem_0", "/a", S0), B("mem_1", "/b", S1)]
    local = [L("/a", "mem_0", S0), L("/b", "mem_1", S1)]
    remote = [R("mem_0", "/b/c", S0), R("mem_1", "/a", S1)]
    p = plan(base_, local, remote)
    tmp = temp_path("mem_0")
    assert p.view == (mv("/a", tmp), mv("/b", "/a"), mv(tmp, "/b/c"))


# ---- ids and holds -----------------------------------------------------------------------------------


def test_duplicate_local_ids_first_path_wins_the_rest_are_new_files():
    p = plan(base=[B(M, "/a", S0)], local=[L("/a", M, S0), L("/z", M, S0)], remote=[R(M, "/a", S0)])
    assert list(p.actions) == [lid("/z", None), create("/z", S0)]


def test_held_delete_restored_when_the_store_changes_it():
    p = plan(
        base=[B(M, "/a", S0)], remote=[R(M, "/a", S2)], deletions="log_only", deletes_held=frozenset({M})
    )
    assert list(p.actions) == [mat(M, "/a", S2), base(M, "/a", S2), ClearHeld(M), note(SWC, "/a")]


def test_held_delete_sent_once_deletions_are_enabled():
    p = plan(base=[B(M, "/a", S0)], remote=[R(M, "/a", S0)], deletes_held=frozenset({M}))
    assert list(p.actions) == [ClearHeld(M), PushDelete(M, "/a", S0)]


def test_stale_holds_are_cleared():
    assert list(plan(deletes_held=frozenset({M})).actions) == [ClearHeld(M)]


def test_a_baseline_keyed_by_path_is_accepted():
    # state.baseline() keys its entries by path; the planner re-keys them by memory id
    p = plan_store(
        Inputs(base={"/a": B(M, "/a", S0)}, local={"/a": L("/a", M, S0)}, remote={M: R(M, "/a", S0)})
    )
    assert p.empty


# ---- properties: the plan reaches a fixed point --------------------------------------------------------

SHAS = {"x": 1, "y": 2, "z": 3}
VALID = ["/a", "/b", "/c", "/d", "/d/e", "/d/f", "/g/h", "/g/i/j"]
ANY = [*VALID, "/.sync-notices.log", "/" + "n" * 256]


def _fits(paths, p):
    return p not in paths and not any(q.startswith(p + "/") or p.startswith(q + "/") for q in paths)


@st.composite
def worlds(draw):
    ids = [f"m{i}" for i in range(4)]
    sha = st.sampled_from(sorted(SHAS))
    base_ = {}
    for m in ids:
        p = draw(st.sampled_from([None, *VALID]))
        if p and _fits({b.path for b in base_.values()}, p):
            base_[m] = BaseEntry(m, p, (s := draw(sha)), SHAS[s])

    def side(kind):
        out, paths = {}, set()
        for m, b in base_.items():
            op = draw(st.sampled_from(["same", "edit", "move", "move+edit", "delete"]))
            p = draw(st.sampled_from(VALID)) if "move" in op else b.path
            s = draw(sha) if "edit" in op else b.sha
            if op != "delete" and _fits(paths, p):
                paths.add(p)
                out[m] = (p, s)
        for i in range(draw(st.integers(0, 3))):
            p = draw(st.sampled_from(ANY if kind == "remote" else VALID))
            if _fits(paths, p):
                paths.add(p)
                out[f"{kind[0]}new{i}"] = (p, draw(sha))
        return out

    remote = {m: RemoteEntry(m, p, s, SHAS[s]) for m, (p, s) in side("remote").items()}
    local = {}
    for m, (p, s) in side("local").items():
        local[p] = LocalFile(p, m if m in base_ else None, s, SHAS[s])
    return base_, local, remote


def _free(local, path):
    return _fits(set(local), path)


def apply_plan(inp: Inputs, p: Plan, counter=itertools.count(), refuse=frozenset()):
    """Apply a plan like the engine would, against a strict fake service that refuses (400) the
    contents in `refuse`; every other step must be valid."""
    base_ = {b.memory_id: b for b in inp.base.values()}
    local = dict(inp.local)
    remote = dict(inp.remote)
    skipped, held, refused = dict(inp.skipped), set(inp.deletes_held), dict(inp.refused)
    for a in p.view:
        if isinstance(a, KeepLocal):
            assert local[a.path].sha == a.sha
        elif isinstance(a, RemoveLocal):
            del local[a.path]
        elif isinstance(a, MoveLocal):
            f = local.pop(a.old_path)
            assert _free(local, a.new_path), a
            local[a.new_path] = replace(f, path=a.new_path)
        elif isinstance(a, Materialise):
            cur = local.get(a.path)
            # onto the same memory, or onto a new file that continues it (rm + create at its path)
            assert (cur.memory_id in (a.memory_id, None)) if cur else _free(local, a.path), a
            assert remote[a.memory_id].sha == a.sha
            local[a.path] = LocalFile(a.path, a.memory_id, a.sha, a.size)
    for a in p.bookkeeping:
        if isinstance(a, SetBase):
            base_[a.entry.memory_id] = a.entry
        elif isinstance(a, DropBase):
            del base_[a.memory_id]
        elif isinstance(a, SetLocalMemoryId):
            local[a.path] = replace(local[a.path], memory_id=a.memory_id)
        elif isinstance(a, Skip):
            skipped[a.memory_id] = SkippedEntry(a.path, a.sha, a.size, a.reason)
        elif isinstance(a, Unskip):
            del skipped[a.memory_id]
        elif isinstance(a, ClearHeld):
            held.remove(a.memory_id)
        elif isinstance(a, ClearRefused):
            del refused[a.path]
    failed = False  # after a refusal, pushes that depended on it may answer 409: nothing happens
    for a in p.push:
        others = {r.path for r in remote.values() if r.memory_id != getattr(a, "memory_id", None)}
        if isinstance(a, HoldDelete):
            held.add(a.memory_id)
        elif isinstance(a, PushDelete):
            assert remote[a.memory_id].sha == a.expected_sha
            del remote[a.memory_id]
            del base_[a.memory_id]
        elif (
            isinstance(a, (PushUpdate, PushCreate))
            and (a.new_sha if isinstance(a, PushUpdate) else a.sha) in refuse
        ):
            path = a.local_path if isinstance(a, PushUpdate) else a.path
            refused[path] = RefusedEntry(local[path].sha)
            failed = True
        elif isinstance(a, PushUpdate):
            r = remote[a.memory_id]
            path = a.new_path or r.path
            ok = (r.path, r.sha) == (a.path, a.expected_sha) and (
                not a.new_path or _fits(others | {r.path}, path)
            )
            assert ok or failed, a  # strict: a memory's own old path is in the way too
            if ok:
                sha = a.new_sha or r.sha
                remote[a.memory_id] = RemoteEntry(a.memory_id, path, sha, SHAS.get(sha, Z.get(sha, 0)))
                base_[a.memory_id] = BaseEntry(a.memory_id, path, sha, remote[a.memory_id].size)
        elif isinstance(a, PushCreate):
            assert _fits(others, a.path) or failed, a
            if _fits(others, a.path):
                m = f"created{next(counter)}"
                remote[m] = RemoteEntry(m, a.path, a.sha, a.size)
                base_[m] = BaseEntry(m, a.path, a.sha, a.size)
                local[a.path] = replace(local[a.path], memory_id=m)
    order = tuple(sorted(remote, key=lambda m: remote[m].path))
    return replace(
        inp,
        base=base_,
        local=local,
        remote=remote,
        remote_order=order,
        skipped=skipped,
        deletes_held=frozenset(held),
        refused=refused,
    )


def _check_fixed_point(inp: Inputs):
    base_, remote = inp.base, inp.remote
    for m, b in base_.items():
        assert (remote[m].path, remote[m].sha) == (b.path, b.sha)
    ids = [f.memory_id for f in inp.local.values() if f.memory_id]
    assert len(ids) == len(set(ids))
    for f in inp.local.values():
        if f.memory_id:
            b = base_[f.memory_id]
            assert (f.path, f.sha) == (b.path, b.sha)
        else:  # only a new file the store's paths block (a file/directory clash) stays unsent
            assert inp.access == "read_write"
            assert not _fits({r.path for r in remote.values()}, f.path)
    for m in base_:
        assert m in ids or m in inp.deletes_held
    for m, r in remote.items():
        assert m in base_ or (
            m in inp.skipped and (inp.skipped[m].path, inp.skipped[m].sha) == (r.path, r.sha)
        )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    worlds(),
    st.sampled_from(["read_write", "read_only"]),
    st.sampled_from(["enabled", "log_only", "disabled"]),
)
def test_property_one_plan_reaches_the_fixed_point(world, access, deletions):
    base_, local, remote = world
    inp = Inputs(
        base=base_,
        local=local,
        remote=remote,
        remote_order=tuple(sorted(remote, key=lambda m: remote[m].path)),
        access=access,
        deletions=deletions,
    )
    after = apply_plan(inp, plan_store(inp))
    _check_fixed_point(after)
    assert plan_store(after).empty


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.integers(1, 4), st.integers(1, 9), st.sampled_from(["read_write", "read_only"]))
def test_property_limits_converge_and_notices_are_not_repeated(world, max_files, max_bytes, access):
    base_, local, remote = world
    inp = Inputs(
        base=base_,
        local=local,
        remote=remote,
        remote_order=tuple(sorted(remote, key=lambda m: remote[m].path)),
        access=access,
        max_files=max_files,
        max_bytes=max_bytes,
    )
    skipped_ids = []
    for _ in range(4):
        p = plan_store(inp)
        if p.empty:
            break
        skips = [a.memory_id for a in p.bookkeeping if isinstance(a, Skip)]
        assert len(skips) == len([n for n in p.notices if n.kind in ("over-limit", "not-materialised")])
        skipped_ids += skips
        inp = apply_plan(inp, p)
    else:
        pytest.fail("no fixed point after 4 plans")
    assert len(skipped_ids) == len(set(skipped_ids))  # one notice per memory
    viewed = [f for f in inp.local.values() if f.memory_id]
    assert len(viewed) <= max_files and sum(f.size for f in viewed) <= max_bytes


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.data())
def test_property_refused_bad_utf8_holds_and_skips_reach_a_fixed_point(world, data):
    base_, local, remote = world
    pick = lambda xs: data.draw(st.lists(st.sampled_from(sorted(xs)), unique=True)) if xs else []  # noqa: E731
    local = dict(local)
    for path in pick(local):
        local[path] = replace(local[path], bad_utf8=True)
    refused = {path: RefusedEntry(local[path].sha) for path in pick(local)}
    skipped = {m: SkippedEntry(remote[m].path, remote[m].sha) for m in pick(remote)}
    held = frozenset(pick(base_))
    refuse = frozenset(pick(SHAS))
    inp = Inputs(
        base=base_,
        local=local,
        remote=remote,
        remote_order=tuple(sorted(remote, key=lambda m: remote[m].path)),
        refused=refused,
        skipped=skipped,
        deletes_held=held,
        deletions=data.draw(st.sampled_from(["enabled", "log_only"])),
    )
    for _ in range(4):
        p = plan_store(inp)
        if p.empty:
            break
        inp = apply_plan(inp, p, refuse=refuse)
    else:
        pytest.fail("no fixed point after 4 plans")
    for f in inp.local.values():  # what was not sent is exactly what may not be sent
        b = inp.base.get(f.memory_id) if f.memory_id else None
        if b is None or (b.path, b.sha) != (f.path, f.sha):
            assert (
                f.bad_utf8
                or (f.path in inp.refused and inp.refused[f.path].sha == f.sha)
                or not _fits({r.path for r in inp.remote.values()}, f.path)
            )


@given(
    memory_id=st.one_of(st.text(max_size=40), st.from_regex(r"mem_[A-Za-z0-9]{1,30}", fullmatch=True)),
    tail=st.text(max_size=8),
    mode=st.sampled_from(["temp", "temp+tail", "other"]),
)
def test_is_temp_path_answers_as_comparing_with_temp_path(memory_id, tail, mode):
    """The planner asks `is_temp_path` for every memory instead of building its temporary path:
    the same answer for the memory's own temporary path, another one, or any path."""
    path = {"temp": temp_path(memory_id), "temp+tail": temp_path(memory_id) + tail, "other": "/" + tail}[mode]
    assert is_temp_path(path, memory_id) == (path == temp_path(memory_id))
    assert is_temp_path(temp_path(memory_id), memory_id)
