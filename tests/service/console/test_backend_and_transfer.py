"""The console's pieces without a browser: the store counts it shows, and import checks."""

from __future__ import annotations

import hashlib
import io
import json

import anyio
import pytest

from memfs.service.console import transfer
from memfs.service.console.backend import ConsoleBackend
from memfs.service.database import open_storage
from memfs.service.storage import Actor

ACTOR = Actor("api_actor", "apikey_test")


@pytest.fixture
def storage(tmp_path):
    s = open_storage(tmp_path / "store.db")
    yield s
    s.close()


def test_the_console_shows_the_services_totals_of_one_moment(storage):
    backend = ConsoleBackend(storage, ACTOR, 100)
    sid = storage.create_store("s", "", {}).id
    a = storage.create_memory(sid, "/a", "aaa", ACTOR, max_memories=100)
    storage.create_memory(sid, "/d/b", "bbbbb", ACTOR, max_memories=100)
    storage.delete_memory(sid, a.id, expected_sha256=None, actor=ACTOR)
    s = anyio.run(backend.store_stats, sid)
    assert (s.counter, s.memories, s.bytes) == (3, 1, 5)


def _file(*objs) -> list[bytes]:
    return [json.dumps(o).encode() + b"\n" for o in objs]


HEADER = {"type": "memfs_store_export", "format": 1, "memory_store": {"name": "n", "description": "d"}}


def _validate(lines, max_memories=100):
    b = ConsoleBackend(None, ACTOR, max_memories)
    return transfer.validate(lines, check_path=b.check_path, check_content=b.check_content,
                             max_memories=max_memories)  # fmt: skip


def mem(path, content="x", **extra):
    return {"type": "memory", "path": path, "content": content, **extra}


def end(n):
    return {"type": "memfs_store_export_end", "memory_count": n}


def test_a_good_file_round_trips_through_the_writer_functions():
    raw = (transfer.header_line({"name": "n"}, 3, "t") + transfer.memory_line("/a", "é\n", "f" * 64)
           + transfer.end_line(1)).splitlines(keepends=True)  # fmt: skip
    plan = _validate(raw)
    assert plan.errors == ["line 2: content_sha256 does not match the content of /a"]
    sha = hashlib.sha256("é\n".encode()).hexdigest()
    raw = (transfer.header_line({"name": "n"}, 3, "t") + transfer.memory_line("/a", "é\n", sha)
           + transfer.end_line(1)).splitlines(keepends=True)  # fmt: skip
    plan = _validate(raw)
    assert plan.errors == [] and plan.store_name == "n" and plan.memories == [(2, "/a")]
    assert list(transfer.memories(raw)) == [("/a", "é\n")]


@pytest.mark.parametrize(
    "lines, expected",
    [
        ([], "line 1: the file is empty"),
        (_file(mem("/a")), "line 1: the first line must be the memfs_store_export header"),
        (_file(HEADER, mem("/a")), "line 2: the file ends without its memfs_store_export_end line"),
        (_file(HEADER, mem("/a"), end(2)), "line 3: the file says it holds 2 memories but 1 were read"),
        (_file(HEADER, mem("/a"), mem("/a/b"), end(2)), "line 3: /a/b is below the memory /a (line 2)"),
        (_file(HEADER, mem("/a", content=5), end(1)), "line 2: content: must be a string"),
        (_file(HEADER, mem("/a", extra=1), end(1)), "line 2: unknown field 'extra'"),
        (_file(HEADER, mem("/a\\b"), end(1)), "line 2: path:"),
        (_file(HEADER, mem("/a", content="x" * 102_401), end(1)), "line 2: content:"),
        ([json.dumps(HEADER).encode() + b"\n", b"{not json\n"], "line 2: not valid JSON"),
        ([json.dumps(HEADER).encode() + b"\n", b"\xff\xfe\n"], "line 2: not valid UTF-8"),
        (_file(HEADER, mem("/a"), end(1), mem("/b")), "line 4: nothing may follow"),
        (_file(HEADER, mem("/a"), mem("/b"), end(2)), None),
    ],
)
def test_every_broken_line_is_named(lines, expected):
    plan = _validate(lines)
    if expected is None:
        assert plan.errors == []
    else:
        assert any(e.startswith(expected) for e in plan.errors), plan.errors


def test_more_memories_than_the_service_allows_is_refused_up_front():
    plan = _validate(_file(HEADER, mem("/a"), mem("/b"), mem("/c"), end(3)), max_memories=2)
    assert any("3 memories; this service allows 2" in e for e in plan.errors)


def test_a_line_past_the_cap_is_read_past_and_named():
    big = b'{"type": "memory", "content": "' + b"x" * transfer.MAX_LINE_BYTES + b'"}\n'
    f = io.BytesIO(json.dumps(HEADER).encode() + b"\n" + big + b"x" * (3 * transfer.MAX_LINE_BYTES))
    lines = list(transfer.lines_of(f))
    assert lines[0] == json.dumps(HEADER).encode() + b"\n"
    assert lines[1:] == [transfer.TOO_LONG, transfer.TOO_LONG]  # the last one has no newline
    plan = _validate(lines)
    assert plan.errors[:2] == [
        "line 2: longer than 1 MiB (no memory's line is)",
        "line 3: longer than 1 MiB (no memory's line is)",
    ]
    # a line at the cap exactly is read (and judged on its content)
    f = io.BytesIO(b"y" * (transfer.MAX_LINE_BYTES - 1) + b"\n")
    assert [len(x) for x in transfer.lines_of(f)] == [transfer.MAX_LINE_BYTES]  # type: ignore[arg-type]


def test_only_the_first_problems_are_kept_and_the_rest_counted():
    lines = [json.dumps(HEADER).encode() + b"\n"] + [b"\n"] * 1000 + _file(end(0))
    plan = _validate(lines)
    assert plan.problem_count == 1000 and len(plan.problems) == transfer.MAX_REPORTED_ERRORS
    assert plan.errors[0].startswith("line 2: empty line") and plan.errors[-1] == "… and 980 more"
    # kept in line order even when a later check reports an earlier line (the overlaps, at the end)
    lines = _file(HEADER, mem("/a"), mem("/a/b")) + [b"\n"] * 50 + _file(end(2))
    plan = _validate(lines)
    assert plan.errors[0].startswith("line 3: /a/b is below the memory /a")


def test_paths_are_kept_only_up_to_the_maximum():
    plan = _validate(_file(HEADER, *[mem(f"/m{i}") for i in range(50)], end(50)), max_memories=10)
    assert plan.memory_count == 50 and len(plan.memories) == 11
    assert any("50 memories; this service allows 10" in e for e in plan.errors)
