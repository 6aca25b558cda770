"""Watch (docs/SEMANTICS.md#d-counter, docs/API.md): held requests woken when a store's counter moves, on whichever replica.

One `WatchHub` per process, fanned out in memory: a held request is a `_Waiter` (its stores'
known counters and an event), indexed by store id. The hub learns of commits from one source per
process, whatever the number of waiters:

- **PostgreSQL**: every counter bump also runs `pg_notify('memfs_counters', 'STORE:COUNTER')` in
  the writing transaction, delivered at commit to every listening connection of every replica. One
  thread per process holds one `LISTEN` connection and hands each notification to the event loop.
  After a reconnect (notifications may have been missed) every watched store is re-read.
- **SQLite**: several processes may share the file, so nothing in memory can know of all commits.
  `PRAGMA data_version` on one dedicated connection changes whenever another connection commits;
  it is polled every 25 ms — only while somebody is waiting — and when it moved, the counters of
  the watched stores are read in one transaction.

A waiter registers first and reads its stores' counters second, so no commit falls between the
two unnoticed. Once held, a waiter is answered from the counters the source reports (committed
ones, newer than those it read): a wake-up costs no database read, whatever the number of waiters
one commit wakes. Only a report that needs a read (a store deleted, a reconnect, shutdown) or the
end of the wait reads again. `close()` (shutdown) answers every held request at once and new ones
immediately.
The hub runs under any anyio event loop (asyncio under uvicorn; trio in the in-process tests).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Sequence

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from memfs.service.rules import StoreService

log = logging.getLogger("memfs.service.watch")

CHANNEL = "memfs_counters"
MAX_WAIT_S = 60.0
SQLITE_POLL_S = 0.025


class _Waiter:
    __slots__ = ("known", "event", "moved", "recheck")

    def __init__(self, known: dict[str, int]):
        self.known = known
        self.event = anyio.Event()
        self.moved: dict[str, int] = {}  # store -> the newest counter the change source reported
        self.recheck = False  # something moved that only a read can tell (deleted, reconnected, shutdown)


class WatchHub:
    def __init__(self, storage: StoreService):
        self.storage = storage
        self._by_store: dict[str, set[_Waiter]] = {}
        self._closed = False
        # the SQLite poller sleeps on this while nobody waits (created on the loop, not here)
        self._waiting: anyio.Event | None = None
        self._stop_thread = threading.Event()
        # set by create_app: CounterPath.watched_counters (None: read through the storage)
        self.fast_read: Callable[[Sequence[str]], Awaitable[dict[str, int] | None]] | None = None

    # --- the held request ------------------------------------------------------------------------

    async def wait(
        self,
        known: dict[str, int],
        wait_s: float,
        first_read: Callable[[], Awaitable[dict[str, int] | None]] | None = None,
    ) -> tuple[bool, dict[str, int]] | None:
        """(changed, current counters of `known`'s stores): at once when any differs, else when
        one moves, else after `wait_s` (or at shutdown) with changed False.

        `first_read` (the counter fast path's watch, counter_path.py): the read made after
        registering, which also checks the caller's credential; when it answers None the caller
        is not sure of the request and None is returned at once (nothing held)."""
        waiter = _Waiter(known)
        self._add(waiter)
        try:
            if first_read is not None:
                first = await first_read()
                if first is None:
                    return None
                counters = first
            else:
                counters = await self._read(list(known))
            if counters != known or self._closed:
                return counters != known, counters
            with anyio.move_on_after(min(wait_s, MAX_WAIT_S)):
                await waiter.event.wait()
            if waiter.moved and not waiter.recheck:
                # Answered from what the change source reported, with no read: a write to a store
                # watched by hundreds wakes them all at once, and a read each (even one batched)
                # put the database's queue into every wake-up. Each reported counter is committed
                # and newer than the one read at registering; the other stores had not moved then
                # and no commit of theirs was reported since (one that is, wakes the re-armed watch).
                return True, {**known, **waiter.moved}
            counters = await self._read(list(known))
            return counters != known, counters
        finally:
            self._remove(waiter)

    async def _read(self, store_ids: Sequence[str]) -> dict[str, int]:
        if self.fast_read is not None:  # the counter fast path's batched read (counter_path.py)
            counters = await self.fast_read(store_ids)
            if counters is not None:
                return counters
        # a missing store (or no fast path): the full read, which raises the error to answer
        return await anyio.to_thread.run_sync(self.storage.get_counters, store_ids)

    def _add(self, w: _Waiter) -> None:
        for sid in w.known:
            self._by_store.setdefault(sid, set()).add(w)
        if self._waiting is not None:
            self._waiting.set()

    def _remove(self, w: _Waiter) -> None:
        for sid in w.known:
            waiters = self._by_store.get(sid)
            if waiters is not None:
                waiters.discard(w)
                if not waiters:
                    del self._by_store[sid]

    # --- what the sources call, on the event loop ----------------------------------------------------

    def publish(self, store_id: str, counter: int | None) -> None:
        """Store `store_id` is at `counter` now (None: unknown, e.g. deleted): wake who knew less.

        A held watch knows the counter it read after registering, so a report of that counter or
        an older one (a notification of an earlier commit, delivered after that read) is not news."""
        for w in list(self._by_store.get(store_id, ())):
            if counter is None:
                w.recheck = True
                w.event.set()
            elif counter > w.moved.get(store_id, w.known[store_id]):
                w.moved[store_id] = counter
                w.event.set()

    def publish_all(self) -> None:
        """Anything may have moved (a reconnect, shutdown): every held watch reads again."""
        for waiters in list(self._by_store.values()):
            for w in waiters:
                w.recheck = True
                w.event.set()

    def watched(self) -> list[str]:
        return list(self._by_store)

    def close(self) -> None:
        """Shutdown: every held request answers now ("unchanged" unless a counter moved)."""
        self._closed = True
        self._stop_thread.set()
        self.publish_all()

    # --- the change source -------------------------------------------------------------------------

    async def run(self) -> None:
        """The process's one change source, until cancelled."""
        backend = getattr(self.storage, "backend", None)
        path = getattr(backend, "path", None)
        url = getattr(backend, "url", None)
        if url is not None:
            await self._run_postgres(url)
        elif path is not None:
            await self._run_sqlite(path)

    async def _run_sqlite(self, path: str) -> None:
        import sqlite3

        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)

        def data_version() -> int:
            return conn.execute("PRAGMA data_version").fetchone()[0]

        try:
            last = await anyio.to_thread.run_sync(data_version)
            while not self._closed:
                if not self._by_store:
                    self._waiting = anyio.Event()
                    await self._waiting.wait()  # nobody waits: no polling at all
                    last = await anyio.to_thread.run_sync(data_version)
                    continue
                await anyio.sleep(SQLITE_POLL_S)
                now = await anyio.to_thread.run_sync(data_version)
                if now == last:
                    continue
                last = now
                ids = self.watched()
                if not ids:
                    continue
                counters = await anyio.to_thread.run_sync(self._sqlite_counters, ids)
                for sid in ids:
                    self.publish(sid, counters.get(sid))
        finally:
            conn.close()

    def _sqlite_counters(self, ids: list[str]) -> dict[str, int | None]:
        backend = self.storage.backend
        with backend.read() as tx:
            return {sid: (tx.counter(sid) if tx.store(sid) is not None else None) for sid in ids}

    async def _run_postgres(self, url: str) -> None:
        token = anyio.lowlevel.current_token()

        def hand_over(fn, *args) -> None:
            try:
                anyio.from_thread.run_sync(fn, *args, token=token)
            except RuntimeError:  # the loop is gone (shutdown)
                self._stop_thread.set()

        def listen() -> None:
            import psycopg

            backoff = 0.1
            while not self._stop_thread.is_set():
                try:
                    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
                        conn.execute(f"LISTEN {CHANNEL}")
                        backoff = 0.1
                        hand_over(self.publish_all)  # anything may have moved while we were away
                        while not self._stop_thread.is_set():
                            for n in conn.notifies(timeout=0.5):
                                sid, _, counter = n.payload.rpartition(":")
                                hand_over(self.publish, sid, int(counter) if counter.isdigit() else None)
                except Exception as e:  # the database went away: reconnect, bounded backoff
                    if self._stop_thread.is_set():
                        return
                    log.warning("watch: LISTEN connection lost (%s); reconnecting", type(e).__name__)
                    self._stop_thread.wait(backoff)
                    backoff = min(backoff * 2, 5.0)

        try:
            await anyio.to_thread.run_sync(listen, abandon_on_cancel=True)
        finally:
            self._stop_thread.set()
