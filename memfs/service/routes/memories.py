"""The memory routes: create, list, get, update, delete, and the batch write (an extension)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from memfs.protocol import (
    COUNTER_HEADER,
    WRITE_REASON_HEADER,
)
from memfs.service import batch, params, wire
from memfs.service.auth import (
    Principal,
    unauthenticated,
)
from memfs.service.errors import ApiError, invalid
from memfs.service.hosted import unavailable
from memfs.service.responses import json_response as _json
from memfs.service.routes.core import RouteContext
from memfs.service.storage import Actor


class MemoryRoutes:
    def __init__(self, ctx: RouteContext):
        self.ctx = ctx

    async def create_memory(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        p = await self.ctx.principal(request)
        p.require_store(sid, write=True)
        full = params.q_view(request, "basic")
        body = await params.json_object(request, ("path", "content"))
        for field in ("path", "content"):
            if field not in body:
                raise invalid(f"{field}: is required")
        path = params.memory_path(body["path"])
        content = params.memory_content(body["content"])
        fault = self._fault(request)
        mem = await self.ctx.call(
            self.ctx.storage.create_memory,
            sid,
            path,
            content,
            p.actor,
            max_memories=self.ctx.max_memories,
            backdate_s=self.ctx.hosted.backdate(request),
        )
        self.ctx.metrics.write_reason(sid, request.headers.get(WRITE_REASON_HEADER))  # (landed)
        _saved(fault)
        return _json(wire.memory(mem, full))

    def _fault(self, request: Request) -> str | None:
        """The emulator's test 503 for this write (hosted.py `fault`): `storage_not_ready` is
        answered here, before anything is done; `change_outcome_unknown` after the write (`_saved`)."""
        fault = self.ctx.hosted.fault(request)
        if fault == "storage_not_ready":
            raise unavailable(fault)
        return fault

    async def list_memories(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        token = self.ctx.session_token(request)
        if token is None:  # the admin key, or an error to answer (neither needs the database)
            (await self.ctx.principal(request)).require_store(sid)
        try:
            full, depth, prefix, limit, listing = params.q_memory_listing(request, sid)
            after = self.ctx.after(request, listing)
        except ApiError:
            if token is not None:  # a bad credential is answered before a bad parameter
                (await self.ctx.principal(request)).require_store(sid)
            raise
        if token is None:
            page = await self.ctx.call(
                self.ctx.storage.list_memories,
                sid,
                path_prefix=prefix,
                depth=depth,
                limit=limit,
                after=after,
                with_content=full,
            )
        else:
            # A session token: its session looked up and the page read in one worker-thread hop
            # (one read transaction), where `principal` and the page took a hop each: a hosted
            # tick is hundreds of pages (PERFORMANCE.md, network section).
            session, found = await self.ctx.call(
                self.ctx.storage.list_memories_as,
                token,
                sid,
                path_prefix=prefix,
                depth=depth,
                limit=limit,
                after=after,
                with_content=full,
            )
            if session is None:
                raise unauthenticated("invalid API key or session token")
            Principal(Actor("session_actor", session.id), session).require_store(sid)
            assert found is not None  # the store is attached: it was read
            page = found
        next_page = self.ctx.cursors.encode(listing, page.next_after)
        return _json(
            {"data": [wire.list_item(i, full) for i in page.items], "next_page": next_page},
            headers={COUNTER_HEADER: str(page.counter)} if self.ctx.extensions else None,
        )

    async def get_memory(self, request: Request) -> Response:
        sid, mid = request.path_params["store_id"], request.path_params["memory_id"]
        (await self.ctx.principal(request)).require_store(sid)
        full = params.q_view(request, "full")
        return _json(wire.memory(await self.ctx.call(self.ctx.storage.get_memory, sid, mid), full))

    async def update_memory(self, request: Request) -> Response:
        sid, mid = request.path_params["store_id"], request.path_params["memory_id"]
        p = await self.ctx.principal(request)
        p.require_store(sid, write=True)
        full = params.q_view(request, "basic")
        body = await params.json_object(request, ("content", "path", "precondition"))
        # null is treated like an omitted field (the client types make both Optional).
        content = None if body.get("content") is None else params.memory_content(body["content"])
        path = None if body.get("path") is None else params.memory_path(body["path"])
        if content is None and path is None:
            raise invalid("an update needs content or path (or both); this one names neither")
        expected = params.precondition(body.get("precondition"))
        fault = self._fault(request)
        mem = await self.ctx.call(
            self.ctx.storage.update_memory,
            sid,
            mid,
            content=content,
            path=path,
            expected_sha256=expected,
            actor=p.actor,
            backdate_s=self.ctx.hosted.backdate(request),
            repeat_ok=not self.ctx.hosted.repeat_conflicts,
        )
        self.ctx.metrics.write_reason(sid, request.headers.get(WRITE_REASON_HEADER))  # (landed)
        _saved(fault)
        return _json(wire.memory(mem, full))

    async def delete_memory(self, request: Request) -> Response:
        sid, mid = request.path_params["store_id"], request.path_params["memory_id"]
        p = await self.ctx.principal(request)
        p.require_store(sid, write=True)
        raw = request.query_params.get("expected_content_sha256")
        expected = None if raw is None else params.sha256(raw, "expected_content_sha256")
        fault = self._fault(request)
        await self.ctx.call(
            self.ctx.storage.delete_memory,
            sid,
            mid,
            expected_sha256=expected,
            actor=p.actor,
            backdate_s=self.ctx.hosted.backdate(request),
        )
        _saved(fault)
        return _json({"id": mid, "type": "memory_deleted"})

    async def write_batch(self, request: Request) -> Response:
        """Many writes to one store in one transaction, each item its own answer (batch.py)."""
        sid = request.path_params["store_id"]
        p = await self.ctx.principal(request)
        p.require_store(sid, write=True)
        full = params.q_view(request, "basic")
        ops = batch.operations(await params.json_object(request, ("operations",)))
        answers: list[dict | None] = [None] * len(ops)
        items, sent = [], []  # the items that passed the field rules, and their positions
        for i, op in enumerate(ops):
            try:
                items.append(batch.item(op))
                sent.append(i)
            except ApiError as e:
                answers[i] = batch.error(e)
        counter = None
        if items:
            res = await self.ctx.call(
                self.ctx.storage.write_batch, sid, items, p.actor, max_memories=self.ctx.max_memories
            )
            for i, outcome in zip(sent, res.outcomes, strict=True):
                answers[i] = batch.result(ops[i], outcome, full)
            counter = res.counter
        else:  # nothing to write: the store must still exist (and say its counter)
            counter = (await self.ctx.call(self.ctx.storage.get_counters, [sid]))[sid]
        return _json(
            {"type": "memory_batch", "memory_store_id": sid, "counter": counter, "results": answers},
            headers={COUNTER_HEADER: str(counter)},
        )


def _saved(fault: str | None) -> None:
    """After a write was saved: the emulator's `change_outcome_unknown` (a client must send the same
    request again), if this write carried it."""
    if fault == "change_outcome_unknown":
        raise unavailable(fault)
