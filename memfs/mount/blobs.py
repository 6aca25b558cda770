"""Content by sha256, in state.db's `blobs` table next to the rows that refer to it, with an LRU
cache of hot content in memory.

Why a table and not one file per blob: one file create costs ~0.6 ms on the disks we run on, so
2,000 blob files made a first download slow, while 2,000 rows in one transaction are a sequential
write. (Schema 1 had blobs/<sha[:2]>/<sha> files; statedb.py imports them once.)"""

from __future__ import annotations

import errno
import hashlib

import cachetools

from memfs.mount.statedb import StateDb

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
EMPTY_SHA = hashlib.sha256(b"").hexdigest()


class BlobStore(StateDb):
    _cache: cachetools.LRUCache[str, bytes]

    def _init_blobs(self, cache_bytes: int) -> None:
        self._cache = cachetools.LRUCache(maxsize=cache_bytes, getsizeof=len)

    def put_blob(self, data: bytes) -> str:
        """Store content by sha256 (in the caller's transaction, if any). Returns the sha."""
        data = bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        # Always asked of the table, never answered from the cache: the cache may hold content
        # whose insert was rolled back with its transaction.
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO blobs(sha, data) VALUES(?, ?)", (sha, data))
        self._cache_put(sha, data)
        return sha

    def put_blobs(self, blobs: list[tuple[str, bytes]]) -> None:
        """Store (sha, content) pairs whose sha the caller computed, in one transaction (a chunk of a
        first download's snapshot, from a worker thread). Not cached: a download would only push
        the content that reads made hot out of the cache, and hold a store's worth in memory."""
        with self.transaction() as db:
            db.executemany("INSERT OR IGNORE INTO blobs(sha, data) VALUES(?, ?)", blobs)

    def _cache_put(self, sha: str, data: bytes) -> None:
        if len(data) <= self._cache.maxsize:
            with self._mutex:
                self._cache[sha] = data

    def get_blob(self, sha: str) -> bytes:
        """Content by sha (hot ones from memory). FileNotFoundError when absent."""
        with self._mutex:
            data = self._cache.get(sha)
        if data is None:
            with self._mutex:
                row = self._db.execute("SELECT data FROM blobs WHERE sha=?", (sha,)).fetchone()
            if row is None:
                raise FileNotFoundError(errno.ENOENT, f"no blob {sha} in {self.db_path}")
            data = bytes(row[0])
            self._cache_put(sha, data)
        return data

    def has_blob(self, sha: str) -> bool:
        with self._mutex:
            return self._db.execute("SELECT 1 FROM blobs WHERE sha=?", (sha,)).fetchone() is not None

    def gc_blobs(self, keep: set[str] | frozenset[str] = frozenset()) -> int:
        """Delete blobs that no files/baseline row references (nor `keep`). Returns how many."""
        with self.transaction() as db:
            live = {r[0] for r in db.execute("SELECT sha FROM files UNION SELECT sha FROM baseline")}
            live |= set(keep)
            live.add(EMPTY_SHA)
            dead = [sha for (sha,) in db.execute("SELECT sha FROM blobs") if sha not in live]
            db.executemany("DELETE FROM blobs WHERE sha=?", ((sha,) for sha in dead))
            for sha in dead:
                self._cache.pop(sha, None)
        return len(dead)
