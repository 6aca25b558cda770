"""The one rule for "what is not on the store" (memfs.sync.not_on_store), without a kernel."""

from __future__ import annotations

import hashlib

import pytest

from memfs.mount.state import State
from memfs.records import LocalFile, StoreInfo
from memfs.session.offline import describe_not_on_store
from memfs.sync.not_on_store import HELD_CLASH, HELD_NOT_UTF8, not_on_store

SID = "memstore_1"
STORE = StoreInfo(SID, "Notes", "notes", "read_write")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


A, B, C = sha(b"a"), sha(b"b"), sha(b"c")


@pytest.fixture
def state(tmp_path):
    st = State(tmp_path / "state")
    st.set_store(SID, "Notes", "notes", "read_write")
    st.set_baseline(SID, "mem_a", "/a", A, 1)
    st.set_baseline(SID, "mem_b", "/b", B, 1)
    yield st
    st.close()


def check(state, local: list[LocalFile], deletions: str = "enabled", store: StoreInfo = STORE):
    return not_on_store(
        state, store, {f.path: f for f in local}, deletions=deletions, max_files=2000, max_bytes=1 << 25
    )


def test_nothing_differs_nothing_is_missing(state):
    n = check(state, [LocalFile("/a", "mem_a", A, 1), LocalFile("/b", "mem_b", B, 1)])
    assert n.count == 0 and n.summary()["paths"] == {
        "staged": [],
        "refused": [],
        "held": [],
        "deletes_held": [],
    }


def test_a_swap_is_two_staged_changes_not_three(state):
    n = check(state, [LocalFile("/a", "mem_b", B, 1), LocalFile("/b", "mem_a", A, 1)])
    assert n.staged == ["/a", "/b"] and n.count == 2


def test_edit_create_delete_are_staged(state):
    n = check(state, [LocalFile("/a", "mem_a", C, 1), LocalFile("/new", None, C, 1)])
    assert n.staged == ["/a", "/b", "/new"]


def test_not_utf8_and_refused_files_are_named_with_reasons(state):
    state.set_refused(SID, "/big", C, "413 request_too_large: too big")
    synced = [LocalFile("/a", "mem_a", A, 1), LocalFile("/b", "mem_b", B, 1)]
    bad = LocalFile("/bad", None, sha(b"\xff"), 1, bad_utf8=True)
    n = check(state, [*synced, bad, LocalFile("/big", None, C, 1)])
    assert n.held == {"/bad": HELD_NOT_UTF8} and n.refused == {"/big": "413 request_too_large: too big"}
    assert n.staged == [] and n.count == 2
    # an edit that is not UTF-8 is held too (the memory keeps its last good content)
    n = check(state, [LocalFile("/a", "mem_a", sha(b"\xff"), 1, bad_utf8=True), synced[1]])
    assert n.held == {"/a": HELD_NOT_UTF8} and n.count == 1
    # the refused file with other content is staged again (a refusal waits for a change)
    n = check(state, [*synced, LocalFile("/big", None, A, 1)])
    assert n.staged == ["/big"] and not n.refused


def test_a_file_where_the_store_has_a_directory_is_held(state):
    # the store holds /d/x, not materialised here (over the limits): a file /d would be a 409
    state.set_skipped(SID, "mem_d", "/d/x", C, 1, "over-limit")
    n = check(
        state, [LocalFile("/a", "mem_a", A, 1), LocalFile("/b", "mem_b", B, 1), LocalFile("/d", None, A, 1)]
    )
    assert n.held == {"/d": HELD_CLASH} and n.count == 1


def test_held_deletes_are_named_but_not_counted(state):
    n = check(state, [LocalFile("/a", "mem_a", A, 1)], deletions="log_only")
    assert n.deletes_held == ["/b"] and n.count == 0
    state.add_delete_held(SID, "mem_b")  # recorded by the tick that held it
    n = check(state, [LocalFile("/a", "mem_a", A, 1)], deletions="log_only")
    assert n.deletes_held == ["/b"] and n.count == 0
    assert check(state, [LocalFile("/a", "mem_a", A, 1)], deletions="enabled").staged == ["/b"]


def test_a_read_only_store_has_nothing_to_push(state):
    ro = StoreInfo(SID, "Notes", "notes", "read_only")
    assert check(state, [LocalFile("/a", "mem_a", C, 1)], store=ro).count == 0


def test_the_named_list_is_bounded_with_a_count_of_the_rest(state):
    n = check(
        state,
        [LocalFile(f"/new{i:02}", None, C, 1) for i in range(25)]
        + [LocalFile("/a", "mem_a", A, 1), LocalFile("/b", "mem_b", B, 1)],
    )
    lines = describe_not_on_store({"not_on_store": {SID: n.summary()}, "slugs": {SID: "notes"}}, limit=10)
    assert lines[0] == "notes/new00 (staged)" and len(lines) == 11 and lines[-1] == "and 15 more"
