"""check_memory_path's whole-path fast path (memfs/limits.py `_plain_memory_path`) never accepts
a path that the segment-by-segment rules refuse: compared over varied and random paths."""

from __future__ import annotations

import random

import pytest

from memfs import limits
from memfs.limits import PathError


def _full_rules(path: object) -> bool:
    """check_memory_path without the fast path: the rules as written segment by segment."""
    try:
        for seg in limits._segments(path):
            if seg == "":
                raise PathError("empty")
            limits.check_component(seg)
    except PathError:
        return False
    return True


CASES = [
    "/a",
    "/a/b/c.md",
    "/",
    "",
    "a/b",
    "//a",
    "/a//b",
    "/a/",
    "/./a",
    "/a/./b",
    "/a/../b",
    "/..",
    "/.",
    "/.hidden",
    "/a/.b",
    "/a.b/c..d",
    "/back\\slash",
    "/tab\there",
    "/new\nline",
    "/del\x7f",
    "/nul\x00",
    "/caf\u00e9",
    "/cafe\u0301",
    "/zw\u200dj",
    "/ls\u2028",
    "/" + "x" * 255,
    "/" + "x" * 256,
    "/a/" + "x" * 255,
    "/a/" + "x" * 256 + "/b",
    "/" + "/".join(["s"] * 20),
    "/" + "/".join(["s"] * 21),
    "/" + "/".join(["y" * 200] * 5),  # 1,005 bytes
    "/" + "/".join(["y" * 250] * 5),  # 1,255 bytes
    "/" + "a" * 1023,
    "/" + "a" * 1024,
    "/sp ace/x",
    "/~!@#$%^&*()_+=-`{}[]|;:'\",<>?",
    None,
    b"/bytes",
    42,
]


@pytest.mark.parametrize("path", CASES, ids=range(len(CASES)))
def test_fast_path_agrees_with_the_full_rules(path):
    fast = limits._plain_memory_path(path)
    full = _full_rules(path)
    assert not (fast and not full), f"fast path accepted {path!r}, which the rules refuse"
    try:
        limits.check_memory_path(path)
        accepted = True
    except PathError:
        accepted = False
    assert accepted == full


def test_fast_path_takes_the_common_paths():
    # What a store's paths look like: the fast path must actually decide them (else it buys nothing).
    for path in ("/a", "/notes/2026/plan.md", "/dir-1/sub_2/file 3.txt", "/" + "/".join(["d"] * 20)):
        assert limits._plain_memory_path(path), path


def test_random_paths_agree():
    rng = random.Random(18)
    alphabet = ["a", "b", ".", "/", "\\", " ", "\t", "\u00e9", "\u0301", "\u200b", "-", "x" * 120, "y" * 260]
    for _ in range(20_000):
        path = "/" + "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 14)))
        fast = limits._plain_memory_path(path)
        full = _full_rules(path)
        assert not (fast and not full), path
        try:
            limits.check_memory_path(path)
            accepted = True
        except PathError:
            accepted = False
        assert accepted == full, path
