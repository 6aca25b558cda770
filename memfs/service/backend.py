"""What a storage backend implements: transactions and the queries inside them, nothing else.

The API's rules (ids, timestamps, path conflicts and the order they are reported in, the
precondition/no-op rule, metadata merge, mount paths, --max-memories, the changes feed, paging)
live in `rules.py`, above every backend. A backend (SQLite, PostgreSQL) only stores and finds
rows, and guarantees what the rules cannot:

- `write(*store_ids)` is one transaction that commits when the block ends without an exception
  and rolls back otherwise. For each store named, every other writer to that store waits until it
  ends (the per-store lock the rules' check-then-write relies on); writers to other stores need
  not wait. `bump` inside it returns the store's counter + 1, committed with the writes it counts.
- `read()` is one transaction that sees one consistent state of the database throughout.
- Paths compare in byte order of their UTF-8 (code-point order), whatever the database's locale.
- The backend raises `PathTaken` if, despite the rules' checks, two live memories would share a
  path (the unique index backstop).

Every method is blocking and is called from a worker thread, never from the event loop.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from memfs.service.storage import (
    Actor,
    MemoryRecord,
    SessionRecord,
    StoreRecord,
    VersionFilter,
    VersionRecord,
)


class DatabaseError(RuntimeError):
    """The database cannot be used (unreachable, or a schema newer than this memfs)."""


class WouldBlock(Exception):
    """A `read_nowait()` read would have had to wait (the caller then reads from a worker thread)."""


class PathTaken(Exception):
    """A live memory already holds the path (raised by the unique index, should the checks miss)."""


class Tx(Protocol):
    def ping(self) -> None:
        """A trivial query: the database answers."""

    def savepoint(self) -> AbstractContextManager[None]:
        """A nested transaction inside this one: when the block raises, its writes are undone
        and the transaction goes on (one item of a batch write)."""

    # --- stores ----------------------------------------------------------------------------------
    def store(self, store_id: str) -> StoreRecord | None: ...
    def insert_store(self, s: StoreRecord) -> None: ...
    def update_store(
        self, store_id: str, *, name: str, description: str, metadata: dict[str, str], at: str
    ) -> None: ...
    def archive_store(self, store_id: str, at: str) -> None: ...
    def delete_store(self, store_id: str) -> None:
        """The store, its memories, versions and counters."""

    def clear_store(self, store_id: str) -> None:
        """The store's memories and versions, not its row nor its counters."""

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

    # --- the counter and the history floor --------------------------------------------------------
    def counter(self, store_id: str) -> int: ...
    def kv(self, store_id: str, key: str) -> int:
        """A store's integer under `key` in its key-value area (0 when it never had it)."""

    def set_kv(self, store_id: str, key: str, value: int) -> None: ...
    def start_counter(self, store_id: str, base: int) -> None:
        """A new store's counter and history floor both at `base`."""

    def bump(self, store_id: str) -> int:
        """The store's counter + 1, stored in this transaction (a store never written reads 0)."""

    def history_floor(self, store_id: str) -> int: ...

    def counters_for(self, token_hash: str | None, store_ids: Sequence[str]) -> dict[str, int] | None:
        """Counters of `store_ids` in one statement (sql_tx.counters_query); None when a store is
        missing or, with a token hash, not attached to that token's live session."""

    def counters_batch(
        self, token_hashes: Sequence[str], store_ids: Sequence[str]
    ) -> tuple[dict[str, int], dict[str, set[str]]]:
        """Many `counters_for` in one statement (sql_tx.counters_batch_query): the counters of the
        stores that exist, and which of them each token's live session attaches."""

    def raise_history_floor(self, store_id: str, floor: int) -> None:
        """history_floor = max(history_floor, floor)."""

    # --- retention (retention.py holds the policy) -------------------------------------------------
    def store_ids(self) -> list[str]: ...
    def retention_horizon(self, store_id: str, cutoff: str) -> int: ...
    def prunable_versions(
        self, store_id: str, horizon: int, limit: int, after_seq: int = 0
    ) -> list[tuple[int, str]]: ...
    def prunable_tombstones(self, store_id: str, horizon: int, limit: int) -> list[str]: ...
    def delete_versions(self, store_id: str, version_ids: Sequence[str]) -> int: ...
    def delete_tombstones(self, store_id: str, memory_ids: Sequence[str]) -> int: ...

    # --- memories --------------------------------------------------------------------------------
    def live_memory(self, store_id: str, memory_id: str, *, content: bool) -> MemoryRecord | None: ...
    def live_at(self, store_id: str, paths: Sequence[str]) -> list[tuple[str, str]]:
        """(id, path) of the live memories at any of `paths`, shortest path first."""

    def first_live_in(
        self, store_id: str, lo: str, hi: str, exclude_id: str | None
    ) -> tuple[str, str] | None:
        """(id, path) of the first live memory (byte order) with lo <= path < hi, not `exclude_id`."""

    def count_live(self, store_id: str) -> int: ...
    def live_totals(self, store_id: str) -> tuple[int, int]:
        """(number, total content bytes) of the store's live memories, read from the covering index
        `memories_live_size`: no memory row is read, so a store overview stays cheap at any size."""

    def list_live(
        self, store_id: str, *, lo: str, lo_inclusive: bool, hi: str, limit: int, content: bool
    ) -> list[MemoryRecord]:
        """Live memories with lo <(=) path < hi, in byte order of path, at most `limit`."""

    def live_rows(
        self, store_id: str, *, lo: str, lo_inclusive: bool, hi: str, limit: int, content: bool
    ) -> list[tuple]:
        """`list_live` as plain tuples: sql_tx.LIVE_ROW_COLS, then the content when asked."""

    def contents(self, store_id: str, memory_ids: Sequence[str]) -> dict[str, str | None]:
        """memory id -> content of those of `memory_ids` that are live in the store."""

    def memory_states(
        self, store_id: str, memory_ids: Sequence[str] | None
    ) -> dict[str, tuple[str, str, bool]]:
        """id -> (version id, updated_at, deleted), tombstones included; None: every live memory."""

    def insert_memory(self, m: MemoryRecord, counter: int) -> None:
        """Raises PathTaken when a live memory holds m.path."""

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
    ) -> None: ...
    def tombstone_memory(self, memory_id: str, *, version_id: str, counter: int, at: str) -> None:
        """Mark deleted (path kept, content dropped) so the changes feed can still report it."""

    def changed_since(self, store_id: str, since: int) -> list[tuple[MemoryRecord, bool]]:
        """(memory without content, deleted?) for every memory, live or not, last written after
        counter `since`; ordered by path, a tombstone before a live memory at its path, then id."""

    def path_at(self, store_id: str, memory_id: str, counter: int) -> tuple[str, str | None] | None:
        """(operation, path) of the memory's last version at or before `counter`, if any."""

    # --- versions --------------------------------------------------------------------------------
    def insert_version(self, v: VersionRecord, counter: int) -> None: ...
    def version(self, store_id: str, version_id: str) -> VersionRecord | None: ...
    def list_versions(
        self, store_id: str, *, filters: VersionFilter, after: str | None, limit: int, content: bool
    ) -> list[tuple[str, VersionRecord]]:
        """Newest first (`created_at` desc, `id` desc) with positions "CREATED_AT ID"."""

    def redact_version(self, version_id: str, *, at: str, actor: Actor) -> None: ...

    # --- sessions --------------------------------------------------------------------------------
    def insert_session(self, s: SessionRecord, token_hash: str) -> None: ...
    def session(self, session_id: str) -> SessionRecord | None: ...
    def session_id_for_token(self, token_hash: str) -> str | None:
        """The id of the live (not archived) session holding this token hash."""

    def archive_session(self, session_id: str, at: str) -> None:
        """Set archived_at (the first one is kept) and drop the token hash for good."""

    def session_ids_for_store(self, store_id: str) -> list[str]:
        """Ids of every session (archived ones too) that attaches the store, newest first."""


class ReadTx(Tx, Protocol):
    """A read transaction held open by its caller (a snapshot), closed with `close()`."""

    def live_batches(self, store_id: str, n: int) -> Iterator[list[MemoryRecord]]:
        """Every live memory of the store with content, in path order, `n` at a time."""

    def close(self) -> None: ...


class Backend(Protocol):
    def read(self) -> AbstractContextManager[Tx]: ...
    def write(self, *store_ids: str) -> AbstractContextManager[Tx]: ...
    def open_read(self) -> ReadTx:
        """A read transaction on its own connection, for a snapshot streamed over many calls."""

    # Optional: `read_nowait()`, a read transaction that may run on the event loop because it
    # never waits (raises WouldBlock instead). SQLite has it; PostgreSQL (a network round trip)
    # has not. Used only by the counter fast path (counter_path.py).

    def close(self) -> None: ...
