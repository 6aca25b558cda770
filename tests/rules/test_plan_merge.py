"""Pure tests of the plan in merge mode (SEMANTICS.md#d-merge, memfs/sync/plan.py): a content
conflict asks for its merge (Plan.merge_wanted), and planned again with the merge's result the
file takes the merged text (pushed over the store's version) or, on a true conflict, the store's
text with the agent's version in a conflict copy created beside it. No I/O."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memfs.sync.merge import conflict_copy_path
from memfs.sync.plan import (
    EMPTY_BASE,
    MERGE_TRIES,
    KeepLocal,
    Materialise,
    MergeResult,
    MergeWanted,
    Notice,
    PlaceCopy,
    PushCreate,
    PushUpdate,
    RemoveLocal,
    SetBase,
)
from tests.rules.test_plan import S0, S1, S2, B, L, M, N, R, Z, base, mat, plan

pytestmark = pytest.mark.timeout(30)

SM = "smerged"  # the merged text's sha
WHEN = datetime(2026, 12, 4, 22, 40, 12, tzinfo=UTC)
MERGE = dict(on_conflict="merge", copy_who="sess_1", copy_when=WHEN)
COPY = conflict_copy_path("/a", "sess_1", WHEN)


def actions(p):
    return [*p.view, *p.bookkeeping, *p.notices, *p.push]


def both_edited(**kw):
    return plan([B(M, "/a", S0)], [L("/a", M, S1)], [R(M, "/a", S2)], **MERGE, **kw)


def test_a_content_conflict_asks_for_its_merge_and_leaves_the_file_alone_meanwhile():
    p = both_edited()
    assert p.merge_wanted == (MergeWanted(M, "/a", S0, S2, S1),)
    assert actions(p) == []  # no view change, no base moved, nothing pushed: the next plan settles it


def test_merged_the_view_takes_the_merge_and_it_is_pushed_over_the_stores_version():
    p = both_edited(merges={(S0, S2, S1): MergeResult(SM, 20)})
    assert p.merge_wanted == ()
    assert actions(p) == [
        Materialise(M, "/a", SM, 20),
        base(M, "/a", S2),
        Notice("merged", "/a"),
        PushUpdate(M, "/a", S2, None, SM),
    ]


def test_a_merged_push_says_it_carries_a_merge_a_plain_one_does_not():
    """The engine counts the 409s of merged pushes only (Inputs.merge_tries)."""
    [merged] = both_edited(merges={(S0, S2, S1): MergeResult(SM, 20)}).push
    assert merged.merge
    [plain] = plan([B(M, "/a", S0)], [L("/a", M, S1)], [R(M, "/a", S0)], **MERGE).push
    assert plain == PushUpdate(M, "/a", S0, None, S1) and not plain.merge


@pytest.mark.parametrize("tries", range(MERGE_TRIES))
def test_below_the_bound_a_conflict_is_merged_again(tries):
    p = both_edited(merge_tries={M: tries})
    assert p.merge_wanted == (MergeWanted(M, "/a", S0, S2, S1),)
    p = both_edited(
        merge_tries={M: tries, "mem_other": MERGE_TRIES}, merges={(S0, S2, S1): MergeResult(SM, 20)}
    )
    assert Materialise(M, "/a", SM, 20) in p.view and p.push[0].merge


def store_kept_agents_copied(memory: str) -> list:
    """A true conflict at /a: the store's S2 (memory `memory`) in the file, the agent's S1 in the
    conflict copy, placed, named by a notice and created on the store."""
    return [
        mat(memory, "/a", S2),
        PlaceCopy(COPY, S1, Z[S1]),
        base(memory, "/a", S2),
        Notice("conflict-copy", "/a"),
        PushCreate(COPY, S1, Z[S1]),
    ]


def test_after_merge_tries_superseded_merges_the_next_conflict_is_a_true_one():
    """SEMANTICS.md#d-merge: a further move merges again a few times, then counts as a conflict:
    the store's text stays, the agent's (the last merge, which holds its lines) goes into a copy."""
    p = both_edited(merge_tries={M: MERGE_TRIES}, merges={(S0, S2, S1): MergeResult(SM, 20)})
    assert p.merge_wanted == ()  # not asked for: the bound settles it without merging
    assert actions(p) == store_kept_agents_copied(M)
    [n] = p.notices
    assert COPY in n.details and "again after each merge" in n.details


def test_a_true_conflict_keeps_the_stores_text_and_puts_the_agents_in_a_conflict_copy():
    p = both_edited(merges={(S0, S2, S1): MergeResult(None)})
    assert actions(p) == store_kept_agents_copied(M)
    [n] = p.notices
    assert COPY in n.details  # the notice names the copy


def test_a_conflict_copy_name_already_taken_gets_another():
    p = plan(
        [B(M, "/a", S0)],
        [L("/a", M, S1), L(COPY, None, "other")],
        [R(M, "/a", S2)],
        **MERGE,
        merges={(S0, S2, S1): MergeResult(None)},
    )
    [copy] = [a for a in p.view if isinstance(a, PlaceCopy)]
    assert copy.path != COPY and copy.path == conflict_copy_path("/a", "sess_1-2", WHEN)


def test_without_a_time_for_copies_a_true_conflict_is_the_seeds_rule():
    p = plan(
        [B(M, "/a", S0)],
        [L("/a", M, S1)],
        [R(M, "/a", S2)],
        on_conflict="merge",
        merges={(S0, S2, S1): MergeResult(None)},
    )
    assert actions(p) == [
        KeepLocal("/a", S1),
        mat(M, "/a", S2),
        base(M, "/a", S2),
        Notice("store-won-conflict", "/a", kept=True),
    ]


def test_a_local_rename_with_an_edit_merges_and_keeps_the_local_path():
    p = plan(
        [B(M, "/a", S0)],
        [L("/b", M, S1)],
        [R(M, "/a", S2)],
        **MERGE,
        merges={(S0, S2, S1): MergeResult(SM, 20)},
    )
    assert Materialise(M, "/b", SM, 20) in p.view
    assert p.push == (PushUpdate(M, "/a", S2, "/b", SM),)


def test_both_created_one_path_merge_on_an_empty_base():
    args = ([], [L("/a", None, S1)], [R(N, "/a", S2)])
    p = plan(*args, **MERGE)
    assert p.merge_wanted == (MergeWanted(N, "/a", EMPTY_BASE, S2, S1),)
    assert actions(p) == []  # the new file waits, not pushed as a create (it would meet a 409)
    p = plan(*args, **MERGE, merges={(EMPTY_BASE, S2, S1): MergeResult(SM, 20)})
    assert actions(p) == [
        Materialise(N, "/a", SM, 20),
        SetBase(B(N, "/a", S2)),
        Notice("merged", "/a"),
        PushUpdate(N, "/a", S2, None, SM),
    ]


def test_both_created_one_path_in_conflict_the_agents_file_becomes_a_conflict_copy():
    p = plan(
        [], [L("/a", None, S1)], [R(N, "/a", S2)], **MERGE, merges={(EMPTY_BASE, S2, S1): MergeResult(None)}
    )
    assert actions(p) == [RemoveLocal("/a"), *store_kept_agents_copied(N)]


@pytest.mark.parametrize("case", ["read_only", "bad_utf8", "store_wins"])
def test_no_merge_where_the_seeds_rule_holds(case):
    """A read-only store wins every difference; content that is not UTF-8 cannot merge; and
    --on-conflict store-wins is the seeds' rule to the letter: none of them asks for a merge."""
    kw: dict = dict(MERGE)
    local = L("/a", M, S1, bad=case == "bad_utf8")
    if case == "read_only":
        kw["access"] = "read_only"
    if case == "store_wins":
        kw["on_conflict"] = "store-wins"
    p = plan([B(M, "/a", S0)], [local], [R(M, "/a", S2)], **kw)
    assert p.merge_wanted == ()
    assert KeepLocal("/a", S1) in p.view and mat(M, "/a", S2) in p.view
    assert not any(isinstance(a, PlaceCopy) for a in p.view)


def test_deletion_against_modification_keeps_the_seeds_decision():
    # the store deleted what the agent changed: the file goes, the agent's version is kept
    p = plan([B(M, "/a", S0)], [L("/a", M, S1)], [], **MERGE)
    assert p.merge_wanted == () and KeepLocal("/a", S1) in p.view and RemoveLocal("/a") in p.view
    # the agent deleted what the store changed: restored
    p = plan([B(M, "/a", S0)], [], [R(M, "/a", S2)], **MERGE)
    assert p.merge_wanted == () and mat(M, "/a", S2) in p.view
