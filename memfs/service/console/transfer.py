"""The console's export file (JSON lines) and the validation of a file to import.

Format, one JSON object per line:
  line 1   {"type": "memfs_store_export", "format": 1, "memory_store": {name, description, ...},
            "counter": N, "exported_at": T}
  then     {"type": "memory", "path": P, "content": C, "content_sha256": S}   (one per memory)
  last     {"type": "memfs_store_export_end", "memory_count": M}
The end line makes a truncated file detectable. Import validates every line before anything is
written: a broken line is reported with its line number and nothing is imported.

Memory: the import streams, whatever the file (up to 256 MiB). A line is read at most
`MAX_LINE_BYTES` at a time (`lines_of`): a longer one is skipped to its end and reported, never
held. Only the first `MAX_REPORTED_ERRORS` problems are kept (in line order), the rest counted;
paths are kept for at most `max_memories` + 1 memories (past that the file is refused anyway).
Before, every line's problem was kept and a line was read whole: 8 MiB of empty lines took the
service from 268 to 972 MiB, a single 128 MiB line to 556 MiB.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

from memfs.service.errors import ApiError

FORMAT = 1
HEADER_TYPE = "memfs_store_export"
MEMORY_TYPE = "memory"
END_TYPE = "memfs_store_export_end"
MAX_REPORTED_ERRORS = 20
# The longest line read: a memory's line is its create request, and a request body is at most
# 1 MiB (the largest content, 100 KB, escaped as \u00XX for every byte, is ~600 KiB).
MAX_LINE_BYTES = 1024 * 1024
_SKIP_CHUNK = 64 * 1024


class TooLong:
    """A line of the file longer than MAX_LINE_BYTES (read past, never held)."""

    __slots__ = ()


TOO_LONG = TooLong()


def header_line(store: dict, counter: int, exported_at: str) -> bytes:
    return _line(
        {
            "type": HEADER_TYPE,
            "format": FORMAT,
            "memory_store": store,
            "counter": counter,
            "exported_at": exported_at,
        }
    )


def memory_line(path: str, content: str, sha: str) -> bytes:
    return _line({"type": MEMORY_TYPE, "path": path, "content": content, "content_sha256": sha})


def end_line(count: int) -> bytes:
    return _line({"type": END_TYPE, "memory_count": count})


def _line(obj: dict) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def lines_of(f: IO[bytes]) -> Iterator[bytes | TooLong]:
    """The lines of `f`, each at most MAX_LINE_BYTES (with its newline); TOO_LONG for a longer one,
    which is read past in 64 KiB pieces and never held."""
    while raw := f.readline(MAX_LINE_BYTES + 1):
        if len(raw) <= MAX_LINE_BYTES or raw.endswith(b"\n"):
            yield raw
            continue
        while (rest := f.readline(_SKIP_CHUNK)) and not rest.endswith(b"\n"):
            pass
        yield TOO_LONG


@dataclass
class ImportPlan:
    store_name: str | None = None
    store_description: str = ""
    memories: list[tuple[int, str]] = field(default_factory=list)  # (line number, path) in file order
    memory_count: int = 0  # memory lines read without a problem (memories holds at most the max + 1)
    # the first MAX_REPORTED_ERRORS problems by line (a heap of (-line, -seq, message): the last on top)
    _kept: list[tuple[int, int, str]] = field(default_factory=list)
    problem_count: int = 0

    @property
    def problems(self) -> list[tuple[int, str]]:
        """The problems kept (the first MAX_REPORTED_ERRORS by line), in line order."""
        return [(-neg, m) for neg, _, m in sorted(self._kept, reverse=True)]

    @property
    def errors(self) -> list[str]:
        """The first problems in line order, each naming its line; empty when the file is good."""
        shown = [f"line {n}: {m}" for n, m in self.problems]
        hidden = self.problem_count - len(shown)
        return shown + ([f"… and {hidden} more"] if hidden > 0 else [])

    def error(self, lineno: int, message: str) -> None:
        self.problem_count += 1
        item = (-lineno, -self.problem_count, message)  # of one line, the first reported wins
        if len(self._kept) < MAX_REPORTED_ERRORS:
            heapq.heappush(self._kept, item)
        elif item > self._kept[0]:  # an earlier line than the last one kept
            heapq.heapreplace(self._kept, item)


def validate(lines: Iterable[bytes | TooLong], *, check_path, check_content, max_memories: int) -> ImportPlan:
    """Check the whole file (`lines_of(f)`); `check_path`/`check_content` are the API's rules
    (raising ApiError).

    Holds only paths in memory (at most max_memories + 1): content is checked line by line and
    read again when writing.
    """
    plan = ImportPlan()
    seen: dict[str, int] = {}
    ended_at = None
    lineno = 0
    for lineno, raw in enumerate(lines, start=1):
        if isinstance(raw, TooLong) or len(raw) > MAX_LINE_BYTES:
            plan.error(lineno, f"longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB (no memory's line is)")
            continue
        if not raw.strip():
            plan.error(lineno, "empty line (every line must be one JSON object)")
            continue
        obj = _parse(raw, lineno, plan)
        if obj is None:
            continue
        kind = obj.get("type")
        if ended_at is not None:
            plan.error(lineno, f"nothing may follow the {END_TYPE} line (line {ended_at})")
            continue
        if lineno == 1:
            _check_header(obj, plan)
            continue
        if kind == END_TYPE:
            ended_at = lineno
            count = obj.get("memory_count")
            if count != plan.memory_count and not plan.problem_count:
                plan.error(
                    lineno, f"the file says it holds {count!r} memories but {plan.memory_count} were read"
                )
            continue
        if kind != MEMORY_TYPE:
            plan.error(lineno, f"type must be {MEMORY_TYPE!r} (got {kind!r})")
            continue
        _check_memory(obj, lineno, plan, seen, check_path, check_content, keep=max_memories + 1)
    if lineno == 0:
        plan.error(1, "the file is empty")
    elif ended_at is None:
        plan.error(lineno, f"the file ends without its {END_TYPE} line: it may be truncated")
    _check_overlaps(seen, plan)
    if plan.memory_count > max_memories:
        plan.error(lineno, f"{plan.memory_count} memories; this service allows {max_memories} per store")
    return plan


def _check_memory(
    obj: dict, lineno: int, plan: ImportPlan, seen: dict[str, int], check_path, check_content, keep: int
) -> None:
    """One memory line: planned (`seen` and `plan.memories`, at most `keep` of them: past the
    service's maximum the file is refused anyway), or its first problem reported."""
    unknown = sorted(set(obj) - {"type", "path", "content", "content_sha256"})
    if unknown:
        plan.error(lineno, f"unknown field {unknown[0]!r}")
        return
    try:
        path = check_path(obj.get("path"))
        content = check_content(obj.get("content"))
    except ApiError as e:
        plan.error(lineno, e.message)
        return
    sha = obj.get("content_sha256")
    if sha is not None and sha != hashlib.sha256(content.encode("utf-8")).hexdigest():
        plan.error(lineno, f"content_sha256 does not match the content of {path}")
        return
    if path in seen:
        plan.error(lineno, f"{path} appears twice (first on line {seen[path]})")
        return
    plan.memory_count += 1
    if len(seen) < keep:
        seen[path] = lineno
        plan.memories.append((lineno, path))


def _parse(raw: bytes, lineno: int, plan: ImportPlan) -> dict | None:
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        plan.error(lineno, "not valid UTF-8")
        return None
    except RecursionError:  # deeper than the parser's limit: refused like any invalid line
        plan.error(lineno, "nested too deeply")
        return None
    except ValueError as e:
        plan.error(lineno, f"not valid JSON ({e})")
        return None
    if not isinstance(obj, dict):
        plan.error(lineno, "must be a JSON object")
        return None
    return obj


def _check_header(obj: dict, plan: ImportPlan) -> None:
    if obj.get("type") != HEADER_TYPE:
        plan.error(1, f"the first line must be the {HEADER_TYPE} header of a memfs export")
        return
    if obj.get("format") != FORMAT:
        plan.error(
            1, f"export format {obj.get('format')!r} is not supported (this memfs reads format {FORMAT})"
        )
        return
    store = obj.get("memory_store")
    if isinstance(store, dict):
        if isinstance(store.get("name"), str):
            plan.store_name = store["name"]
        if isinstance(store.get("description"), str):
            plan.store_description = store["description"]


def _check_overlaps(seen: dict[str, int], plan: ImportPlan) -> None:
    # `/a` and `/a/b` cannot both exist (the API's path-conflict rule), checked across the file.
    for path, lineno in seen.items():
        parts = path[1:].split("/")
        for i in range(1, len(parts)):
            above = "/" + "/".join(parts[:i])
            if above in seen:
                plan.error(
                    lineno, f"{path} is below the memory {above} (line {seen[above]}): a path cannot be both"
                )
                break


def memories(lines: Iterable[bytes | TooLong]) -> Iterator[tuple[str, str]]:
    """(path, content) of every memory line of a file that `validate` accepted (`lines_of(f)`)."""
    for raw in lines:
        if not isinstance(raw, TooLong) and raw.strip():
            obj = json.loads(raw.decode("utf-8"))
            if obj.get("type") == MEMORY_TYPE:
                yield obj["path"], obj["content"]
