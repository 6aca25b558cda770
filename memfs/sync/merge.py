"""Three-way line merge of concurrent writers' text (docs/SEMANTICS.md#d-merge). Pure: no I/O.

`merge3(base, store, local)`: base is the version the local change started from, store the store's
current version, local the agent's. How regions are formed: each side is diffed against base on
line lists — the common head and tail stripped, then a shortest edit script (Myers; difflib's
SequenceMatcher was tried and takes seconds to minutes on 100 KB memories with many equal lines,
such as blank lines in Markdown) — giving that side's hunks: base ranges it replaced, separated by
at least one unchanged line (an empty range is a pure insertion). The hunks of
both sides, ordered by base position, are grouped: two hunks of different sides belong to one region
when their base ranges intersect, when both insert at the same point, or when one inserts strictly
inside the other's range. Everything else merges, adjacent changes too (git conflicts on adjacent
lines; here a change of line 3 and an append after it both stay). A region is then:
- changed by one side only: that side's lines;
- changed identically by both: those lines, once;
- pure insertions by both at one point: the store's lines, then the local ones (git's `union`, the
  append case: two agents appending to one notes file keep both lines);
- anything else: a conflict (`Conflict`, nothing merged).

Lines are split on "\\n" only (a "\\r\\n" line is one line ending "\\r\\n"; "\\r", form feeds and U+2028
are not line breaks here, unlike `str.splitlines`). A text that does not end with "\\n" is split as
if it did, so `a\\nb` plus an appended line is an insertion after `b`, not a rewrite of `b`; whether the
merge ends without a newline follows the side(s) whose last line ends it: a side's own last line
keeps its own ending, and where both sides' last lines end the merge (unchanged or changed alike),
the side that changed the ending from base wins. So `merge3(b, x, b) == x` byte for byte.

`MergePolicy` says which files merge at all. The default merges text memories, where a line is a
unit of meaning and a union of lines is still a valid document: Markdown, plain text, reStructuredText,
Org, logs, CSV/TSV rows, JSON Lines, and files with no suffix (notes, TODO: memory files are text).
It does not merge structured documents whose validity spans lines — .json, .yaml/.yml, .toml, .xml,
.html, source code: a union of two JSON documents is not JSON, and a silently merged config is worse
than a conflict the agent is told about. A policy is a setting: pass another `MergePolicy`.

`conflict_copy_path` names the agent's version kept beside the original on a true conflict:
`/notes/todo.md` -> `/notes/todo.conflict-<who>-20261204T224012Z.md` (same directory, same suffix,
sorts with the original's stem, passes `check_memory_path`, the stem truncated when long).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath

from memfs.limits import MAX_COMPONENT_BYTES, MAX_PATH_BYTES, PathError, check_memory_path

# A side that inserted and deleted more lines than this (between its first and last change) is
# taken as one replaced range: the edit script's cost grows with its square (~0.1 s at 400 on a quiet core).
MAX_EDITS = 400


@dataclass(frozen=True)
class Merged:
    text: str  # the merged text
    both_changed: bool  # both sides changed something relative to base: a real merge, not a fast-forward


@dataclass(frozen=True)
class Conflict:
    regions: int  # how many regions both sides changed differently
    first_line: int  # 1-based line in the store's text where the first conflicting region starts


@dataclass(frozen=True)
class _Hunk:
    side: int  # 0 = store, 1 = local
    b0: int  # base range [b0, b1) replaced by side[s0:s1]
    b1: int
    s0: int
    s1: int


def _lines(text: str) -> tuple[list[str], bool]:
    """Lines each ending in "\\n" (a missing final one added), and whether the text ended with one."""
    if not text:
        return [], True
    parts = text.split("\n")
    eol = parts[-1] == ""
    if eol:
        parts.pop()
    return [p + "\n" for p in parts], eol


def _snakes(a: list[str], b: list[str]) -> list[tuple[int, int, int]] | None:
    """Matching blocks (i, j, length) of a shortest edit script from a to b (Myers' O(ND) greedy
    walk), or None when it takes more than MAX_EDITS insertions and deletions."""
    n, m = len(a), len(b)
    max_d = min(MAX_EDITS, n + m)
    off = max_d + 1
    v = [0] * (2 * max_d + 3)  # v[off + k]: furthest x reached on diagonal k = x - y
    trace: list[list[int]] = []
    for d in range(max_d + 1):
        trace.append(v[:])
        for k in range(-d, d + 1, 2):
            x = (
                v[off + k + 1]
                if k == -d or (k != d and v[off + k - 1] < v[off + k + 1])
                else v[off + k - 1] + 1
            )
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            v[off + k] = x
            if x >= n and y >= m:
                return _backtrack(trace, d, n, m, off)
    return None


def _backtrack(trace: list[list[int]], depth: int, x: int, y: int, off: int) -> list[tuple[int, int, int]]:
    blocks = []
    for d in range(depth, 0, -1):
        v, k = trace[d], x - y
        down = k == -d or (k != d and v[off + k - 1] < v[off + k + 1])  # an insertion from b
        pk = k + 1 if down else k - 1
        px = v[off + pk]
        mx = px if down else px + 1  # where the snake to (x, y) started
        if x > mx:
            blocks.append((mx, mx - k, x - mx))
        x, y = px, px - pk
    if x > 0:
        blocks.append((0, 0, x))
    return blocks[::-1]


def _hunks(side: int, base: list[str], other: list[str]) -> list[_Hunk]:
    """The ranges of base that `other` replaced: the common head and tail first (cheap, and the
    common case: an append, one edited line), a shortest edit script of what is left between them;
    past MAX_EDITS, all of it as one replaced range (which then conflicts with any change inside)."""
    head = 0
    limit = min(len(base), len(other))
    while head < limit and base[head] == other[head]:
        head += 1
    tail = 0
    while tail < limit - head and base[-1 - tail] == other[-1 - tail]:
        tail += 1
    mid_b, mid_o = base[head : len(base) - tail], other[head : len(other) - tail]
    if not mid_b and not mid_o:
        return []
    blocks = _snakes(mid_b, mid_o) if mid_b and mid_o else []
    hunks, i, j = [], 0, 0
    for bi, bj, size in [*(blocks or []), (len(mid_b), len(mid_o), 0)]:
        if bi > i or bj > j:
            hunks.append(_Hunk(side, head + i, head + bi, head + j, head + bj))
        i, j = bi + size, bj + size
    return hunks


def _touches(g0: int, g1: int, h: _Hunk) -> bool:
    """Whether hunk h must be decided together with a region spanning base [g0, g1)."""
    if g0 == g1 and h.b0 == h.b1:
        return g0 == h.b0  # two insertions at one point
    if g0 == g1:
        return h.b0 < g0 < h.b1  # an insertion strictly inside h
    if h.b0 == h.b1:
        return g0 < h.b0 < g1
    return max(g0, h.b0) < min(g1, h.b1)


def _regions(hunks: list[_Hunk]) -> list[tuple[int, int, list[_Hunk]]]:
    """Both sides' hunks grouped into regions (base start, base end, members), in base order.
    Hunks of one side never touch each other (an edit script separates them by equal lines)."""
    out: list[tuple[int, int, list[_Hunk]]] = []
    for h in sorted(hunks, key=lambda h: (h.b0, h.b1, h.side)):
        if out and _touches(out[-1][0], out[-1][1], h):
            g0, g1, members = out[-1]
            out[-1] = (min(g0, h.b0), max(g1, h.b1), [*members, h])
        else:
            out.append((h.b0, h.b1, [h]))
    return out


def _span(members: list[_Hunk], g0: int, g1: int) -> tuple[int, int]:
    """The side's lines standing for base [g0, g1): its hunks there plus the equal lines around them."""
    first, last = members[0], members[-1]
    return first.s0 - (first.b0 - g0), last.s1 + (g1 - last.b1)


def merge3(base: str, store: str, local: str) -> Merged | Conflict:
    """Three-way line merge (the module's docstring has the rule). Deterministic."""
    b, b_eol = _lines(base)
    sides = [_lines(store), _lines(local)]
    (s, s_eol), (loc, l_eol) = sides
    out: list[str] = []
    conflicts: list[int] = []  # store line index of each conflicting region
    # the side line indices of the last line written: the final newline follows whose line ends the merge
    last: list[int | None] = [None, None]
    pos = 0  # base position written up to
    shift = [0, 0]  # side index minus base index in the equal stretch at pos

    def take(side: int, lines: list[str], i0: int, i1: int) -> None:
        out.extend(lines[i0:i1])
        if i1 > i0:
            last[side], last[1 - side] = i1 - 1, None

    hunks = _hunks(0, b, s) + _hunks(1, b, loc)
    for g0, g1, members in _regions(hunks):
        if g0 > pos:  # unchanged by both
            out.extend(b[pos:g0])
            last[:] = [g0 - 1 + shift[0], g0 - 1 + shift[1]]
        spans = []
        for side in (0, 1):
            mine = [h for h in members if h.side == side]
            spans.append(_span(mine, g0, g1) if mine else (g0 + shift[side], g1 + shift[side]))
        (s0, s1), (l0, l1) = spans
        touched = {h.side for h in members}
        if touched == {0}:
            take(0, s, s0, s1)
        elif touched == {1}:
            take(1, loc, l0, l1)
        elif s[s0:s1] == loc[l0:l1]:
            out.extend(s[s0:s1])
            if s1 > s0:
                last[:] = [s1 - 1, l1 - 1]
        elif g0 == g1:  # both inserted at one point: the store's lines first
            take(0, s, s0, s1)
            take(1, loc, l0, l1)
        else:
            conflicts.append(s0)
        shift = [s1 - g1, l1 - g1]
        pos = g1
    if conflicts:
        return Conflict(regions=len(conflicts), first_line=conflicts[0] + 1)
    if pos < len(b):
        out.extend(b[pos:])
        last[:] = [len(b) - 1 + shift[0], len(b) - 1 + shift[1]]
    ends_store, ends_local = last[0] == len(s) - 1, last[1] == len(loc) - 1
    if ends_store and ends_local:
        eol = s_eol if s_eol != b_eol else l_eol
    else:
        eol = s_eol if ends_store else l_eol if ends_local else True
    text = "".join(out)
    if not eol and text:
        text = text[:-1]
    return Merged(text=text, both_changed=store != base and local != base)


def merge_bytes(base: bytes, store: bytes, local: bytes) -> bytes | None:
    """merge3 on UTF-8: the merged bytes, or None when a side is not UTF-8 or the merge conflicts."""
    try:
        texts = [t.decode("utf-8") for t in (base, store, local)]
    except UnicodeDecodeError:
        return None
    result = merge3(*texts)
    return result.text.encode("utf-8") if isinstance(result, Merged) else None


@dataclass(frozen=True)
class MergePolicy:
    """Which files merge: those whose suffix (lower-cased, "" for none) is listed."""

    suffixes: tuple[str, ...]

    def applies_to(self, path: str) -> bool:
        return PurePosixPath(path).suffix.lower() in self.suffixes


DEFAULT_POLICY = MergePolicy(
    suffixes=(
        ".md",
        ".markdown",
        ".txt",
        ".text",
        ".rst",
        ".org",
        ".log",
        ".csv",
        ".tsv",
        ".jsonl",
        ".ndjson",
        "",
    )
)

CONFLICT_MARK = ".conflict-"
WHO_MAX = 32
_STAMP = "%Y%m%dT%H%M%SZ"
_COPY = re.compile(r"\.conflict-[A-Za-z0-9_-]+-[0-9]{8}T[0-9]{6}Z(\.[^./]+)?\Z")


def _who(who: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", who).strip("-")[:WHO_MAX].strip("-") or "unknown"


def _truncate(stem: str, max_bytes: int) -> str:
    """The longest head of stem within max_bytes of UTF-8, cut between characters and still NFC."""
    while len(stem.encode("utf-8", errors="surrogatepass")) > max_bytes or (
        stem and unicodedata.normalize("NFC", stem) != stem
    ):
        stem = stem[:-1]
    return stem


def conflict_copy_path(path: str, who: str, when: datetime) -> str:
    """Where the agent's version goes on the store beside `path` after a true conflict. `who` is
    free text (sanitised to [A-Za-z0-9_-], at most 32 characters); `when` is written in UTC (a naive
    datetime is taken as UTC). A long name loses the end of its stem, never its suffix. Raises
    PathError (too_long) when no name fits beside a path this long: the caller keeps the copy locally."""
    directory, _, name = path.rpartition("/")
    stamp = (when.replace(tzinfo=UTC) if when.tzinfo is None else when).astimezone(UTC)
    mark = f"{CONFLICT_MARK}{_who(who)}-{stamp.strftime(_STAMP)}"
    suffix = PurePosixPath(name).suffix
    stem = name[: len(name) - len(suffix)] if suffix else name
    room = min(MAX_COMPONENT_BYTES, MAX_PATH_BYTES - len(directory.encode("utf-8")) - 1)
    room -= len((mark + suffix).encode("utf-8"))
    stem = _truncate(stem, room) if room > 0 else ""
    if not stem:
        raise PathError(f"no conflict copy name fits beside {path!r}", too_long=True)
    return check_memory_path(f"{directory}/{stem}{mark}{suffix}")


def is_conflict_copy(path: str) -> bool:
    """Whether `path` names a conflict copy (so a conflict on it does not make a copy of the copy)."""
    return _COPY.search(path.rpartition("/")[2]) is not None
