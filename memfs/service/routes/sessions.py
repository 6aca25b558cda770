"""The session routes (the agents API's sessions with memory-store resources): create, get, archive,
and the list of the sessions that attach a store (what a relay confirms its tokens' access with)."""

from __future__ import annotations

import base64
import json
import secrets

from starlette.requests import Request
from starlette.responses import Response

from memfs.limits import MAX_STORES_PER_SESSION
from memfs.protocol import (
    is_access,
)
from memfs.service import params, wire
from memfs.service.auth import (
    Principal,
    hash_token,
)
from memfs.service.errors import invalid, not_found
from memfs.service.responses import json_response as _json
from memfs.service.routes.core import RouteContext
from memfs.service.storage import ResourceSpec


class SessionRoutes:
    def __init__(self, ctx: RouteContext):
        self.ctx = ctx

    async def create_session(self, request: Request) -> Response:
        p = await self.ctx.principal(request, sessions_api=True)
        p.require_admin("creating a session")
        body = await params.json_object(request, ("resources", "title", "metadata"))
        resources = body.get("resources", [])
        if not isinstance(resources, list):
            raise invalid("resources: must be an array")
        specs: list[ResourceSpec] = []
        for i, res in enumerate(resources):
            specs.append(self._resource_spec(i, res))
        stores = [s.memory_store_id for s in specs]
        if len(stores) > MAX_STORES_PER_SESSION:
            raise invalid(
                f"resources: at most {MAX_STORES_PER_SESSION} memory stores per session (got {len(stores)})"
            )
        if len(set(stores)) != len(stores):
            raise invalid("resources: the same memory store is attached more than once")
        title = None if body.get("title") is None else params.text(body["title"], "title", max_chars=512)
        meta = {} if body.get("metadata") is None else params.metadata(body["metadata"], patch=False)
        token = "memfs_sess_" + secrets.token_urlsafe(32)
        session = await self.ctx.call(
            self.ctx.storage.create_session, specs, token_hash=hash_token(token), title=title, metadata=meta
        )
        secret = base64.urlsafe_b64encode(json.dumps({"sessions_token": token}).encode()).decode()
        return _json({**wire.session(session), "work_secret": secret})

    @staticmethod
    def _resource_spec(i: int, res: object) -> ResourceSpec:
        where = f"resources[{i}]"
        if not isinstance(res, dict):
            raise invalid(f"{where}: must be an object")
        unknown = sorted(set(res) - {"type", "memory_store_id", "access", "instructions"})
        if unknown:
            raise invalid(f"{where}: unknown field {unknown[0]!r}")
        if res.get("type") != "memory_store":
            raise invalid(f"{where}.type: only 'memory_store' resources are supported")
        store_id = params.text(
            res.get("memory_store_id"), f"{where}.memory_store_id", min_chars=1, max_chars=128
        )
        access = res.get("access") or "read_write"
        if not is_access(access):
            raise invalid(f"{where}.access: must be read_write or read_only")
        instr = res.get("instructions")
        if instr is not None:
            instr = params.text(instr, f"{where}.instructions", max_chars=4096)
        return ResourceSpec(store_id, access, instr)

    def _own_session(self, p: Principal, session_id: str) -> None:
        if p.session is not None and p.session.id != session_id:  # a session sees only its own
            raise not_found(f"session {session_id} not found")

    async def get_session(self, request: Request) -> Response:
        sid = request.path_params["session_id"]
        self._own_session(await self.ctx.principal(request, sessions_api=True), sid)
        return _json(wire.session(await self.ctx.call(self.ctx.storage.get_session, sid)))

    async def archive_session(self, request: Request) -> Response:
        sid = request.path_params["session_id"]
        self._own_session(await self.ctx.principal(request, sessions_api=True), sid)
        return _json(wire.session(await self.ctx.call(self.ctx.storage.archive_session, sid)))

    async def list_sessions(self, request: Request) -> Response:
        """`GET /v1/sessions?memory_store_id=ID`: the sessions attaching a store, newest first
        (archived ones only with include_archived). The hosted API lists every session too, with
        more filters; memfs serve lists them by store only (docs/API.md)."""
        p = await self.ctx.principal(request, sessions_api=True)
        p.require_admin("listing sessions")
        store_id = params.q_str(request, "memory_store_id")
        if not store_id:
            raise invalid("memory_store_id: memfs serve lists the sessions of one memory store at a time")
        limit = params.q_int(request, "limit", 20, 1, 100)
        include_archived = params.q_bool(request, "include_archived", False)
        listing = ("sessions", store_id, include_archived)
        start = self.ctx.after(request, listing)
        offset = start if isinstance(start, int) else 0
        sessions = await self.ctx.call(self.ctx.storage.sessions_for_store, store_id)
        if not include_archived:
            sessions = [s for s in sessions if s.archived_at is None]
        page = sessions[offset : offset + limit]
        more = offset + limit < len(sessions)
        next_page = self.ctx.cursors.encode(listing, offset + limit) if more else None
        return _json({"data": [wire.session(x) for x in page], "next_page": next_page, "prev_page": None})
