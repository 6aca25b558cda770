"""One home for the wire: every `/v1/…` path, API header name and beta value memfs speaks is spelled
in memfs/protocol.py, and nowhere else in memfs/ — so a new route is one line there, its route in
the service's table (memfs/service/app.py) and its method in the client.

What counts: every string (and bytes) literal in memfs/**/*.py outside protocol.py, f-strings' literal
parts included, that holds `/v1/` (or is `/v1`), or is exactly one of protocol.py's header names or beta
values. What does not: docstrings and other bare-string statements (prose naming a route for the
reader), and strings that merely mention a header in a message. The service's route table and
fast paths do declare route patterns, but they build them from protocol.py's builders and bases
(`memories_path("{store_id}")`, `STORES_PATH + "/{store_id}"`), so no `/v1/` appears there either:
a route pattern written out in full would count. Suffixes inside a base+suffix pattern (the relay's
cached tails, the client's request kinds) are matched against a path, not sent, and stay with the
pattern that matches them. Standard HTTP headers (`authorization`, `content-type`, `retry-after`)
are HTTP's, not the API's, and are not checked. The TypeScript worker and scripts/ are outside memfs/."""

from __future__ import annotations

import ast
from pathlib import Path

from memfs import protocol

MEMFS = Path(protocol.__file__).resolve().parent

WIRE_NAMES = {
    protocol.BETA_HEADER,
    protocol.API_KEY_HEADER,
    protocol.COUNTER_HEADER,
    protocol.REQUEST_ID_HEADER,
    protocol.MEMORY_BETA,
    protocol.SESSIONS_BETA,
}


def _prose(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are statements on their own (docstrings and the like)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def wire_literals(source: str, name: str) -> list[str]:
    """`name:line: literal` for each literal in `source` that spells the wire (see the module's docstring)."""
    tree = ast.parse(source, name)
    prose = _prose(tree)
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in prose:
            continue
        value = node.value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if not isinstance(value, str):
            continue
        if "/v1/" in value or value == "/v1" or value.lower() in WIRE_NAMES:
            found.append((node.lineno, node.col_offset, f"{name}:{node.lineno}: {node.value!r}"))
    return [text for *_, text in sorted(found)]


def test_no_wire_name_is_spelled_outside_protocol_py():
    found = []
    for path in sorted(MEMFS.rglob("*.py")):
        if path.name == "protocol.py" and path.parent == MEMFS:
            continue
        found += wire_literals(path.read_text(encoding="utf-8"), str(path.relative_to(MEMFS.parent)))
    assert not found, "spell these in memfs/protocol.py and use the name:\n" + "\n".join(found)


def test_the_check_sees_each_way_of_spelling_the_wire():
    source = '''"""A docstring naming GET /v1/memory_stores/{id} is prose."""
import re

def f(sid, key):
    """So is `/v1/sessions/…` here."""
    a = f"/v1/memory_stores/{sid}/memories"
    b = re.compile(r"/v1/environments/[^/]+/work")
    c = {"anthropic-beta": "agent-memory-2026-07-22"}
    d = (b"x-api-key", key)
    e = "anthropic-beta header is required"
    return "/v1"
'''
    found = wire_literals(source, "m.py")
    assert [line.split(":")[1] for line in found] == ["6", "7", "8", "8", "9", "11"], found


def test_protocol_builders_spell_the_service_routes_and_the_client_requests_alike():
    """The service's route table takes the same builders with `{store_id}` for the id."""
    assert (
        protocol.memory_path("{store_id}", "{memory_id}")
        == "/v1/memory_stores/{store_id}/memories/{memory_id}"
    )
    assert protocol.batch_path("memstore_1") == "/v1/memory_stores/memstore_1/memory_batch"
    assert protocol.session_path("sesn_1") == "/v1/sessions/sesn_1"
