"""The memory-version routes: list, get, redact."""

from __future__ import annotations

import dataclasses

from starlette.requests import Request
from starlette.responses import Response

from memfs.service import params, wire
from memfs.service.errors import invalid
from memfs.service.responses import json_response as _json
from memfs.service.routes.core import RouteContext
from memfs.service.storage import VersionFilter


class VersionRoutes:
    def __init__(self, ctx: RouteContext):
        self.ctx = ctx

    async def list_versions(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        p = await self.ctx.principal(request)
        p.require_store(sid)
        self.ctx.hosted.check_versions(p)
        full = params.q_view(request, "basic")
        filters = VersionFilter(
            memory_id=params.q_str(request, "memory_id"),
            session_id=params.q_str(request, "session_id"),
            api_key_id=params.q_str(request, "api_key_id"),
            operation=params.q_choice(request, "operation", ("created", "modified", "deleted"), None),
            created_gte=params.q_time(request, "created_at[gte]"),
            created_lte=params.q_time(request, "created_at[lte]"),
        )
        limit = params.q_limit(request, full)
        if request.query_params.get("service_account_id") is not None:
            # This service has no service accounts: nothing was written by one.
            return _json({"data": [], "next_page": None})
        listing = ("versions", sid, dataclasses.astuple(filters), full)
        after = self.ctx.after(request, listing)
        if after is not None and not isinstance(after, str):  # a cursor of the seq-ordered listing
            raise invalid("page: this cursor is from an older version of this service; list again")
        page = await self.ctx.call(
            self.ctx.storage.list_versions,
            sid,
            filters=filters,
            limit=limit,
            after=after,
            with_content=full,
        )
        next_page = self.ctx.cursors.encode(listing, page.next_after)
        return _json({"data": [wire.version(v, full) for v in page.items], "next_page": next_page})

    async def get_version(self, request: Request) -> Response:
        sid, vid = request.path_params["store_id"], request.path_params["version_id"]
        p = await self.ctx.principal(request)
        p.require_store(sid)
        self.ctx.hosted.check_versions(p)
        full = params.q_view(request, "full")
        return _json(wire.version(await self.ctx.call(self.ctx.storage.get_version, sid, vid), full))

    async def redact_version(self, request: Request) -> Response:
        sid, vid = request.path_params["store_id"], request.path_params["version_id"]
        p = await self.ctx.principal(request)
        p.require_store(sid)
        p.require_admin("redacting a memory version")
        return _json(
            wire.version(await self.ctx.call(self.ctx.storage.redact_version, sid, vid, p.actor), True)
        )
