"""The console's export file (JSON lines) and the validation of a file to import.

Format, one JSON object per line:
  line 1   {"type": "memfs_store_export", "format": 1, "memory_store": {name, description, ...},
            "counter": N, "exported_at": T}
  then     {"type": "memory", "path": P, "content": C, "content_sha256": S}   (one per memory)
  last     {"type": "memfs_store_export_end", "memory_count": M}
The end line makes a truncated file detectable. Import validates every line before anything is
written: a broken line is reported with its line number and nothing is imported.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from memfs.service.errors import ApiError

FORMAT = 1
HEADER_TYPE = "memfs_store_export"
MEMORY_TYPE = "memory"
END_TYPE = "memfs_store_export_end"
MAX_REPORTED_ERRORS = 20


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


@dataclass
class ImportPlan:
    store_name: str | None = None
    store_description: str = ""
    memories: list[tuple[int, str]] = field(default_factory=list)  # (line number, path) in file order
    problems: list[tuple[int, str]] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        """The first problems in line order, each naming its line; empty when the file is good."""
        shown = [f"line {n}: {m}" for n, m in sorted(self.problems)[:MAX_REPORTED_ERRORS]]
        hidden = len(self.problems) - len(shown)
        return shown + ([f"… and {hidden} more"] if hidden > 0 else [])

    def error(self, lineno: int, message: str) -> None:
        self.problems.append((lineno, message))


def validate(lines: Iterable[bytes], *, check_path, check_content, max_memories: int) -> ImportPlan:
    """Check the whole file; `check_path`/`check_content` are the API's rules (raising ApiError).

    Holds only paths in memory: content is checked line by line and read again when writing.
    """
    plan = ImportPlan()
    seen: dict[str, int] = {}
    ended_at = None
    lineno = 0
    for lineno, raw in enumerate(lines, start=1):
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
            if count != len(plan.memories) and not plan.problems:
                plan.error(
                    lineno, f"the file says it holds {count!r} memories but {len(plan.memories)} were read"
                )
            continue
        if kind != MEMORY_TYPE:
            plan.error(lineno, f"type must be {MEMORY_TYPE!r} (got {kind!r})")
            continue
        _check_memory(obj, lineno, plan, seen, check_path, check_content)
    if lineno == 0:
        plan.error(1, "the file is empty")
    elif ended_at is None:
        plan.error(lineno, f"the file ends without its {END_TYPE} line: it may be truncated")
    _check_overlaps(seen, plan)
    if len(plan.memories) > max_memories:
        plan.error(lineno, f"{len(plan.memories)} memories; this service allows {max_memories} per store")
    return plan


def _check_memory(
    obj: dict, lineno: int, plan: ImportPlan, seen: dict[str, int], check_path, check_content
) -> None:
    """One memory line: planned (`seen` and `plan.memories`), or its first problem reported."""
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


def memories(lines: Iterable[bytes]) -> Iterator[tuple[str, str]]:
    """(path, content) of every memory line of a file that `validate` accepted."""
    for raw in lines:
        if raw.strip():
            obj = json.loads(raw.decode("utf-8"))
            if obj.get("type") == MEMORY_TYPE:
                yield obj["path"], obj["content"]
