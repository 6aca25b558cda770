"""Version history retention (docs/SEMANTICS.md#d-retention): a background job that deletes history past the window.

Every version is kept for at least `--version-retention-days` after it was written (0 keeps
everything). Per store, the **horizon** H is the largest counter such that every version with
counter <= H is older than the window. Deleted, in small batches:

- versions with counter <= H that are not their memory's last version at or below H — so each
  live memory's current version is always kept, and so is, for every memory, the version that
  says where it was at counter H (the changes feed's `previous_path` for any `since` >= H);
- deleted memories (tombstones) whose deletion is at or below H, with all their versions: a
  changes request from H on would not report them anyway (they were deleted before H).

The transaction that deletes a batch first raises the store's history floor to H (`store_kv`
`history_floor`, only ever raised): a changes request with `since` < floor answers `too_old` and
the client lists instead, because the feed could miss a deletion or a previous path there. A
batch is one short write transaction on one store (the per-store lock on PostgreSQL, the file
lock on SQLite), so writers never wait long behind the job. The job never moves a counter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import anyio
import anyio.to_thread

from memfs.service.backend import Backend

log = logging.getLogger("memfs.service.retention")

DEFAULT_RETENTION_DAYS = 30.0
DEFAULT_INTERVAL_S = 300.0
BATCH = 200  # rows per transaction: a few milliseconds of a write lock
_MAX_BATCHES_PER_STORE = 10_000  # a bound on one pass over one store (2 M rows)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Retention:
    def __init__(
        self,
        backend: Backend,
        days: float,
        *,
        clock: Callable[[], datetime] = _utc_now,
        batch: int = BATCH,
    ):
        if days < 0:
            raise ValueError("retention days must be >= 0")
        self.backend = backend
        self.days = days
        self.clock = clock  # injected by tests: "now", an aware UTC datetime
        self.batch = batch

    @property
    def enabled(self) -> bool:
        return self.days > 0

    def cutoff(self) -> str:
        # The same fixed-width format as rules.now(), so text order is time order.
        return (self.clock() - timedelta(days=self.days)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def run_once(self) -> int:
        """One pass over every store; returns the rows deleted (versions and tombstones).
        Blocking (a worker thread)."""
        if not self.enabled:
            return 0
        with self.backend.read() as tx:
            store_ids = tx.store_ids()
        return sum(self.prune_store(sid) for sid in store_ids)

    def prune_store(self, store_id: str) -> int:
        deleted, after_seq = 0, 0
        for _ in range(_MAX_BATCHES_PER_STORE):
            n, after_seq = self._batch(store_id, after_seq)
            if n == 0:
                break
            deleted += n
        return deleted

    def _batch(self, store_id: str, after_seq: int) -> tuple[int, int]:
        """(rows deleted, where the next batch resumes)."""
        with self.backend.write(store_id) as tx:
            if tx.store(store_id) is None:  # deleted meanwhile
                return 0, after_seq
            horizon = tx.retention_horizon(store_id, self.cutoff())
            found = tx.prunable_versions(store_id, horizon, self.batch, after_seq)
            versions = [vid for _seq, vid in found]
            tombstones = tx.prunable_tombstones(store_id, horizon, max(1, self.batch - len(versions)))
            if not versions and not tombstones:
                return 0, after_seq
            # Floor first, in the same transaction: no reader can see the history gone and the
            # floor still low.
            tx.raise_history_floor(store_id, horizon)
            n = tx.delete_versions(store_id, versions) if versions else 0
            n += tx.delete_tombstones(store_id, tombstones) if tombstones else 0
            # rows deleted (versions and tombstones); never 0 here, so the loop goes on
            return max(n, 1), (found[-1][0] if found else after_seq)


async def run_periodically(retention: Retention, interval_s: float = DEFAULT_INTERVAL_S) -> None:
    """The background job: a pass at start, then every `interval_s`, until cancelled (shutdown).

    anyio, not trio: it runs under whichever event loop the service's server uses."""
    if not retention.enabled:
        return
    while True:
        try:
            n = await anyio.to_thread.run_sync(retention.run_once)
            if n:
                log.info("retention: deleted %d history rows older than %g days", n, retention.days)
        except Exception as e:  # a database hiccup: try again next time, never kill the service
            log.warning("retention pass failed: %s: %s", type(e).__name__, e)
        await anyio.sleep(interval_s)
