"""The sync bookkeeping of the state dir (the sync engine's `Journal` port, with blobs.py and
kept.py): each store's identity, counter and last result; the baseline (what the store held at
the last sync); refused uploads, skipped memories and held deletes. Every write bumps the store's
generation, so the engine can tell that nothing it plans from changed."""

from __future__ import annotations

import json
from dataclasses import dataclass

from memfs.mount.statedb import StateDb
from memfs.protocol import Access
from memfs.records import BaseEntry, FeedPosition, RefusedEntry, SkippedEntry, StoreInfo


@dataclass(frozen=True, slots=True)
class StoreRow:
    """A store's row: who it is, and how far the sync got with it."""

    info: StoreInfo
    counter: int | None
    last_sync_at: str | None
    last_result: str | None
    last_error: str | None

    @property
    def store_id(self) -> str:
        return self.info.store_id


class SyncJournal(StateDb):
    # ---- stores ----------------------------------------------------------------------------

    def set_store(self, store_id: str, name: str, slug: str, access: Access) -> None:
        """Insert or update a store's identity; keeps counter and sync results."""
        if access not in ("read_write", "read_only"):
            raise ValueError(f"bad access {access!r}")
        with self.transaction() as db:
            db.execute(
                "INSERT INTO stores(store_id, name, slug, access) VALUES(?,?,?,?) "
                "ON CONFLICT(store_id) DO UPDATE SET name=excluded.name, slug=excluded.slug, "
                "access=excluded.access",
                (store_id, name, slug, access),
            )

    _STORE_FIELDS = frozenset(
        {"counter", "last_sync_at", "last_result", "last_error", "name", "slug", "access"}
    )

    def update_store(self, store_id: str, **fields: object) -> None:
        """update_store(id, counter=…, last_sync_at=…, last_result=…, last_error=…)."""
        bad = set(fields) - self._STORE_FIELDS
        if bad:
            raise ValueError(f"unknown store fields {sorted(bad)}")
        if not fields:
            return
        cols = ", ".join(f"{k}=?" for k in fields)
        with self.transaction() as db:
            cur = db.execute(f"UPDATE stores SET {cols} WHERE store_id=?", (*fields.values(), store_id))
            if cur.rowcount == 0:
                raise KeyError(store_id)

    def store_counter(self, store_id: str) -> int | None:
        """The last counter fully applied to the view (None before the first download)."""
        row = self.store(store_id)
        return row.counter if row else None

    def set_store_counter(self, store_id: str, counter: int | None) -> None:
        self.update_store(store_id, counter=counter)

    def feed_position(self, store_id: str) -> FeedPosition | None:
        """Where the store's version feed was last read to (None: never, e.g. not the hosted API)."""
        with self._mutex:
            r = self._db.execute("SELECT position, seen FROM feed WHERE store_id=?", (store_id,)).fetchone()
        return FeedPosition(r[0], frozenset(json.loads(r[1]))) if r else None

    def set_feed_position(self, store_id: str, feed: FeedPosition | None) -> None:
        """Not a change to what is staged: the generation stays (it steers planning, not reading)."""
        with self.transaction() as db:
            if feed is None:
                db.execute("DELETE FROM feed WHERE store_id=?", (store_id,))
            else:
                db.execute(
                    "INSERT OR REPLACE INTO feed(store_id, position, seen) VALUES(?,?,?)",
                    (store_id, feed.position, json.dumps(sorted(feed.seen))),
                )

    def stores(self) -> list[StoreRow]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT store_id, name, slug, access, counter, last_sync_at, last_result, last_error "
                "FROM stores ORDER BY rowid"
            ).fetchall()
        return [StoreRow(StoreInfo(*r[:4]), *r[4:]) for r in rows]

    def store(self, store_id: str) -> StoreRow | None:
        with self._mutex:
            r = self._db.execute(
                "SELECT store_id, name, slug, access, counter, last_sync_at, last_result, last_error "
                "FROM stores WHERE store_id=?",
                (store_id,),
            ).fetchone()
        return StoreRow(StoreInfo(*r[:4]), *r[4:]) if r else None

    # ---- baseline --------------------------------------------------------------------------

    def baseline(self, store_id: str) -> dict[str, BaseEntry]:
        """path -> what the store held at the last sync."""
        with self._mutex:
            rows = self._db.execute(
                "SELECT memory_id, path, sha, size FROM baseline WHERE store_id=?", (store_id,)
            ).fetchall()
        return {r[1]: BaseEntry(*r) for r in rows}

    def set_baselines(self, store_id: str, entries: list[tuple[str, str, str, int]]) -> None:
        """set_baseline for many (memory_id, path, sha, size), as two statements (a first download's)."""
        self._bump(store_id)
        with self.transaction() as db:
            db.executemany(
                "DELETE FROM baseline WHERE store_id=? AND path=? AND memory_id<>?",
                ((store_id, path, memory_id) for memory_id, path, _sha, _size in entries),
            )
            db.executemany(
                "INSERT OR REPLACE INTO baseline(store_id, memory_id, path, sha, size) VALUES(?,?,?,?,?)",
                ((store_id, *e) for e in entries),
            )

    def set_baseline(self, store_id: str, memory_id: str, path: str, sha: str, size: int) -> None:
        """Record a memory as synced; a row of another memory at the same path is replaced.
        (The table's `updated_at` column is left NULL: nothing reads it.)"""
        self._bump(store_id)
        with self.transaction() as db:
            db.execute(
                "DELETE FROM baseline WHERE store_id=? AND path=? AND memory_id<>?",
                (store_id, path, memory_id),
            )
            db.execute(
                "INSERT OR REPLACE INTO baseline(store_id, memory_id, path, sha, size) VALUES(?,?,?,?,?)",
                (store_id, memory_id, path, sha, size),
            )

    def drop_baseline(self, store_id: str, memory_id: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute("DELETE FROM baseline WHERE store_id=? AND memory_id=?", (store_id, memory_id))

    # ---- refused / skipped / deletes_held ------------------------------------------------

    def refused(self, store_id: str) -> dict[str, RefusedEntry]:
        """path -> content the store refused there."""
        with self._mutex:
            rows = self._db.execute(
                "SELECT path, sha, reason FROM refused WHERE store_id=?", (store_id,)
            ).fetchall()
        return {r[0]: RefusedEntry(r[1], r[2]) for r in rows}

    def set_refused(self, store_id: str, path: str, sha: str, reason: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO refused(store_id, path, sha, reason) VALUES(?,?,?,?)",
                (store_id, path, sha, reason),
            )

    def clear_refused(self, store_id: str, path: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute("DELETE FROM refused WHERE store_id=? AND path=?", (store_id, path))

    def skipped(self, store_id: str) -> dict[str, SkippedEntry]:
        """memory_id -> remote memory not materialised here."""
        with self._mutex:
            rows = self._db.execute(
                "SELECT memory_id, path, sha, size, reason FROM skipped WHERE store_id=?", (store_id,)
            ).fetchall()
        return {r[0]: SkippedEntry(*r[1:]) for r in rows}

    def set_skipped(
        self, store_id: str, memory_id: str, path: str, sha: str | None, size: int | None, reason: str
    ) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO skipped(store_id, memory_id, path, sha, size, reason) VALUES(?,?,?,?,?,?)",
                (store_id, memory_id, path, sha, size, reason),
            )

    def clear_skipped(self, store_id: str, memory_id: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute("DELETE FROM skipped WHERE store_id=? AND memory_id=?", (store_id, memory_id))

    def deletes_held(self, store_id: str) -> set[str]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT memory_id FROM deletes_held WHERE store_id=?", (store_id,)
            ).fetchall()
        return {r[0] for r in rows}

    def add_delete_held(self, store_id: str, memory_id: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO deletes_held(store_id, memory_id) VALUES(?,?)", (store_id, memory_id)
            )

    def clear_delete_held(self, store_id: str, memory_id: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute("DELETE FROM deletes_held WHERE store_id=? AND memory_id=?", (store_id, memory_id))
