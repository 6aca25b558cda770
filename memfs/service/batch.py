"""The batch-write extension's wire: its request items in, its per-item results out (docs/API.md).

`POST /v1/memory_stores/{id}/memory_batch` with `{"operations": [...]}`: many creates, updates
(renames are updates with a path) and deletes of one store in one request and one transaction.
An item gets exactly the answer its single request would get, field rules and messages included;
only the envelope (the body, `operations`, an item that is not an object or names no known
`type`) is refused as a whole with a 400, before anything is written.
"""

from __future__ import annotations

from memfs.service import params, wire
from memfs.service.errors import ApiError, from_storage, invalid
from memfs.service.storage import BatchCreate, BatchDelete, BatchItem, BatchOutcome, BatchUpdate

MAX_BATCH_OPERATIONS = 1000  # per request; the 1 MiB body limit usually binds first

_FIELDS = {
    "create": ("type", "path", "content"),
    "update": ("type", "memory_id", "content", "path", "precondition"),
    "delete": ("type", "memory_id", "expected_content_sha256"),
}


def operations(body: dict) -> list:
    """The `operations` array of the request body (the envelope's rules)."""
    if "operations" not in body:
        raise invalid("operations: is required (an array of create, update and delete operations)")
    ops = body["operations"]
    if not isinstance(ops, list):
        raise invalid("operations: must be an array")
    if not ops:
        raise invalid("operations: must hold at least one operation")
    if len(ops) > MAX_BATCH_OPERATIONS:
        raise invalid(f"operations: at most {MAX_BATCH_OPERATIONS} operations per request (got {len(ops)})")
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            raise invalid(f"operations[{i}]: must be an object")
        if op.get("type") not in _FIELDS:
            raise invalid(
                f"operations[{i}].type: must be 'create', 'update' or 'delete' (got {op.get('type')!r})"
            )
    return ops


def _memory_id(op: dict) -> str:
    if "memory_id" not in op:
        raise invalid("memory_id: is required")
    return params.text(op["memory_id"], "memory_id", min_chars=1, max_chars=128)


def item(op: dict) -> BatchItem:
    """One operation as the storage takes it; raises the ApiError its single request would get."""
    kind = op["type"]
    unknown = sorted(set(op) - set(_FIELDS[kind]))
    if unknown:
        raise invalid(f"unknown field {unknown[0]!r}; allowed fields: {', '.join(_FIELDS[kind][1:])}")
    if kind == "create":
        for field in ("path", "content"):
            if field not in op:
                raise invalid(f"{field}: is required")
        return BatchCreate(params.memory_path(op["path"]), params.memory_content(op["content"]))
    if kind == "update":
        mid = _memory_id(op)
        content = None if op.get("content") is None else params.memory_content(op["content"])
        path = None if op.get("path") is None else params.memory_path(op["path"])
        if content is None and path is None:
            raise invalid("an update needs content or path (or both); this one names neither")
        return BatchUpdate(mid, content, path, params.precondition(op.get("precondition")))
    mid = _memory_id(op)
    raw = op.get("expected_content_sha256")
    expected = None if raw is None else params.sha256(raw, "expected_content_sha256")
    return BatchDelete(mid, expected)


def error(err: ApiError) -> dict:
    """An item's error: the single endpoint's error body, with its HTTP status."""
    return {
        "type": "error",
        "status": err.status,
        "error": {"type": err.type, "message": err.message, **err.extra},
    }


def result(op: dict, outcome: BatchOutcome, full: bool) -> dict:
    if outcome.error is not None:
        return error(from_storage(outcome.error))
    if op["type"] == "delete":
        return {"id": op["memory_id"], "type": "memory_deleted"}
    assert outcome.memory is not None
    return wire.memory(outcome.memory, full)
