"""The SQL both backends run, written once (see `SqlTx`), so SQLite and PostgreSQL answer alike.

Only statements that both dialects accept as they are (after placeholder rewriting) belong here;
the schema is schema.py's, the connections and the transactions are each backend's own. `SqlTx`
is also the only statement of what a transaction offers the rules (rules.py, listing.py, mirror.py
take it as their type): no protocol restates its signatures (backend.py says why).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from memfs.service.storage import (
    Actor,
    MemoryRecord,
    ResourceRecord,
    SessionRecord,
    StoreRecord,
    VersionFilter,
    VersionRecord,
)

Row = Any  # a row addressed by column name (sqlite3.Row, psycopg's dict_row)
COUNTER_KEY = "counter"
# Counters below this value have no full history left: the retention job (retention.py) raises
# it in the transaction that deletes history, and the changes feed answers "too_old" below it.
HISTORY_FLOOR_KEY = "history_floor"
_MEM_COLS = "id, store_id, path, sha, size, version_id, created_at, updated_at"
# The columns of `live_rows`, in the order wire.memory_row reads them.
LIVE_ROW_COLS = "id, path, sha, size, version_id, created_at, updated_at"
_VER_COLS = (
    "id, store_id, memory_id, operation, path, sha, size, created_at, actor_type, actor_id, "
    "redacted_at, redactor_type, redactor_id"
)


class PathTaken(Exception):
    """A live memory already holds the path (raised by the unique index, should the checks miss)."""


def _actor(typ: str | None, ident: str | None) -> Actor | None:
    return Actor(typ, ident) if typ and ident else None


def _store(row: Row) -> StoreRecord:
    return StoreRecord(
        id=row["id"],
        name=row["name"],
        description=row["description"],
        metadata=json.loads(row["metadata"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        archived_at=row["archived_at"],
    )


def _memory(row: Row, content: str | None) -> MemoryRecord:
    return MemoryRecord(
        id=row["id"],
        memory_store_id=row["store_id"],
        path=row["path"],
        content=content,
        content_sha256=row["sha"],
        content_size_bytes=row["size"],
        memory_version_id=row["version_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _version(row: Row, content: str | None) -> VersionRecord:
    return VersionRecord(
        id=row["id"],
        memory_id=row["memory_id"],
        memory_store_id=row["store_id"],
        operation=row["operation"],
        path=row["path"],
        content=content,
        content_sha256=row["sha"],
        content_size_bytes=row["size"],
        created_at=row["created_at"],
        created_by=_actor(row["actor_type"], row["actor_id"]),
        redacted_at=row["redacted_at"],
        redacted_by=_actor(row["redactor_type"], row["redactor_id"]),
    )


def counters_query(token_hash: str | None, store_ids: Sequence[str]) -> tuple[str, list]:
    """One statement for the counter fast path: (store id, counter) of each of `store_ids` that
    exists and — with a `token_hash` — is attached to the live session holding that token. One
    statement is one snapshot on both backends, and one round trip on PostgreSQL."""
    marks = ",".join("?" * len(store_ids))
    sql = (
        "SELECT s.id AS id, COALESCE((SELECT kv.value FROM store_kv kv WHERE kv.store_id = s.id "
        f"AND kv.key = ?), 0) AS counter FROM stores s WHERE s.id IN ({marks})"
    )
    args: list = [COUNTER_KEY, *store_ids]
    if token_hash is not None:
        sql += (
            " AND s.id IN (SELECT r.memory_store_id FROM session_resources r JOIN sessions se "
            "ON se.id = r.session_id WHERE se.token_hash = ? AND se.archived_at IS NULL)"
        )
        args.append(token_hash)
    return sql, args


def counters_from_rows(rows, store_ids: Sequence[str]) -> dict[str, int] | None:
    """The answer of `counters_query`, or None when a store is missing (or not the session's)."""
    found = {r["id"]: int(r["counter"]) for r in rows}
    return found if len(found) == len(set(store_ids)) else None


def counters_batch_query(token_hashes: Sequence[str], store_ids: Sequence[str]) -> tuple[str, list]:
    """One statement for many fast-path requests at once (counter_path.py gathers the requests of
    one event-loop step): the counter of each of `store_ids` that exists (`token_hash` NULL), and
    which of them each live session holding one of `token_hashes` attaches (`counter` 0). One
    statement is one snapshot, as `counters_query`; `counters_batch_from_rows` reads it."""
    marks = ",".join("?" * len(store_ids))
    sql = (
        "SELECT s.id AS id, COALESCE((SELECT kv.value FROM store_kv kv WHERE kv.store_id = s.id "
        f"AND kv.key = ?), 0) AS counter, CAST(NULL AS TEXT) AS token_hash FROM stores s WHERE s.id IN ({marks})"
    )
    args: list = [COUNTER_KEY, *store_ids]
    if token_hashes:
        tokens = ",".join("?" * len(token_hashes))
        sql += (
            " UNION ALL SELECT r.memory_store_id AS id, 0 AS counter, se.token_hash AS token_hash "
            "FROM session_resources r JOIN sessions se ON se.id = r.session_id "
            f"WHERE se.token_hash IN ({tokens}) AND se.archived_at IS NULL AND r.memory_store_id IN ({marks})"
        )
        args += [*token_hashes, *store_ids]
    return sql, args


def counters_batch_from_rows(rows) -> tuple[dict[str, int], dict[str, set[str]]]:
    """(counter of each existing store, the stores each token's live session attaches)."""
    counters: dict[str, int] = {}
    attached: dict[str, set[str]] = {}
    for r in rows:
        if r["token_hash"] is None:
            counters[r["id"]] = int(r["counter"])
        else:
            attached.setdefault(r["token_hash"], set()).add(r["id"])
    return counters, attached


class SqlTx:
    """The queries on one DB-API connection inside one transaction (`Backend.read`/`write`).

    Written once for both backends: `?` placeholders (a backend with another paramstyle
    rewrites them in `_sql`), rows addressed by column name, and the few dialect differences
    as class attributes. Memory content goes through `_content_in`/`_content_out` (PostgreSQL
    keeps it as bytea: text there cannot hold NUL, which memory content may)."""

    # an exception class (or tuple) the database raises when a unique index refuses a row
    integrity_errors: tuple[type[BaseException], ...] = ()
    # `id IS NOT ?` is SQLite's null-safe inequality; PostgreSQL spells it IS DISTINCT FROM
    not_id = "id IS NOT ?"
    # a version's id as the listing orders it: byte order (PostgreSQL's column has the database's
    # collation, which may not be; the index versions_time is on this expression)
    version_id = "id"
    # how to count a store's live memories fastest (SQLite needs an index hint)
    count_live_from = "memories"
    # where to sum a store's live memories from (SQLite is pointed at the covering index)
    live_totals_from = "memories"

    def __init__(self, conn):
        self.c = conn

    def _sql(self, sql: str) -> str:
        return sql

    def _x(self, sql: str, args: Sequence = ()):
        return self.c.execute(self._sql(sql), args)

    def _content_in(self, text: str | None):
        return text

    def _content_out(self, value) -> str | None:
        return value

    def _memory(self, row, content: bool) -> MemoryRecord:
        return _memory(row, self._content_out(row["content"]) if content else None)

    def _version(self, row, content: bool) -> VersionRecord:
        return _version(row, self._content_out(row["content"]) if content else None)

    def ping(self) -> None:
        """A trivial query: the database answers."""
        self._x("SELECT 1").fetchone()

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A nested transaction: the block's writes are undone alone when it raises (a batch item).
        After an error PostgreSQL refuses every statement until the rollback to the savepoint."""
        self._x("SAVEPOINT item")
        try:
            yield
        except BaseException:
            self._x("ROLLBACK TO SAVEPOINT item")
            self._x("RELEASE SAVEPOINT item")
            raise
        self._x("RELEASE SAVEPOINT item")

    # --- stores ----------------------------------------------------------------------------------

    def store(self, store_id: str) -> StoreRecord | None:
        row = self._x("SELECT * FROM stores WHERE id = ?", (store_id,)).fetchone()
        return _store(row) if row else None

    def insert_store(self, s: StoreRecord) -> None:
        self._x(
            "INSERT INTO stores (id, name, description, metadata, created_at, updated_at) VALUES (?,?,?,?,?,?)",
            (s.id, s.name, s.description, json.dumps(s.metadata), s.created_at, s.updated_at),
        )

    def update_store(
        self, store_id: str, *, name: str, description: str, metadata: dict[str, str], at: str
    ) -> None:
        self._x(
            "UPDATE stores SET name = ?, description = ?, metadata = ?, updated_at = ? WHERE id = ?",
            (name, description, json.dumps(metadata), at, store_id),
        )

    def archive_store(self, store_id: str, at: str) -> None:
        self._x("UPDATE stores SET archived_at = ?, updated_at = ? WHERE id = ?", (at, at, store_id))

    def delete_store(self, store_id: str) -> None:
        """The store, its memories, versions and counters."""
        for table, col in (
            ("versions", "store_id"),
            ("memories", "store_id"),
            ("store_kv", "store_id"),
            ("stores", "id"),
        ):
            self._x(f"DELETE FROM {table} WHERE {col} = ?", (store_id,))

    def clear_store(self, store_id: str) -> None:
        """The store's memories and versions, not its row nor its counters (a cache's drop)."""
        for table in ("versions", "memories"):
            self._x(f"DELETE FROM {table} WHERE store_id = ?", (store_id,))

    def list_stores(
        self,
        *,
        after: int | None,
        limit: int,
        include_archived: bool,
        created_gte: str | None,
        created_lte: str | None,
        only_ids: Sequence[str] | None,
    ) -> list[tuple[int, StoreRecord]]:
        """Newest first, at most `limit` rows, each with its position (a sequence number that
        decreases along the listing); `after`: only rows past that position."""
        where: list[str] = ["1 = 1"]
        args: list[object] = []
        if after is not None:
            where.append("seq < ?")
            args.append(after)
        if not include_archived:
            where.append("archived_at IS NULL")
        if created_gte is not None:
            where.append("created_at >= ?")
            args.append(created_gte)
        if created_lte is not None:
            where.append("created_at <= ?")
            args.append(created_lte)
        if only_ids is not None:
            where.append(f"id IN ({','.join('?' * len(only_ids))})")
            args.extend(only_ids)
        rows = self._x(
            f"SELECT * FROM stores WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?", (*args, limit)
        ).fetchall()
        return [(r["seq"], _store(r)) for r in rows]

    # --- the counter and the history floor --------------------------------------------------------

    def _kv(self, store_id: str, key: str) -> int:
        row = self._x("SELECT value FROM store_kv WHERE store_id = ? AND key = ?", (store_id, key)).fetchone()
        return int(row["value"]) if row else 0  # a store that never had the key reads 0

    def counter(self, store_id: str) -> int:
        return self._kv(store_id, COUNTER_KEY)

    def history_floor(self, store_id: str) -> int:
        return self._kv(store_id, HISTORY_FLOOR_KEY)

    def counters_for(self, token_hash: str | None, store_ids: Sequence[str]) -> dict[str, int] | None:
        """Counters of `store_ids` in one statement (`counters_query`); None when a store is
        missing or, with a token hash, not attached to that token's live session."""
        sql, args = counters_query(token_hash, store_ids)
        return counters_from_rows(self._x(sql, args).fetchall(), store_ids)

    def counters_batch(
        self, token_hashes: Sequence[str], store_ids: Sequence[str]
    ) -> tuple[dict[str, int], dict[str, set[str]]]:
        """Many `counters_for` in one statement (`counters_batch_query`): the counters of the
        stores that exist, and which of them each token's live session attaches."""
        sql, args = counters_batch_query(token_hashes, store_ids)
        return counters_batch_from_rows(self._x(sql, args).fetchall())

    def raise_history_floor(self, store_id: str, floor: int) -> None:
        """history_floor = max(history_floor, floor)."""
        self._x(
            "INSERT INTO store_kv (store_id, key, value) VALUES (?, ?, ?) "
            "ON CONFLICT (store_id, key) DO UPDATE SET value = CASE WHEN store_kv.value < excluded.value "
            "THEN excluded.value ELSE store_kv.value END",
            (store_id, HISTORY_FLOOR_KEY, floor),
        )

    def kv(self, store_id: str, key: str) -> int:
        """A store's integer under `key` in its key-value area (0 when it never had it)."""
        return self._kv(store_id, key)

    def set_kv(self, store_id: str, key: str, value: int) -> None:
        self._x(
            "INSERT INTO store_kv (store_id, key, value) VALUES (?, ?, ?) "
            "ON CONFLICT (store_id, key) DO UPDATE SET value = excluded.value",
            (store_id, key, value),
        )

    def start_counter(self, store_id: str, base: int) -> None:
        """A new store's counter and history floor both at `base` (a cache's: see mirror.py)."""
        self.set_kv(store_id, COUNTER_KEY, base)
        self.raise_history_floor(store_id, base)

    def bump(self, store_id: str) -> int:
        """The store's counter + 1, stored in this transaction (a store never written reads 0)."""
        row = self._x(
            "INSERT INTO store_kv (store_id, key, value) VALUES (?, ?, 1) "
            "ON CONFLICT (store_id, key) DO UPDATE SET value = store_kv.value + 1 RETURNING value",
            (store_id, COUNTER_KEY),
        ).fetchone()
        return int(row["value"])

    # --- memories --------------------------------------------------------------------------------

    def live_memory(self, store_id: str, memory_id: str, *, content: bool) -> MemoryRecord | None:
        cols = _MEM_COLS + (", content" if content else "")
        row = self._x(
            f"SELECT {cols} FROM memories WHERE id = ? AND store_id = ? AND deleted_at IS NULL",
            (memory_id, store_id),
        ).fetchone()
        return self._memory(row, content) if row else None

    def live_at(self, store_id: str, paths: Sequence[str]) -> list[tuple[str, str]]:
        """(id, path) of the live memories at any of `paths`, shortest path first."""
        marks = ",".join("?" * len(paths))
        rows = self._x(
            f"SELECT id, path FROM memories WHERE store_id = ? AND deleted_at IS NULL AND path IN ({marks}) "
            "ORDER BY length(path)",
            (store_id, *paths),
        ).fetchall()
        return [(r["id"], r["path"]) for r in rows]

    def first_live_in(
        self, store_id: str, lo: str, hi: str, exclude_id: str | None
    ) -> tuple[str, str] | None:
        """(id, path) of the first live memory (byte order) with lo <= path < hi, not `exclude_id`."""
        row = self._x(
            "SELECT id, path FROM memories WHERE store_id = ? AND deleted_at IS NULL AND path >= ? AND path < ? "
            f"AND {self.not_id} ORDER BY path LIMIT 1",
            (store_id, lo, hi, exclude_id),
        ).fetchone()
        return (row["id"], row["path"]) if row else None

    def count_live(self, store_id: str) -> int:
        return int(
            self._x(
                f"SELECT count(*) AS n FROM {self.count_live_from} WHERE store_id = ? AND deleted_at IS NULL",
                (store_id,),
            ).fetchone()["n"]
        )

    def live_totals_sql(self) -> str:
        return (
            f"SELECT count(*) AS n, coalesce(sum(size), 0) AS bytes FROM {self.live_totals_from} "
            "WHERE store_id = ? AND deleted_at IS NULL"
        )

    def live_totals(self, store_id: str) -> tuple[int, int]:
        """(number, total content bytes) of the store's live memories, read from the covering index
        `memories_live_size`: no memory row is read, so a store overview stays cheap at any size."""
        row = self._x(self.live_totals_sql(), (store_id,)).fetchone()
        return int(row["n"]), int(row["bytes"])

    def list_live(
        self, store_id: str, *, lo: str, lo_inclusive: bool, hi: str, limit: int, content: bool
    ) -> list[MemoryRecord]:
        """Live memories with lo <(=) path < hi, in byte order of path, at most `limit`."""
        cols = _MEM_COLS + (", content" if content else "")
        op = ">=" if lo_inclusive else ">"
        rows = self._x(
            f"SELECT {cols} FROM memories WHERE store_id = ? AND deleted_at IS NULL AND path {op} ? AND path < ? "
            "ORDER BY path LIMIT ?",
            (store_id, lo, hi, limit),
        ).fetchall()
        return [self._memory(r, content) for r in rows]

    def _tuples(self, sql: str, args: Sequence) -> list[tuple]:
        """The rows of a query as plain tuples, in the order of its columns (a backend whose
        connection can hand them out so, without a row object each, overrides this)."""
        return [tuple(r.values()) for r in self._x(sql, args).fetchall()]

    def live_rows(
        self, store_id: str, *, lo: str, lo_inclusive: bool, hi: str, limit: int, content: bool
    ) -> list[tuple]:
        """`list_live` as tuples (`LIVE_ROW_COLS`, then the content when asked), for the list
        page that goes straight to wire JSON (listing.list_page_wire): a `MemoryRecord` and a row
        object per memory were a large part of a hosted page's CPU (PERFORMANCE.md)."""
        op = ">=" if lo_inclusive else ">"
        rows = self._tuples(
            f"SELECT {LIVE_ROW_COLS}{', content' if content else ''} FROM memories WHERE store_id = ? "
            f"AND deleted_at IS NULL AND path {op} ? AND path < ? ORDER BY path LIMIT ?",
            (store_id, lo, hi, limit),
        )
        if content and type(self)._content_out is not SqlTx._content_out:
            out = self._content_out
            rows = [(*r[:-1], out(r[-1])) for r in rows]
        return rows

    def contents(self, store_id: str, memory_ids: Sequence[str]) -> dict[str, str | None]:
        """memory id -> content of those of `memory_ids` that are live in the store."""
        marks = ",".join("?" * len(memory_ids))
        rows = self._x(
            f"SELECT id, content FROM memories WHERE store_id = ? AND deleted_at IS NULL AND id IN ({marks})",
            (store_id, *memory_ids),
        ).fetchall()
        return {r["id"]: self._content_out(r["content"]) for r in rows}

    def writers(self, store_id: str, memory_ids: Sequence[str]) -> dict[str, Actor | None]:
        """memory id -> who wrote the current version of those of `memory_ids` that are live."""
        marks = ",".join("?" * len(memory_ids))
        rows = self._x(
            "SELECT m.id, v.actor_type, v.actor_id FROM memories m LEFT JOIN versions v ON v.id = m.version_id "
            f"WHERE m.store_id = ? AND m.deleted_at IS NULL AND m.id IN ({marks})",
            (store_id, *memory_ids),
        ).fetchall()
        return {r["id"]: _actor(r["actor_type"], r["actor_id"]) for r in rows}

    def insert_memory(self, m: MemoryRecord, counter: int) -> None:
        """Raises PathTaken when a live memory holds m.path."""
        try:
            self._x(
                "INSERT INTO memories (id, store_id, path, content, sha, size, version_id, counter, created_at, "
                "updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (m.id, m.memory_store_id, m.path, self._content_in(m.content), m.content_sha256, m.content_size_bytes,
                 m.memory_version_id, counter, m.created_at, m.updated_at),
            )  # fmt: skip
        except self.integrity_errors:
            raise PathTaken(m.path) from None

    def update_memory(
        self,
        memory_id: str,
        *,
        path: str,
        content: str,
        sha: str,
        size: int,
        version_id: str,
        counter: int,
        at: str,
    ) -> None:
        """Raises PathTaken when another live memory holds `path`."""
        try:
            self._x(
                "UPDATE memories SET path = ?, content = ?, sha = ?, size = ?, version_id = ?, counter = ?, "
                "updated_at = ? WHERE id = ?",
                (path, self._content_in(content), sha, size, version_id, counter, at, memory_id),
            )
        except self.integrity_errors:
            raise PathTaken(path) from None

    def tombstone_memory(self, memory_id: str, *, version_id: str, counter: int, at: str) -> None:
        """Mark deleted (path kept, content dropped) so the changes feed can still report it."""
        self._x(
            "UPDATE memories SET deleted_at = ?, content = NULL, version_id = ?, counter = ?, updated_at = ? "
            "WHERE id = ?",
            (at, version_id, counter, at, memory_id),
        )

    def changed_since(self, store_id: str, since: int) -> list[tuple[MemoryRecord, bool]]:
        """(memory without content, deleted?) for every memory, live or not, last written after
        counter `since`; ordered by path, a tombstone before a live memory at its path, then id."""
        rows = self._x(
            f"SELECT {_MEM_COLS}, deleted_at FROM memories WHERE store_id = ? AND counter > ? "
            "ORDER BY path, deleted_at IS NULL, id",  # a tombstone before a live memory at its path
            (store_id, since),
        ).fetchall()
        return [(_memory(r, None), r["deleted_at"] is not None) for r in rows]

    def path_at(self, store_id: str, memory_id: str, counter: int) -> tuple[str, str | None] | None:
        """(operation, path) of the memory's last version at or before `counter`, if any."""
        row = self._x(
            "SELECT operation, path FROM versions WHERE store_id = ? AND memory_id = ? AND counter <= ? "
            "ORDER BY counter DESC LIMIT 1",
            (store_id, memory_id, counter),
        ).fetchone()
        return (row["operation"], row["path"]) if row else None

    def memory_states(
        self, store_id: str, memory_ids: Sequence[str] | None
    ) -> dict[str, tuple[str, str, bool]]:
        """id -> (version id, updated_at, deleted) of the named memories, tombstones included
        (None: every live memory of the store): what a cache compares an upstream state with."""
        if memory_ids is None:
            rows = self._x(
                "SELECT id, version_id, updated_at, deleted_at FROM memories WHERE store_id = ? AND deleted_at IS NULL",
                (store_id,),
            ).fetchall()
        elif not memory_ids:
            return {}
        else:
            marks = ",".join("?" * len(memory_ids))
            rows = self._x(
                f"SELECT id, version_id, updated_at, deleted_at FROM memories WHERE store_id = ? AND id IN ({marks})",
                (store_id, *memory_ids),
            ).fetchall()
        return {r["id"]: (r["version_id"], r["updated_at"], r["deleted_at"] is not None) for r in rows}

    # --- versions --------------------------------------------------------------------------------

    def insert_version(self, v: VersionRecord, counter: int) -> None:
        actor = v.created_by
        self._x(
            "INSERT INTO versions (id, store_id, memory_id, operation, path, content, sha, size, counter, created_at, "
            "actor_type, actor_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (v.id, v.memory_store_id, v.memory_id, v.operation, v.path, self._content_in(v.content), v.content_sha256,
             v.content_size_bytes, counter, v.created_at, actor.type if actor else None, actor.id if actor else None),
        )  # fmt: skip

    def version(self, store_id: str, version_id: str) -> VersionRecord | None:
        row = self._x(
            f"SELECT {_VER_COLS}, content FROM versions WHERE id = ? AND store_id = ?", (version_id, store_id)
        ).fetchone()
        return self._version(row, True) if row else None

    def list_versions(
        self, store_id: str, *, filters: VersionFilter, after: str | None, limit: int, content: bool
    ) -> list[tuple[str, VersionRecord]]:
        """With positions "CREATED_AT ID", in the hosted order: `created_at` descending, `id`
        descending among equal times. Not commit
        order (seq): a version written late may carry an earlier time (a late commit, or the
        emulator's --test-late-versions) and is listed where its time puts it, as the hosted API does."""
        where: list[str] = ["store_id = ?"]
        args: list[object] = [store_id]
        if after is not None:
            at, _, vid = after.partition(" ")
            where.append(f"(created_at, {self.version_id}) < (?, ?)")
            args += [at, vid]
        for col, val in (("memory_id", filters.memory_id), ("operation", filters.operation)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        if filters.session_id is not None:
            where.append("actor_type = 'session_actor' AND actor_id = ?")
            args.append(filters.session_id)
        if filters.api_key_id is not None:
            where.append("actor_type = 'api_actor' AND actor_id = ?")
            args.append(filters.api_key_id)
        if filters.created_gte is not None:
            where.append("created_at >= ?")
            args.append(filters.created_gte)
        if filters.created_lte is not None:
            where.append("created_at <= ?")
            args.append(filters.created_lte)
        cols = _VER_COLS + (", content" if content else "")
        rows = self._x(
            f"SELECT {cols} FROM versions WHERE {' AND '.join(where)} "
            f"ORDER BY created_at DESC, {self.version_id} DESC LIMIT ?",
            (*args, limit),
        ).fetchall()
        return [(f"{r['created_at']} {r['id']}", self._version(r, content)) for r in rows]

    def redact_version(self, version_id: str, *, at: str, actor: Actor) -> None:
        self._x(
            "UPDATE versions SET content = NULL, path = NULL, sha = NULL, size = NULL, redacted_at = ?, "
            "redactor_type = ?, redactor_id = ? WHERE id = ?",
            (at, actor.type, actor.id, version_id),
        )

    # --- retention (retention.py) -----------------------------------------------------------------

    def store_ids(self) -> list[str]:
        return [r["id"] for r in self._x("SELECT id FROM stores ORDER BY seq").fetchall()]

    def retention_horizon(self, store_id: str, cutoff: str) -> int:
        """The largest counter C such that every version with counter <= C was written before
        `cutoff` (timestamps need not follow counters exactly, so the first recent one bounds it)."""
        row = self._x(
            "SELECT min(counter) AS m FROM versions WHERE store_id = ? AND created_at >= ?",
            (store_id, cutoff),
        ).fetchone()
        return self.counter(store_id) if row["m"] is None else int(row["m"]) - 1

    def prunable_versions(
        self, store_id: str, horizon: int, limit: int, after_seq: int = 0
    ) -> list[tuple[int, str]]:
        """(seq, id) of versions at or below `horizon` that are not their memory's last one at or
        below it, in seq order after `after_seq` (a pass resumes where its last batch ended, so no
        batch rescans what the earlier ones kept)."""
        rows = self._x(
            "SELECT v.seq, v.id FROM versions v WHERE v.store_id = ? AND v.seq > ? AND v.counter <= ? AND EXISTS ("
            "SELECT 1 FROM versions w WHERE w.store_id = v.store_id AND w.memory_id = v.memory_id "
            "AND w.counter > v.counter AND w.counter <= ?) ORDER BY v.seq LIMIT ?",
            (store_id, after_seq, horizon, horizon, limit),
        ).fetchall()
        return [(r["seq"], r["id"]) for r in rows]

    def prunable_tombstones(self, store_id: str, horizon: int, limit: int) -> list[str]:
        rows = self._x(
            "SELECT id FROM memories WHERE store_id = ? AND deleted_at IS NOT NULL AND counter <= ? LIMIT ?",
            (store_id, horizon, limit),
        ).fetchall()
        return [r["id"] for r in rows]

    def delete_versions(self, store_id: str, version_ids: Sequence[str]) -> int:
        """Returns the rows deleted."""
        marks = ",".join("?" * len(version_ids))
        return self._x(
            f"DELETE FROM versions WHERE store_id = ? AND id IN ({marks})", (store_id, *version_ids)
        ).rowcount

    def delete_tombstones(self, store_id: str, memory_ids: Sequence[str]) -> int:
        """The deleted memories and every version of them; returns the rows deleted."""
        marks = ",".join("?" * len(memory_ids))
        n = self._x(
            f"DELETE FROM versions WHERE store_id = ? AND memory_id IN ({marks})", (store_id, *memory_ids)
        ).rowcount
        return (
            n
            + self._x(
                f"DELETE FROM memories WHERE store_id = ? AND deleted_at IS NOT NULL AND id IN ({marks})",
                (store_id, *memory_ids),
            ).rowcount
        )

    # --- sessions --------------------------------------------------------------------------------

    def insert_session(self, s: SessionRecord, token_hash: str) -> None:
        self._x(
            "INSERT INTO sessions (id, token_hash, title, metadata, created_at, updated_at) VALUES (?,?,?,?,?,?)",
            (s.id, token_hash, s.title, json.dumps(s.metadata), s.created_at, s.updated_at),
        )
        self.c.cursor().executemany(
            self._sql("INSERT INTO session_resources VALUES (?,?,?,?,?,?,?,?)"),
            [(s.id, pos, r.memory_store_id, r.access, r.name, r.description, r.instructions, r.mount_path)
             for pos, r in enumerate(s.resources)],
        )  # fmt: skip

    def session(self, session_id: str) -> SessionRecord | None:
        row = self._x("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        res = self._x(
            "SELECT * FROM session_resources WHERE session_id = ? ORDER BY position", (session_id,)
        ).fetchall()
        return SessionRecord(
            id=row["id"],
            title=row["title"],
            metadata=json.loads(row["metadata"]),
            resources=[
                ResourceRecord(
                    memory_store_id=r["memory_store_id"],
                    access=r["access"],
                    name=r["name"],
                    description=r["description"],
                    instructions=r["instructions"],
                    mount_path=r["mount_path"],
                )
                for r in res
            ],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            archived_at=row["archived_at"],
        )

    def session_id_for_token(self, token_hash: str) -> str | None:
        """The id of the live (not archived) session holding this token hash."""
        row = self._x(
            "SELECT id FROM sessions WHERE token_hash = ? AND archived_at IS NULL", (token_hash,)
        ).fetchone()
        return row["id"] if row else None

    def archive_session(self, session_id: str, at: str) -> None:
        """Set archived_at (the first one is kept) and drop the token hash: the token is revoked
        for good."""
        self._x(
            "UPDATE sessions SET archived_at = coalesce(archived_at, ?), updated_at = ?, token_hash = NULL "
            "WHERE id = ?",
            (at, at, session_id),
        )

    def session_ids_for_store(self, store_id: str) -> list[str]:
        """Ids of every session (archived ones too) that attaches the store, newest first."""
        rows = self._x(
            "SELECT id FROM sessions WHERE id IN "
            "(SELECT session_id FROM session_resources WHERE memory_store_id = ?) ORDER BY seq DESC",
            (store_id,),
        ).fetchall()
        return [r["id"] for r in rows]


class HeldRead(SqlTx, ABC):
    """A read transaction on its own connection, held open by its caller until `close()` (a
    snapshot streamed over many calls): what `Backend.open_read` returns, each backend its own."""

    def live_batches(self, store_id: str, n: int) -> Iterator[list[MemoryRecord]]:
        """Every live memory of the store with content, in path order, `n` at a time."""
        cur = self._x(
            f"SELECT {_MEM_COLS}, content FROM memories WHERE store_id = ? AND deleted_at IS NULL ORDER BY path",
            (store_id,),
        )
        while rows := cur.fetchmany(n):
            yield [self._memory(r, True) for r in rows]

    @abstractmethod
    def close(self) -> None:
        """End the transaction and give the connection back."""
