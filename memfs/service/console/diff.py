"""Line diffs between two texts, as rows the templates render (and escape) themselves."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

CONTEXT = 3


@dataclass
class Row:
    kind: str  # "same" | "add" | "del" | "gap"
    old_no: int | None
    new_no: int | None
    text: str


def line_diff(old: str, new: str, context: int = CONTEXT) -> list[Row]:
    """A unified diff of `old` -> `new`: changed lines with `context` lines around them, gaps marked."""
    a, b = old.splitlines(), new.splitlines()
    rows: list[Row] = []
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for gi, group in enumerate(matcher.get_grouped_opcodes(context)):
        if gi > 0 or (group and (group[0][1] > 0 or group[0][3] > 0)):
            rows.append(Row("gap", None, None, "…"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows += [
                    Row("same", i + 1, j + 1, a[i]) for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
                ]
                continue
            rows += [Row("del", i + 1, None, a[i]) for i in range(i1, i2)]
            rows += [Row("add", None, j + 1, b[j]) for j in range(j1, j2)]
    return rows


def summary(rows: list[Row]) -> tuple[int, int]:
    """(lines added, lines removed)."""
    return sum(r.kind == "add" for r in rows), sum(r.kind == "del" for r in rows)
