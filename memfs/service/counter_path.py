"""The counter fast path: `GET …/{id}/counter` and `GET /v1/memory_store_counters` without the router.

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
path (app.py), which gives the exact error envelope. So both paths cannot disagree about an error:
only one of them ever produces errors.

Every answer is read from the database (no cached counters): a counter read on one replica right
after a write acknowledged by another shows that write, and counters never go back between replicas.
The outer frame (app.py `_RequestFrame`) still adds the request id, the access-log line and metrics.
"""

from __future__ import annotations

import functools
from urllib.parse import parse_qsl

import anyio.lowlevel
import anyio.to_thread
import orjson

from memfs.service import wire
from memfs.service.auth import BETA_AGENTS, BETA_MEMORY, hash_token, is_admin_key
from memfs.service.backend import WouldBlock

MAX_COUNTER_IDS = 100
_STORES = "/v1/memory_stores/"
_COUNTER_SUFFIX = "/counter"
MANY_ROUTE = "/v1/memory_store_counters"
ONE_ROUTE = "/v1/memory_stores/{store_id}/counter"


class _RouteName:
    """What the metrics read from `scope["route"]`: the route template."""

    __slots__ = ("path",)

    def __init__(self, path: str):
        self.path = path


_MANY = _RouteName(MANY_ROUTE)
_ONE = _RouteName(ONE_ROUTE)


def _store_ids(scope) -> list[str] | None:
    """The `ids` of a counters request, deduplicated in order, as the full path reads them."""
    ids: list[str] = []
    for name, raw in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True):
        if name != "ids":
            continue
        for sid in raw.split(","):
            sid = sid.strip()
            if sid and sid not in ids:
                ids.append(sid)
    return ids if 0 < len(ids) <= MAX_COUNTER_IDS else None


def _credential(scope) -> tuple[str, bool] | None:
    """(credential, beta header right for the memory API) from the raw headers, or None."""
    betas: set[str] = set()
    key = auth = None
    for name, value in scope["headers"]:
        if name == b"anthropic-beta":
            betas.update(v.strip() for v in value.decode("latin-1").split(",") if v.strip())
        elif name == b"x-api-key" and key is None:
            key = value.decode("latin-1")
        elif name == b"authorization" and auth is None:
            auth = value.decode("latin-1")
    beta_ok = (BETA_MEMORY in betas) != (BETA_AGENTS in betas)
    if key:
        return key, beta_ok
    scheme, _, value = (auth or "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip(), beta_ok
    return None


class CounterPath:
    def __init__(self, storage, admin_key: str, metrics):
        self.storage = storage
        self.admin_key = admin_key
        self.metrics = metrics
        inline = getattr(storage, "inline_read", None)
        self.inline_read = inline() if inline is not None else None  # SQLite: read on the loop
        self._batch: list | None = None  # the watch hub's read being gathered: [ids, done, result]
        make_async = getattr(getattr(storage, "backend", None), "async_counter_reader", None)
        self.async_reader = make_async() if make_async is not None else None  # PostgreSQL

    async def aclose(self) -> None:
        if self.async_reader is not None:
            await self.async_reader.aclose()

    async def _read(self, token_hash: str | None, ids: list[str]) -> dict[str, int] | None:
        """The cheapest read the backend and loop allow; every one of them reads the database."""
        if self.inline_read is not None:  # SQLite: on the loop itself, unless it would wait
            try:
                return self.storage.counters_for(token_hash, ids, read=self.inline_read)
            except WouldBlock:
                pass
        elif self.async_reader is not None and self.async_reader.available():  # PostgreSQL on asyncio
            return await self.async_reader.counters_for(token_hash, ids)
        return await anyio.to_thread.run_sync(functools.partial(self.storage.counters_for, token_hash, ids))

    async def watched_counters(self, store_ids) -> dict[str, int] | None:
        """Counters for the watch hub (admin view), reads of one loop step combined into one.

        A write to a store watched by hundreds of sandboxes wakes them all at once, and each must
        read its stores' counters before it answers; one query per waiter queued them behind each
        other (and, on worker threads, writes behind them: loadtest, 500 sandboxes). The first
        waiter of a step yields once, so every waiter woken in the same step joins its batch, then
        reads the union in one statement. None: a store is missing (the caller reads alone and
        answers the error)."""
        batch = self._batch
        if batch is not None:
            batch[0].update(store_ids)
            await batch[1].wait()
            if batch[2] is None:
                return None
            return {sid: batch[2][sid] for sid in store_ids}
        ids: set[str] = set(store_ids)
        done = anyio.Event()
        batch = self._batch = [ids, done, None]
        try:
            await anyio.lowlevel.checkpoint()  # let the other waiters woken in this step join
            self._batch = None
            batch[2] = await self._read(None, sorted(ids))
        except Exception:
            batch[2] = None
        finally:
            self._batch = None
            done.set()
        result = batch[2]
        return None if result is None else {sid: result[sid] for sid in store_ids}

    async def answer(self, scope, send) -> bool:
        """Answer `scope` if it is a counter request this path is sure of; False: not answered."""
        if scope["method"] != "GET":
            return False
        path: str = scope["path"]
        if path == MANY_ROUTE:
            ids = _store_ids(scope)
            route = _MANY
        elif path.startswith(_STORES) and path.endswith(_COUNTER_SUFFIX):
            sid = path[len(_STORES) : -len(_COUNTER_SUFFIX)]
            ids = [sid] if sid and "/" not in sid else None
            route = _ONE
        else:
            return False
        if ids is None:
            return False
        cred = _credential(scope)
        if cred is None or not cred[1]:
            return False
        token_hash = None if is_admin_key(cred[0], self.admin_key) else hash_token(cred[0])
        try:
            counters = await self._read(token_hash, ids)
        except Exception:  # StorageError, a lost database connection: the full path says what
            return False
        if counters is None:
            return False
        if route is _ONE:
            body = orjson.dumps(wire.counter(ids[0], counters[ids[0]]))
        else:
            body = orjson.dumps({"type": "list", "data": [wire.counter(s, counters[s]) for s in ids]})
        scope["route"] = route
        self.metrics.counter_reads(len(ids))
        await send({
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")],
        })  # fmt: skip
        await send({"type": "http.response.body", "body": body})
        return True
