"""The list fast path: `GET /v1/memory_stores/{id}/memories` answered straight from ASGI.

Why: without the counter (docs/SEMANTICS.md#d-no-counter) a hosted tick lists every store, hundreds of pages, and the
service's CPU per page was the tick's bottleneck (docs/PERFORMANCE.md, network section, "fourth
pass"). The full path (routes/memories.py `list_memories`) built a Starlette `Request`, hopped to a
worker thread, ran five statements (BEGIN, the token's session id, its sessions row, its
resources, the page), made a `MemoryRecord` per memory, then a dict per memory, then a
`JSONResponse`. This path parses the raw scope, checks the credential and reads the page in one
read transaction of two statements (`StoreService.read_checked`: `counters_for`'s check of the
store and the session, the rule; then listing.py's `list_page_wire`: the page's rows as plain
tuples turned into the wire dicts), and
writes the orjson bytes to ASGI itself. On SQLite a basic-view page is read on the event loop
(`read_nowait`, a read that never waits: ~0.3 ms, where the hop to a worker thread and back cost
as much again in thread wake-ups and GIL hand-offs); a full-view page (up to 20 memories of up to
100 KiB) and every PostgreSQL page are read in a worker thread, as before.

It answers only successes, like the counter fast path (counter_path.py): a wrong beta header, a
bad parameter or cursor, an unknown credential, a store that is missing or not the session's, any
storage error -> False, and the request goes through the full path, which gives the exact error
envelope (a read: doing it twice changes nothing). So the two paths cannot disagree about an error;
the answers of a success are the same JSON (tests/service/test_list_route.py compares them).
The outer frame (frame.py `RequestFrame`) still adds the request id, the access-log line and metrics.
"""

from __future__ import annotations

import functools

import anyio.to_thread
import orjson

from memfs.protocol import COUNTER_HEADER, memories_path
from memfs.service import params, request
from memfs.service.auth import hash_token, is_admin_key
from memfs.service.backend import WouldBlock
from memfs.service.cursors import CursorError
from memfs.service.errors import ApiError
from memfs.service.listing import list_page_wire
from memfs.service.ratelimit import FastPathLimit
from memfs.service.request import RouteName

_MEMORIES = "/memories"
_COUNTER_HEADER = COUNTER_HEADER.lower().encode("latin-1")
LIST_ROUTE = RouteName(memories_path("{store_id}"))  # as app.py's route table names it


class ListPath:
    def __init__(
        self, storage, admin_key: str, cursors, *, extensions: bool, limit: FastPathLimit | None = None
    ):
        self.storage = storage
        self.limit = limit  # the per-credential rate limit (None: none), taken as the full path takes it
        self.admin_key = admin_key
        self.cursors = cursors
        self.extensions = extensions  # the counter header (not with --hosted-api)
        # StoreService's; a storage without it (a test's stand-in) leaves every page to the full path
        self.read_checked = getattr(storage, "read_checked", None)
        inline = getattr(storage, "inline_read", None)
        self.inline_read = inline() if inline is not None else None  # SQLite: read on the loop
        self.loop_reads = 0  # pages read on the event loop (tests read it)
        self.thread_reads = 0  # pages read in a worker thread

    async def answer(self, scope, receive, send) -> bool:
        """Answer `scope` if it is a list page this path is sure of; False: not answered."""
        if self.read_checked is None or scope["method"] != "GET":
            return False
        store_id = request.store_id(scope["path"], _MEMORIES)
        if store_id is None:
            return False
        cred = request.memory_credential(scope)
        if cred is None:
            return False
        token_hash = None if is_admin_key(cred, self.admin_key) else hash_token(cred)
        try:  # the parameters as the full path reads them (routes/memories.py `list_memories`)
            q = request.Query(scope)
            full, depth, prefix, limit, listing = params.q_memory_listing(q, store_id)  # type: ignore[arg-type]
            after = self.cursors.decode(listing, q.query_params.get("page") or None)
        except (ApiError, CursorError):
            return False
        if after is not None and not isinstance(after, str):  # a memory listing resumes after a path
            return False
        page_of = functools.partial(
            list_page_wire,
            store_id=store_id,
            path_prefix=prefix,
            depth=depth,
            limit=limit,
            after=after,
            with_content=full,
        )
        read = functools.partial(self.read_checked, token_hash, store_id, page_of)
        try:
            page = await self._read(read, loop_ok=not full)
        except Exception:  # StorageError, a lost database connection: the full path says what
            return False
        if page is None:
            return False
        if self.limit is not None:
            verdict = await self.limit.check(token_hash, scope, receive, send)
            if verdict == "full":
                return False
            scope["route"] = LIST_ROUTE
            if verdict == "sent":
                return True
        (items, next_after), counter = page
        body = orjson.dumps({"data": items, "next_page": self.cursors.encode(listing, next_after)})
        headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
        if self.extensions:
            headers.append((_COUNTER_HEADER, str(counter).encode()))
        scope["route"] = LIST_ROUTE
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return True

    async def _read(self, read, *, loop_ok: bool):
        if loop_ok and self.inline_read is not None:  # SQLite: on the loop itself, unless it would wait
            try:
                page = read(read=self.inline_read)
            except WouldBlock:
                pass
            else:
                self.loop_reads += 1
                return page
        self.thread_reads += 1
        return await anyio.to_thread.run_sync(read)
