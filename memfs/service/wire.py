"""Storage records -> wire JSON, field for field as the hosted API (see the anthropic client types)."""

from __future__ import annotations

from memfs.service.storage import (
    Actor,
    Change,
    MemoryRecord,
    PrefixRecord,
    SessionRecord,
    StoreRecord,
    VersionRecord,
)


def actor(a: Actor | None) -> dict | None:
    if a is None:
        return None
    key = "session_id" if a.type == "session_actor" else "api_key_id"
    return {"type": a.type, key: a.id}


def store(s: StoreRecord) -> dict:
    return {
        "id": s.id,
        "type": "memory_store",
        "name": s.name,
        "description": s.description,
        "metadata": s.metadata,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "archived_at": s.archived_at,
    }


def memory(m: MemoryRecord, full: bool) -> dict:
    return {
        "id": m.id,
        "type": "memory",
        "memory_store_id": m.memory_store_id,
        "path": m.path,
        "content": m.content if full else None,
        "content_sha256": m.content_sha256,
        "content_size_bytes": m.content_size_bytes,
        "memory_version_id": m.memory_version_id,
        "created_at": m.created_at,
        "updated_at": m.updated_at,
    }


def memory_row(store_id: str, row: tuple, content: str | None) -> dict:
    """`memory()` of a `sql_tx.live_rows` row (id, path, sha, size, version_id, created_at,
    updated_at[, content]), without a `MemoryRecord` in between: the same keys, in the same order."""
    return {
        "id": row[0],
        "type": "memory",
        "memory_store_id": store_id,
        "path": row[1],
        "content": content,
        "content_sha256": row[2],
        "content_size_bytes": row[3],
        "memory_version_id": row[4],
        "created_at": row[5],
        "updated_at": row[6],
    }


def prefix(path: str) -> dict:
    return {"type": "memory_prefix", "path": path}


def list_item(item: MemoryRecord | PrefixRecord, full: bool) -> dict:
    if isinstance(item, PrefixRecord):
        return prefix(item.path)
    return memory(item, full)


def version(v: VersionRecord, full: bool) -> dict:
    return {
        "id": v.id,
        "type": "memory_version",
        "memory_id": v.memory_id,
        "memory_store_id": v.memory_store_id,
        "operation": v.operation,
        "path": v.path,
        "content": v.content if full else None,
        "content_sha256": v.content_sha256,
        "content_size_bytes": v.content_size_bytes,
        "created_at": v.created_at,
        "created_by": actor(v.created_by),
        "redacted_at": v.redacted_at,
        "redacted_by": actor(v.redacted_by),
    }


def counter(store_id: str, value: int) -> dict:
    return {"type": "memory_store_counter", "memory_store_id": store_id, "counter": value}


def change(c: Change, *, full: bool = False) -> dict:
    out = {
        "memory_id": c.memory_id,
        "operation": c.operation,
        "path": c.path,
        "previous_path": c.previous_path,
        "content_sha256": c.content_sha256,
        "content_size_bytes": c.content_size_bytes,
        "memory_version_id": c.memory_version_id,
        "updated_at": c.updated_at,
    }
    if full:  # view=full: null when deleted, the caller's own, or past the answer's budget (docs/API.md)
        out["content"] = c.content
    return out


def session(s: SessionRecord) -> dict:
    return {
        "id": s.id,
        "type": "session",
        "title": s.title,
        "metadata": s.metadata,
        "resources": [
            {
                "type": "memory_store",
                "memory_store_id": r.memory_store_id,
                "access": r.access,
                "name": r.name,
                "description": r.description,
                "instructions": r.instructions,
                "mount_path": r.mount_path,
            }
            for r in s.resources
        ],
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "archived_at": s.archived_at,
    }
