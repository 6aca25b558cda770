"""How one sync's notices become lines of .sync-notices.log (apply.summarise_notices)."""

from __future__ import annotations

from memfs.sync.apply import summarise_notices
from memfs.sync.plan import Notice


def lines(notices, limit=3):
    return [(n.kind, n.path, n.details, n.kept) for n in summarise_notices(notices, limit)]


def test_few_notices_are_all_kept_in_order():
    ns = [
        Notice("over-limit", "/a", "d"),
        Notice("upload-refused", "/b", "e"),
        Notice("over-limit", "/c", "d"),
    ]
    assert lines(ns) == [(n.kind, n.path, n.details, n.kept) for n in ns]


def test_a_mass_event_becomes_limit_lines_per_kind():
    ns = [Notice("over-limit", f"/o{i}", "too many") for i in range(10)]
    ns.insert(4, Notice("upload-refused", "/r", "bad"))
    assert lines(ns) == [
        ("over-limit", "/o0", "too many", False),
        ("over-limit", "/o1", "too many", False),
        (
            "over-limit",
            "/o2",
            "too many; and 7 more over-limit path(s) in this sync, not listed one by one",
            False,
        ),
        ("upload-refused", "/r", "bad", False),  # other kinds keep their place
    ]


def test_a_notice_naming_a_kept_copy_is_never_folded():
    ns = [Notice("over-limit", f"/o{i}", "x") for i in range(5)] + [
        Notice("over-limit", "/k", "x", kept=True)
    ]
    out = lines(ns)
    assert ("over-limit", "/k", "x", True) in out
    assert len(out) == 4 and "and 2 more" in out[2][2]


def test_exactly_the_limit_is_not_summarised():
    ns = [Notice("deleted-by-store", f"/d{i}", "x") for i in range(3)]
    assert [p for _, p, _, _ in lines(ns)] == ["/d0", "/d1", "/d2"]
