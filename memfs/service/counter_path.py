"""The counter fast path: `GET …/{id}/counter`, `GET /v1/memory_store_counters` and the watch
(`GET /v1/memory_store_watch`, held by watch.py) without the router.

Why: every mount asks for its counters every tick, so these two routes are most of a busy service's
requests, and their cost was the per-request stack, not the database (docs/PERFORMANCE.md, service
section). Measured in-process here: the read itself (one SQLite read transaction) ~30 µs, a hop to
a worker thread ~120 µs, Starlette's routing, Request/Response objects and a second hop for a
session token's lookup the rest of ~0.5 ms. This path answers those requests with one worker-thread
hop that checks the credential and reads every counter in one read transaction
(`StoreService.counters_for`), and writes the JSON with orjson straight to ASGI.

It answers only what it is sure of: the right beta header, a credential that is the admin key or a
live session's token attached to every store named, stores that exist. Anything else — any error,
HEAD, unexpected query parameters' shapes — returns False and the request goes through the full
path (the routes, memfs/service/routes/), which gives the exact error envelope. So both paths cannot disagree about an error:
only one of them ever produces errors.

Every answer is read from the database (no cached counters, no cached credentials): a counter
read on one replica right after a write acknowledged by another shows that write, counters never
go back between replicas, and an archived session's token is refused by the next request. Reads
that are not on the loop (PostgreSQL, a worker thread) are gathered per event-loop step into one
statement (`_batched`): after a write to an org-wide store hundreds of re-armed watches arrive at
once. A watch is held only once its first read, which checks its credential, succeeded.
The outer frame (frame.py `RequestFrame`) still adds the request id, the access-log line and metrics.
"""

from __future__ import annotations

import functools

import anyio.lowlevel
import anyio.to_thread
import orjson

from memfs.protocol import COUNTERS_PATH, WATCH_PATH, store_counter_path
from memfs.service import request, wire
from memfs.service.auth import hash_token, is_admin_key
from memfs.service.backend import WouldBlock
from memfs.service.ratelimit import FastPathLimit
from memfs.service.request import DEFAULT_WATCH_WAIT_S, MAX_COUNTER_IDS, MAX_WATCH_WAIT_S, RouteName

# Batched statements out at once (CounterPath._batched). A batch is open to new requests until
# it can be sent, so with this many out, the requests that arrive meanwhile wait for one round
# trip at most and then go out together, as one statement: under load the batches grow by
# themselves, and the database (on the same cores, here) answers fewer, larger statements.
MAX_STATEMENTS_OUT = 2
_COUNTER_SUFFIX = "/counter"
_MANY = RouteName(COUNTERS_PATH)
_ONE = RouteName(store_counter_path("{store_id}"))
_WATCH = RouteName(WATCH_PATH)


def _store_ids(scope) -> list[str] | None:
    """The `ids` of a counters request, deduplicated in order, as the full path reads them."""
    ids = request.counter_ids([raw for name, raw in request.query_pairs(scope) if name == "ids"])
    return ids if 0 < len(ids) <= MAX_COUNTER_IDS else None


def _watch_params(scope) -> tuple[dict[str, int], float] | None:
    """(known counters, wait seconds) of a watch request, parsed as the watch route (routes/extensions.py) parses them;
    None for anything that route would refuse (or that it might read otherwise: `wait` twice)."""
    known: dict[str, int] = {}
    waits: list[str] = []
    for name, raw in request.query_pairs(scope):
        if name == "wait":
            waits.append(raw)
            continue
        if name != "known":
            continue
        for item in raw.split(","):
            item = item.strip()
            if not item:
                continue
            sid, sep, value = item.rpartition(":")
            if not sep or not sid or not value.isdigit() or len(value) > 18 or sid in known:
                return None
            known[sid] = int(value)
    if not 0 < len(known) <= MAX_COUNTER_IDS or len(waits) > 1:
        return None
    try:
        wait_s = float(waits[0]) if waits else DEFAULT_WATCH_WAIT_S
    except ValueError:
        return None
    if not 0 <= wait_s <= MAX_WATCH_WAIT_S:  # also refuses nan
        return None
    return known, wait_s


class _Batch:
    """The fast-path reads of one event-loop step, answered by one statement."""

    __slots__ = ("ids", "tokens", "done", "result")

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.tokens: set[str] = set()
        self.done = anyio.Event()
        self.result: tuple[dict[str, int], dict[str, set[str]]] | None = None  # None: it failed

    def answer(self, token_hash: str | None, ids) -> dict[str, int] | None:
        """What `counters_for(token_hash, ids)` would have answered, from the batch's rows."""
        if self.result is None:
            return None
        counters, attached = self.result
        if any(sid not in counters for sid in ids):
            return None
        if token_hash is not None:
            mine = attached.get(token_hash, ())
            if any(sid not in mine for sid in ids):
                return None
        return {sid: counters[sid] for sid in ids}


class CounterPath:
    def __init__(self, storage, admin_key: str, metrics, watch_hub=None, limit: FastPathLimit | None = None):
        self.storage = storage
        self.limit = limit  # the per-credential rate limit (None: none), taken as the full path takes it
        self.admin_key = admin_key
        self.metrics = metrics
        self.watch_hub = watch_hub  # set: watch requests are answered here too (watch.py holds them)
        inline = getattr(storage, "inline_read", None)
        self.inline_read = inline() if inline is not None else None  # SQLite: read on the loop
        self._batch: _Batch | None = None  # the reads of this loop step being gathered
        self._in_flight = anyio.Semaphore(MAX_STATEMENTS_OUT)
        make_async = getattr(getattr(storage, "backend", None), "async_counter_reader", None)
        self.async_reader = make_async() if make_async is not None else None  # PostgreSQL

    async def aclose(self) -> None:
        if self.async_reader is not None:
            await self.async_reader.aclose()

    async def _read(self, token_hash: str | None, ids: list[str]) -> dict[str, int] | None:
        """The cheapest read the backend and loop allow; every one of them reads the database.

        SQLite reads on the loop itself (~30 µs). Anything else — a PostgreSQL round trip, a worker
        thread — joins the batch of this loop step: a write to an org-wide store wakes hundreds
        of watchers whose re-armed watches (and the ticks between them) arrive together, and one
        statement per request queued them on the connections (loadtest: p99 wake-up 3-9 s)."""
        if self.inline_read is not None:  # SQLite: on the loop itself, unless it would wait
            try:
                return self.storage.counters_for(token_hash, ids, read=self.inline_read)
            except WouldBlock:
                pass
        return await self._batched(token_hash, ids)

    async def _batched(self, token_hash: str | None, ids) -> dict[str, int] | None:
        """`counters_for(token_hash, ids)` answered with the other reads of this loop step: the
        first reader yields once, so every request handled in the same step joins, then reads
        the union in one statement (`sql_tx.counters_batch_query`; on PostgreSQL under asyncio
        its prepared form, `postgres_backend.COUNTERS_BATCH`). While MAX_STATEMENTS_OUT are at
        the database the batch stays open, and every request arriving meanwhile joins it. A
        batch is joined only before its statement is sent, so every answer is read after its
        request arrived.

        An id holding a NUL names no store (the service makes the ids), and PostgreSQL cannot
        even be asked about one: a text parameter cannot hold it, the statement fails, and with
        it every read of the batch went to the full path. Such a read is left to the full path
        alone (which says what is wrong with it), before it joins."""
        if any("\x00" in sid for sid in ids):
            return None
        batch = self._batch
        lead = batch is None
        if batch is None:
            batch = self._batch = _Batch()
        batch.ids.update(ids)
        if token_hash is not None:
            batch.tokens.add(token_hash)
        if not lead:
            await batch.done.wait()
            return batch.answer(token_hash, ids)
        try:
            try:
                await anyio.lowlevel.checkpoint()  # let the other requests of this step join
                # a second step to join (acquire() yields once even when a statement may go out
                # at once: measured, without it the batches were half as large and each request
                # cost ~15 % more here); while the statements out are at their limit, more join
                await self._in_flight.acquire()
            finally:
                self._batch = None
            try:
                batch.result = await self._read_batch(sorted(batch.tokens), sorted(batch.ids))
            finally:
                self._in_flight.release()
        except Exception:  # a lost connection: every member answers through the full path
            batch.result = None
        finally:
            batch.done.set()  # also when cancelled: the members never wait for nothing
        return batch.answer(token_hash, ids)

    async def _read_batch(self, tokens: list[str], ids: list[str]):
        if self.inline_read is not None:
            try:
                return self.storage.counters_batch(tokens, ids, read=self.inline_read)
            except WouldBlock:
                pass
        elif self.async_reader is not None and self.async_reader.available():  # PostgreSQL on asyncio
            return await self.async_reader.counters_batch(tokens, ids)
        return await anyio.to_thread.run_sync(functools.partial(self.storage.counters_batch, tokens, ids))

    async def watched_counters(self, store_ids) -> dict[str, int] | None:
        """Counters for the watch hub (admin view), in the batch of this loop step: a write to a
        store watched by hundreds of sandboxes wakes them all at once, and each reads its stores'
        counters before it answers. None: a store is missing (the caller reads alone and answers
        the error)."""
        return await self._batched(None, list(store_ids))

    async def answer(self, scope, receive, send) -> bool:
        """Answer `scope` if it is a counter request this path is sure of; False: not answered."""
        if scope["method"] != "GET":
            return False
        path: str = scope["path"]
        if path == WATCH_PATH:
            return await self._watch(scope, send)
        if path == COUNTERS_PATH:
            ids = _store_ids(scope)
            route = _MANY
        elif (sid := request.store_id(path, _COUNTER_SUFFIX)) is not None:
            ids = [sid]
            route = _ONE
        else:
            return False
        if ids is None:
            return False
        cred = request.memory_credential(scope)
        if cred is None:
            return False
        token_hash = None if is_admin_key(cred, self.admin_key) else hash_token(cred)
        try:
            counters = await self._read(token_hash, ids)
        except Exception:  # StorageError, a lost database connection: the full path says what
            return False
        if counters is None:
            return False
        if self.limit is not None:
            verdict = await self.limit.check(token_hash, scope, receive, send)
            if verdict == "full":
                return False
            scope["route"] = route
            if verdict == "sent":
                return True
        if route is _ONE:
            body = orjson.dumps(wire.counter(ids[0], counters[ids[0]]))
        else:
            body = orjson.dumps({"type": "list", "data": [wire.counter(s, counters[s]) for s in ids]})
        scope["route"] = route
        self.metrics.counter_reads(len(ids))
        await _send_json(send, body)
        return True

    async def _watch(self, scope, send) -> bool:
        """`GET /v1/memory_store_watch` (docs/API.md) held here when sure of it: the credential is
        checked by the first read itself (one statement, batched), not by the full path's session
        lookup (a worker thread and a four-statement transaction per re-armed watch, which queued
        hundreds of them behind each other after every write to an org-wide store). The hub
        registers the watch before that read, as for the full path."""
        if self.watch_hub is None or self.limit is not None:
            # a limited caller is refused before it is held (the full path's order), and only
            # the read that holds it checks its credential here: rate-limited watches take the
            # full path
            return False
        parsed = _watch_params(scope)
        cred = request.memory_credential(scope)
        if parsed is None or cred is None:
            return False
        known, wait_s = parsed
        token_hash = None if is_admin_key(cred, self.admin_key) else hash_token(cred)
        ids = list(known)
        try:
            with self.metrics.watches_held.track_inprogress():
                answer = await self.watch_hub.wait(known, wait_s, lambda: self._read(token_hash, ids))
        except Exception:  # a store deleted while held, a lost connection: the full path says what
            return False
        if answer is None:
            return False
        changed, counters = answer
        body = orjson.dumps({
            "type": "memory_store_watch",
            "status": "changed" if changed else "unchanged",
            "data": [wire.counter(sid, counters[sid]) for sid in ids],
        })  # fmt: skip
        scope["route"] = _WATCH
        self.metrics.counter_reads(len(ids))
        await _send_json(send, body)
        return True


async def _send_json(send, body: bytes) -> None:
    await send({
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})
