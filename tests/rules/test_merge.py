"""The three-way merge of concurrent writers (memfs/sync/merge.py, docs/SEMANTICS.md#d-merge): pure.

Properties over generated texts (each side alone, identical changes, appends by both, disjoint edits
by both), then the concrete cases: two writers appending, three writers each rewriting their own
section, one line edited differently by both, CRLF, missing final newlines, an empty base, unicode;
the merge policy and the conflict copy's name.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import PurePosixPath

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memfs import limits
from memfs.limits import PathError, check_memory_path
from memfs.sync.merge import (
    DEFAULT_POLICY,
    Conflict,
    Merged,
    MergePolicy,
    conflict_copy_path,
    is_conflict_copy,
    merge3,
    merge_bytes,
)

pytestmark = pytest.mark.timeout(120)
PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# few distinct lines, so that the edit scripts meet repeated lines, blank lines, CRLF and unicode
LINE = st.sampled_from(["a\n", "b\n", "c\r\n", "\n", "é ☃\n", "a"])


@st.composite
def texts(draw: st.DrawFn) -> str:
    lines = draw(st.lists(LINE, max_size=12))
    tail = draw(st.sampled_from(["", "", "z", "a", "\r"]))  # a last line without a newline, or none
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines) + tail


@PROPS
@given(texts(), texts())
def test_only_the_store_changed(base, x):
    assert merge3(base, x, base) == Merged(x, both_changed=False)


@PROPS
@given(texts(), texts())
def test_only_the_agent_changed(base, y):
    assert merge3(base, base, y) == Merged(y, both_changed=False)


@PROPS
@given(texts(), texts())
def test_the_same_change_on_both_sides(base, x):
    assert merge3(base, x, x) == Merged(x, both_changed=x != base)


@PROPS
@given(texts(), texts(), texts())
def test_deterministic_and_bytes_agree(base, x, y):
    result = merge3(base, x, y)
    assert merge3(base, x, y) == result
    expected = result.text.encode() if isinstance(result, Merged) else None
    assert merge_bytes(base.encode(), x.encode(), y.encode()) == expected


NEWLINE_LINES = st.lists(st.sampled_from(["a\n", "b\n", "\n", "c\r\n", "ü\n"]), max_size=6)


@PROPS
@given(NEWLINE_LINES, NEWLINE_LINES, NEWLINE_LINES, st.sampled_from(["", "end"]))
def test_appends_by_both_keep_both_the_stores_first(base, s, ell, last):
    """Both appended: the store's lines, then the agent's (identical appends once). The agent's last
    line may lack its newline; the merge then ends as the agent's text does."""
    b, s_text, l_text = "".join(base), "".join(s), "".join(ell) + last
    result = merge3(b, b + s_text, b + l_text)
    expected = b + s_text if s_text == l_text else b + s_text + l_text
    assert result == Merged(expected, both_changed=bool(s_text) and bool(l_text))


@st.composite
def disjoint_edits(draw: st.DrawFn) -> tuple[list[str], list[tuple[int, int, int, list[str]]]]:
    """Unique base lines and edits (start, end, side, new lines) in base order that do not overlap:
    a replaced range, a deletion or an insertion; new lines unique too. Two insertions by different
    sides at one point are the union case (tested above), so an insertion point is never shared."""
    n = draw(st.integers(0, 14))
    base = [f"base {i}\n" for i in range(n)]
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=8)))
    edits: list[tuple[int, int, int, list[str]]] = []
    for k, (start, end) in enumerate(zip(cuts[::2], cuts[1::2], strict=False)):
        if edits and (start, end) == (edits[-1][0], edits[-1][1]) == (start, start):
            continue
        side = draw(st.integers(0, 1))
        new = [
            f"side {side} edit {k} line {m}\n" for m in range(draw(st.integers(0 if end > start else 1, 3)))
        ]
        edits.append((start, end, side, new))
    return base, edits


def _apply(base: list[str], edits: list[tuple[int, int, int, list[str]]]) -> str:
    out, pos = [], 0
    for start, end, _, new in edits:
        out += base[pos:start] + new
        pos = end
    return "".join(out + base[pos:])


@PROPS
@given(disjoint_edits())
def test_each_sides_change_that_does_not_overlap_is_in_the_result(case):
    base, edits = case
    # Two edits of one side that touch (one ends where the next starts) are one changed range in
    # any diff; an edit of the other side between them is inside that range: a conflict, rightly.
    # (Found by hypothesis: the store deleting lines 0 and 1, the agent inserting between them.)
    for x in edits:
        for e1 in edits:
            for e2 in edits:
                if e1[2] == e2[2] != x[2] and e1 is not e2 and e1[1] == e2[0] and x[0] <= e1[1] <= x[1]:
                    assume(False)
    store = _apply(base, [e for e in edits if e[2] == 0])
    local = _apply(base, [e for e in edits if e[2] == 1])
    result = merge3("".join(base), store, local)
    assert isinstance(result, Merged), (store, local)
    assert result.text == _apply(base, edits)


# concrete cases


def test_two_writers_appending_to_one_notes_file():
    base = "# notes\n- one\n"
    assert merge3(base, base + "- from store\n", base + "- from agent\n") == Merged(
        "# notes\n- one\n- from store\n- from agent\n", both_changed=True
    )
    assert merge3(base, base + "- same\n", base + "- same\n") == Merged(base + "- same\n", both_changed=True)


def test_three_writers_each_rewriting_their_own_section():
    sections = [f"## {who}\nstatus: idle\nnext: nothing\n\n" for who in ("alpha", "beta", "gamma")]
    base = "".join(sections)
    mine = [
        base.replace(f"## {who}\nstatus: idle", f"## {who}\nstatus: busy {who}")
        for who in ("alpha", "beta", "gamma")
    ]
    store = mine[0]  # alpha's write landed first; beta and gamma started from base
    for later in mine[1:]:
        result = merge3(base, store, later)
        assert isinstance(result, Merged) and result.both_changed
        store = result.text
    assert store == base.replace("status: idle", "status: busy {}").format("alpha", "beta", "gamma")


def test_the_same_line_edited_differently_is_a_conflict_at_the_stores_line():
    base = "".join(f"line {i}\n" for i in range(1, 8))
    store = "new top\nnew top 2\n" + base.replace("line 5\n", "store's 5\n")
    local = base.replace("line 5\n", "agent's 5\n")
    assert merge3(base, store, local) == Conflict(regions=1, first_line=7)
    two = local.replace("line 2\n", "agent's 2\n")
    assert merge3(base, store.replace("line 2\n", "store's 2\n"), two) == Conflict(regions=2, first_line=4)
    assert merge_bytes(base.encode(), store.encode(), local.encode()) is None


def test_what_counts_as_overlapping():
    base = "a\nb\nc\nd\n"
    # an agent's insertion inside the range the store replaced
    assert isinstance(merge3(base, "a\nX\nd\n", "a\nb\nnew\nc\nd\n"), Conflict)
    # a deletion against an edit of the same line
    assert merge3(base, "a\nc\nd\n", "a\nB\nc\nd\n") == Conflict(regions=1, first_line=2)
    # adjacent changes merge (git would conflict): an edit of the last line and an append after it
    assert merge3(base, "a\nb\nc\nD\n", base + "e\n") == Merged("a\nb\nc\nD\ne\n", both_changed=True)
    assert merge3(base, "A\nb\nc\nd\n", "a\nB\nc\nd\n") == Merged("A\nB\nc\nd\n", both_changed=True)
    # an insertion at the start of the other's replaced range goes before it
    assert merge3(base, "a\nB\nC\nd\n", "a\nnew\nb\nc\nd\n").text == "a\nnew\nB\nC\nd\n"
    # both deleted everything, or one emptied the file the other did not touch
    assert merge3(base, "", "") == Merged("", both_changed=True)
    assert merge3(base, "", base) == Merged("", both_changed=False)


def test_crlf_lines():
    base = "one\r\ntwo\r\nthree\r\n"
    result = merge3(base, "ONE\r\ntwo\r\nthree\r\n", base + "four\r\n")
    assert result == Merged("ONE\r\ntwo\r\nthree\r\nfour\r\n", both_changed=True)
    # a line whose ending changed is a changed line
    assert isinstance(merge3(base, "one\ntwo\r\nthree\r\n", "uno\r\ntwo\r\nthree\r\n"), Conflict)


def test_no_final_newline():
    # both appended after a last line without a newline: no glued lines, and the merge ends as the agent's
    assert merge3("a\nb", "a\nb\nS", "a\nb\nL") == Merged("a\nb\nS\nL", both_changed=True)
    assert merge3("a\nb", "a\nb\nS\n", "a\nb\nL") == Merged("a\nb\nS\nL", both_changed=True)
    assert merge3("a\nb", "a\nb\nS", "a\nb\nL\n") == Merged("a\nb\nS\nL\n", both_changed=True)
    # the agent only added the final newline; the store edited another line
    assert merge3("a\nb", "x\nb", "a\nb\n") == Merged("x\nb\n", both_changed=True)
    assert merge3("a\nb\n", "x\nb\n", "a\nb") == Merged("x\nb", both_changed=True)
    # the store's edit of the last line keeps the store's ending
    assert merge3("a\nb", "A\nb", "a\nB") == Merged("A\nB", both_changed=True)
    # the store's last line without a newline, the agent's append after the store's deleted tail
    assert merge3("a\nb\n", "a\nb\nS", "a\nb\nL\n") == Merged("a\nb\nS\nL\n", both_changed=True)


def test_an_empty_base_both_created_the_path():
    assert merge3("", "store\n", "agent\n") == Merged("store\nagent\n", both_changed=True)
    assert merge3("", "store", "agent") == Merged("store\nagent", both_changed=True)
    assert merge3("", "same\n", "same\n") == Merged("same\n", both_changed=True)
    assert merge3("", "", "agent") == Merged("agent", both_changed=False)
    assert merge_bytes(b"", b"", b"") == b""


def test_unicode():
    base = "café\n日本語\n🙂 smile\n"
    result = merge3(base, "café crème\n日本語\n🙂 smile\n", base + "e\u0301 decomposed\n")
    assert result == Merged("café crème\n日本語\n🙂 smile\ne\u0301 decomposed\n", both_changed=True)
    assert merge_bytes(base.encode(), base.encode(), "ü\n".encode()) == "ü\n".encode()
    # U+2028 and form feeds are not line breaks here: the edit is one line
    assert merge3("a\u2028b\n", "a\u2028B\n", "a\u2028b\n") == Merged("a\u2028B\n", both_changed=False)


def test_merge_bytes_refuses_what_is_not_utf8():
    assert merge_bytes(b"a\n", b"a\n\xff\n", b"a\nb\n") is None
    assert merge_bytes(b"\xc3", b"a\n", b"a\n") is None


def test_a_large_rewrite_is_bounded_in_time():
    """Edit scripts cost the square of the edits: past MAX_EDITS a side is one replaced range."""
    rng = random.Random(7)
    lines = [rng.choice("ab\n") + "\n" for _ in range(40_000)]
    base = "".join(lines)
    store = "".join(rng.choice("ab\n") + "\n" for _ in range(40_000))
    local = "".join(lines[:20_000] + ["agent\n"] + lines[20_001:])
    started = time.monotonic()
    assert isinstance(merge3(base, store, local), Conflict)
    assert merge3(base, store, base).text == store
    assert merge3(base, base + "x\n" * 3000, base + "y\n" * 3000).text == base + "x\n" * 3000 + "y\n" * 3000
    assert time.monotonic() - started < 20


def test_the_default_policy_merges_text_memories_not_structured_documents():
    for path in ("/notes/todo.md", "/a/NOTES.MD", "/log.txt", "/TODO", "/team/rows.csv", "/events.jsonl"):
        assert DEFAULT_POLICY.applies_to(path), path
    for path in ("/config.json", "/c.yaml", "/c.yml", "/pyproject.toml", "/page.html", "/x.py"):
        assert not DEFAULT_POLICY.applies_to(path), path
    assert MergePolicy(suffixes=(".json",)).applies_to("/config.json")
    assert not MergePolicy(suffixes=()).applies_to("/notes.md")


WHEN = datetime(2026, 12, 4, 22, 40, 12, tzinfo=UTC)


def test_the_conflict_copy_name():
    copy = conflict_copy_path("/notes/todo.md", "sess_01AB", WHEN)
    assert copy == "/notes/todo.conflict-sess_01AB-20261204T224012Z.md"
    assert is_conflict_copy(copy) and not is_conflict_copy("/notes/todo.md")
    assert conflict_copy_path("/TODO", "host", WHEN) == "/TODO.conflict-host-20261204T224012Z"
    assert conflict_copy_path("/.hidden", "h", WHEN) == "/.hidden.conflict-h-20261204T224012Z"
    assert conflict_copy_path("/a/b.tar.gz", "h", WHEN) == "/a/b.tar.conflict-h-20261204T224012Z.gz"
    # who is sanitised and capped; the time is written in UTC (a naive time is taken as UTC)
    assert (
        conflict_copy_path("/x.md", " ../ré mote:host\n", WHEN)
        == "/x.conflict-r-mote-host-20261204T224012Z.md"
    )
    assert conflict_copy_path("/x.md", "", WHEN) == "/x.conflict-unknown-20261204T224012Z.md"
    assert conflict_copy_path("/x.md", "w" * 200, WHEN) == f"/x.conflict-{'w' * 32}-20261204T224012Z.md"
    plus_one = WHEN.astimezone(timezone(timedelta(hours=1)))
    assert conflict_copy_path("/x.md", "h", plus_one) == conflict_copy_path(
        "/x.md", "h", WHEN.replace(tzinfo=None)
    )
    # a copy of a copy is recognisable, so none is made
    assert is_conflict_copy(conflict_copy_path(copy, "other", WHEN))


def test_a_long_name_loses_the_end_of_its_stem_never_its_suffix():
    for stem in ("n" * 300, "é" * 200, "🙂" * 80):
        copy = conflict_copy_path(f"/notes/{stem[:60]}/{stem}.markdown", "agent-7", WHEN)
        name = copy.rpartition("/")[2]
        assert check_memory_path(copy) == copy
        assert len(name.encode()) <= limits.MAX_COMPONENT_BYTES
        assert name.endswith("-agent-7-20261204T224012Z.markdown") and name.startswith(stem[:10])
    deep = "/" + "/".join(["d" * 100] * 9) + "/" + "n" * 100 + ".md"
    copy = conflict_copy_path(deep, "h", WHEN)
    assert check_memory_path(copy) == copy and len(copy.encode()) == limits.MAX_PATH_BYTES
    with pytest.raises(PathError):
        conflict_copy_path("/" + "/".join(["d" * 200] * 5) + "/x.md", "h", WHEN)


NAME_CHARS = st.characters(blacklist_categories=("Cc", "Cf", "Cs"), blacklist_characters="/\\\u2028\u2029")


@settings(max_examples=300, deadline=None)
@given(st.text(NAME_CHARS, min_size=1, max_size=300), st.text(max_size=60))
def test_every_conflict_copy_passes_the_path_rules(name, who):
    try:
        path = check_memory_path(f"/dir/{name}")
    except PathError:
        return
    copy = conflict_copy_path(path, who, WHEN)
    assert check_memory_path(copy) == copy
    assert copy.startswith("/dir/") and "/" not in copy[5:]
    assert is_conflict_copy(copy)
    suffix = PurePosixPath(path).suffix
    assert not suffix or PurePosixPath(copy).suffix == suffix
