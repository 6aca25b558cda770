"""What a storage backend implements: transactions, nothing else (`Backend`, two implementations).

The queries inside a transaction are `sql_tx.SqlTx`'s, written once for both backends (each
subclasses it with its dialect's hooks), and typed as that class: with one implementation, a
protocol restating its signatures could only be a second copy that drifts.

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
- The database refuses, with a unique index, two live memories at one path should the rules'
  checks miss (`SqlTx` raises `sql_tx.PathTaken` then).

Every method is blocking and is called from a worker thread, never from the event loop.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from memfs.service.sql_tx import HeldRead, SqlTx


class DatabaseError(RuntimeError):
    """The database cannot be used (unreachable, or a schema newer than this memfs)."""


class WouldBlock(Exception):
    """A `read_nowait()` read would have had to wait (the caller then reads from a worker thread)."""


class Backend(Protocol):
    def read(self) -> AbstractContextManager[SqlTx]: ...
    def write(self, *store_ids: str) -> AbstractContextManager[SqlTx]: ...
    def open_read(self) -> HeldRead:
        """A read transaction on its own connection, for a snapshot streamed over many calls."""

    # Optional: `read_nowait()`, a read transaction that may run on the event loop because it
    # never waits (raises WouldBlock instead). SQLite has it; PostgreSQL (a network round trip)
    # has not. Used only by the counter fast path (counter_path.py).

    def close(self) -> None: ...
