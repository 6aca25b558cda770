"""The memory-store routes: create, list, get, update, archive, delete."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from memfs.service import params, wire
from memfs.service.errors import invalid
from memfs.service.responses import json_response as _json
from memfs.service.routes.core import RouteContext


class StoreRoutes:
    def __init__(self, ctx: RouteContext):
        self.ctx = ctx

    async def create_store(self, request: Request) -> Response:
        p = await self.ctx.principal(request)
        p.require_admin("creating a memory store")
        body = await params.json_object(request, ("name", "description", "metadata"))
        if "name" not in body:
            raise invalid("name: is required")
        name = params.store_name(body["name"])
        desc = body.get("description")
        desc = "" if desc is None else params.store_description(desc)
        meta = body.get("metadata")
        meta = {} if meta is None else params.metadata(meta, patch=False)
        return _json(wire.store(await self.ctx.call(self.ctx.storage.create_store, name, desc, meta)))

    async def list_stores(self, request: Request) -> Response:
        p = await self.ctx.principal(request)
        limit = params.q_int(request, "limit", 20, 1, 100)
        include_archived = params.q_bool(request, "include_archived", False)
        gte, lte = params.q_time(request, "created_at[gte]"), params.q_time(request, "created_at[lte]")
        only_ids = p.store_ids()  # a session lists only its own stores
        listing = ("stores", include_archived, gte, lte, only_ids)
        page = await self.ctx.call(
            self.ctx.storage.list_stores,
            limit=limit,
            after=self.ctx.after(request, listing),
            include_archived=include_archived,
            created_gte=gte,
            created_lte=lte,
            only_ids=only_ids,
        )
        next_page = self.ctx.cursors.encode(listing, page.next_after)
        return _json({"data": [wire.store(s) for s in page.items], "next_page": next_page})

    async def get_store(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        (await self.ctx.principal(request)).require_store(sid)
        return _json(wire.store(await self.ctx.call(self.ctx.storage.get_store, sid)))

    async def update_store(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        p = await self.ctx.principal(request)
        p.require_store(sid)
        p.require_admin("updating a memory store")
        body = await params.json_object(request, ("name", "description", "metadata"))
        name = None if body.get("name") is None else params.store_name(body["name"])
        desc = None if body.get("description") is None else params.store_description(body["description"])
        # A patch may name more than 16 keys (deletions among them): the storage checks the result.
        meta = None if body.get("metadata") is None else params.metadata(body["metadata"], patch=True)
        store = await self.ctx.call(
            self.ctx.storage.update_store, sid, name=name, description=desc, metadata_patch=meta
        )
        return _json(wire.store(store))

    async def archive_store(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        p = await self.ctx.principal(request)
        p.require_store(sid)
        p.require_admin("archiving a memory store")
        return _json(wire.store(await self.ctx.call(self.ctx.storage.archive_store, sid)))

    async def delete_store(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        p = await self.ctx.principal(request)
        p.require_store(sid)
        p.require_admin("deleting a memory store")
        await self.ctx.call(self.ctx.storage.delete_store, sid)
        return _json({"id": sid, "type": "memory_store_deleted"})
