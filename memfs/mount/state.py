"""The mount's state dir: lock, state.db (SQLite), kept/ (DESIGN.md "Mount state dir").

Everything the mount must not lose lives here. `State` is one object over one state dir, made of
parts with one job each:

- statedb.py: opening state.db, schema and migrations, the lock, transactions, meta, generations;
- view_rows.py: the view's durable rows (files, dirs, notices) the filesystem core writes;
- journal.py: the sync bookkeeping (stores, baseline, refused, skipped, held deletes);
- blobs.py: content by sha in the `blobs` table, with an LRU cache;
- kept.py: kept copies of content the agent lost, as plain files.

The sync engine sees a `State` as its `Journal` port (memfs/sync/ports.py).
"""

from __future__ import annotations

import os

from memfs.mount.blobs import DEFAULT_CACHE_BYTES, BlobStore
from memfs.mount.journal import SyncJournal
from memfs.mount.kept import KeptCopies
from memfs.mount.statedb import StateError, StateLocked
from memfs.mount.view_rows import ViewRows

__all__ = ["State", "StateError", "StateLocked"]  # what State(d) and State.lock() raise


class State(ViewRows, SyncJournal, BlobStore, KeptCopies):
    """One state dir. `State(d)` creates the layout and opens (and migrates) state.db."""

    def __init__(self, state_dir: str | os.PathLike[str], *, cache_bytes: int = DEFAULT_CACHE_BYTES):
        super().__init__(state_dir)
        self._init_blobs(cache_bytes)

    def untouched(self) -> bool:
        """No mount has used this state dir yet: no store's counter, no file, no baseline (a new
        sandbox, whose first download the mount's early download may stream into the blobs)."""
        with self.transaction() as db:
            (used,) = db.execute(
                "SELECT EXISTS(SELECT 1 FROM stores WHERE counter IS NOT NULL)"
                " OR EXISTS(SELECT 1 FROM files) OR EXISTS(SELECT 1 FROM baseline)"
            ).fetchone()
        return not used
