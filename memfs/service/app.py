"""The store service as an ASGI app: routes, auth, beta header, error envelope, size limit, metrics.

`create_app(storage, admin_key, …)` returns the app. Storage calls are blocking and run in worker
threads; the event loop only parses, checks and serialises.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import json
import logging
import secrets
import time

import anyio
import anyio.to_thread
import orjson
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from memfs.limits import DEFAULT_MAX_MEMORIES, MAX_STORES_PER_SESSION
from memfs.protocol import (
    COUNTER_HEADER,
    COUNTERS_PATH,
    REQUEST_ID_HEADER,
    SESSIONS_PATH,
    STORES_PATH,
    WATCH_PATH,
    is_access,
)
from memfs.service import batch, body, params, wire
from memfs.service.access_log import RequestLine
from memfs.service.auth import (
    Principal,
    admin_key_id,
    check_memory_beta,
    check_sessions_beta,
    hash_token,
    is_admin_key,
    presented_credential,
    unauthenticated,
)
from memfs.service.counter_path import CounterPath
from memfs.service.cursors import CursorError, Cursors
from memfs.service.errors import ApiError, from_storage, invalid, not_found
from memfs.service.hosted import HostedOptions
from memfs.service.list_path import ListPath
from memfs.service.metrics import CONTENT_TYPE, Metrics
from memfs.service.orglimit import OrgLimits
from memfs.service.ratelimit import FastPathLimit, RateLimiter, caller_refusal
from memfs.service.request import (
    DEFAULT_WATCH_WAIT_S,
    MAX_COUNTER_IDS,
    MAX_WATCH_WAIT_S,
    counter_ids,
    next_request_id,
)
from memfs.service.responses import error_response as _error_response
from memfs.service.responses import json_response as _json
from memfs.service.storage import Actor, ResourceSpec, Storage, StorageError, VersionFilter
from memfs.service.watch import WatchHub

log = logging.getLogger("memfs.service")
access_line = RequestLine("memfs.service.access")  # a logger.info("%s %s %d %.1fms", …), cheaper

READY_TIMEOUT_S = 2.0
_SNAPSHOT_BATCH = 100


class _Service:
    extensions = True  # the memfs extensions (counter, changes feed, snapshot, counter header, batch)
    hosted = HostedOptions()  # the emulator's switches (hosted.py)

    def __init__(
        self,
        storage: Storage,
        admin_key: str,
        max_memories: int,
        metrics: Metrics,
        watch_hub: WatchHub,
        rate_limiter: RateLimiter | None = None,
    ):
        if not admin_key:
            raise ValueError("admin_key must not be empty")
        self.storage = storage
        self.watch_hub = watch_hub
        self.max_memories = max_memories
        self.metrics = metrics
        self.rate_limiter = rate_limiter
        self._admin_key = admin_key
        self._admin_actor = Actor("api_actor", admin_key_id(admin_key))
        self.cursors = Cursors(admin_key)

    def after(self, request: Request, listing: tuple) -> str | int | None:
        """The position the `page` cursor resumes after, checked against this listing."""
        try:
            return self.cursors.decode(listing, request.query_params.get("page") or None)
        except CursorError as e:
            raise invalid(str(e)) from None

    async def call(self, fn, *args, **kwargs):
        try:
            return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
        except StorageError as e:
            raise from_storage(e) from None

    async def principal(self, request: Request, *, sessions_api: bool = False) -> Principal:
        if sessions_api:
            check_sessions_beta(request)
        else:
            check_memory_beta(request)
        cred = presented_credential(request)
        if cred is None:
            raise unauthenticated("no credentials: send x-api-key: KEY or Authorization: Bearer KEY")
        if is_admin_key(cred, self._admin_key):
            self._limit(None)
            return Principal(self._admin_actor)
        session = await self.call(self.storage.session_for_token, hash_token(cred))
        if session is None:
            raise unauthenticated("invalid API key or session token")
        self._limit(session.id)
        return Principal(Actor("session_actor", session.id), session)

    def _session_token(self, request: Request) -> str | None:
        """The hash of the request's credential when it is a session token that the list route may
        check in the same hop as its page: right beta header, not the admin key, no rate limiter
        (a limited caller is checked, and refused, before anything is read). None: use `principal`."""
        if self.rate_limiter is not None:
            return None
        try:
            check_memory_beta(request)
        except ApiError:
            return None
        cred = presented_credential(request)
        if cred is None or is_admin_key(cred, self._admin_key):
            return None
        return hash_token(cred)

    def _limit(self, session_id: str | None) -> None:
        """Per-credential rate limit, after authentication: only a known caller has a bucket (a
        bad credential is a 401, whatever its rate). Health and metrics never come here."""
        if self.rate_limiter is None:
            return
        err = caller_refusal(self.rate_limiter, self.metrics, session_id)
        if err is not None:
            raise err

    # --- memory stores -------------------------------------------------------------------------

    async def create_store(self, request: Request) -> Response:
        p = await self.principal(request)
        p.require_admin("creating a memory store")
        body = await params.json_object(request, ("name", "description", "metadata"))
        if "name" not in body:
            raise invalid("name: is required")
        name = params.store_name(body["name"])
        desc = body.get("description")
        desc = "" if desc is None else params.store_description(desc)
        meta = body.get("metadata")
        meta = {} if meta is None else params.metadata(meta, patch=False)
        return _json(wire.store(await self.call(self.storage.create_store, name, desc, meta)))

    async def list_stores(self, request: Request) -> Response:
        p = await self.principal(request)
        limit = params.q_int(request, "limit", 20, 1, 100)
        include_archived = params.q_bool(request, "include_archived", False)
        gte, lte = params.q_time(request, "created_at[gte]"), params.q_time(request, "created_at[lte]")
        only_ids = p.store_ids()  # a session lists only its own stores
        listing = ("stores", include_archived, gte, lte, only_ids)
        page = await self.call(
            self.storage.list_stores,
            limit=limit,
            after=self.after(request, listing),
            include_archived=include_archived,
            created_gte=gte,
            created_lte=lte,
            only_ids=only_ids,
        )
        next_page = self.cursors.encode(listing, page.next_after)
        return _json({"data": [wire.store(s) for s in page.items], "next_page": next_page})

    async def get_store(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        (await self.principal(request)).require_store(sid)
        return _json(wire.store(await self.call(self.storage.get_store, sid)))

    async def update_store(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        p = await self.principal(request)
        p.require_store(sid)
        p.require_admin("updating a memory store")
        body = await params.json_object(request, ("name", "description", "metadata"))
        name = None if body.get("name") is None else params.store_name(body["name"])
        desc = None if body.get("description") is None else params.store_description(body["description"])
        # A patch may name more than 16 keys (deletions among them): the storage checks the result.
        meta = None if body.get("metadata") is None else params.metadata(body["metadata"], patch=True)
        store = await self.call(
            self.storage.update_store, sid, name=name, description=desc, metadata_patch=meta
        )
        return _json(wire.store(store))

    async def archive_store(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        p = await self.principal(request)
        p.require_store(sid)
        p.require_admin("archiving a memory store")
        return _json(wire.store(await self.call(self.storage.archive_store, sid)))

    async def delete_store(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        p = await self.principal(request)
        p.require_store(sid)
        p.require_admin("deleting a memory store")
        await self.call(self.storage.delete_store, sid)
        return _json({"id": sid, "type": "memory_store_deleted"})

    # --- memories ------------------------------------------------------------------------------

    async def create_memory(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        p = await self.principal(request)
        p.require_store(sid, write=True)
        full = params.q_view(request, "basic")
        body = await params.json_object(request, ("path", "content"))
        for field in ("path", "content"):
            if field not in body:
                raise invalid(f"{field}: is required")
        path = params.memory_path(body["path"])
        content = params.memory_content(body["content"])
        mem = await self.call(
            self.storage.create_memory,
            sid,
            path,
            content,
            p.actor,
            max_memories=self.max_memories,
            backdate_s=self.hosted.backdate(request),
        )
        return _json(wire.memory(mem, full))

    async def list_memories(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        token = self._session_token(request)
        if token is None:  # the admin key, or an error to answer (neither needs the database)
            (await self.principal(request)).require_store(sid)
        try:
            full, depth, prefix, limit, listing = params.q_memory_listing(request, sid)
            after = self.after(request, listing)
        except ApiError:
            if token is not None:  # a bad credential is answered before a bad parameter
                (await self.principal(request)).require_store(sid)
            raise
        if token is None:
            page = await self.call(
                self.storage.list_memories,
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
            session, found = await self.call(
                self.storage.list_memories_as,
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
        next_page = self.cursors.encode(listing, page.next_after)
        return _json(
            {"data": [wire.list_item(i, full) for i in page.items], "next_page": next_page},
            headers={COUNTER_HEADER: str(page.counter)} if self.extensions else None,
        )

    async def get_memory(self, request: Request) -> Response:
        sid, mid = request.path_params["store_id"], request.path_params["memory_id"]
        (await self.principal(request)).require_store(sid)
        full = params.q_view(request, "full")
        return _json(wire.memory(await self.call(self.storage.get_memory, sid, mid), full))

    async def update_memory(self, request: Request) -> Response:
        sid, mid = request.path_params["store_id"], request.path_params["memory_id"]
        p = await self.principal(request)
        p.require_store(sid, write=True)
        full = params.q_view(request, "basic")
        body = await params.json_object(request, ("content", "path", "precondition"))
        # null is treated like an omitted field (the client types make both Optional).
        content = None if body.get("content") is None else params.memory_content(body["content"])
        path = None if body.get("path") is None else params.memory_path(body["path"])
        if content is None and path is None:
            raise invalid("an update needs content or path (or both); this one names neither")
        expected = params.precondition(body.get("precondition"))
        mem = await self.call(
            self.storage.update_memory,
            sid,
            mid,
            content=content,
            path=path,
            expected_sha256=expected,
            actor=p.actor,
            backdate_s=self.hosted.backdate(request),
        )
        return _json(wire.memory(mem, full))

    async def delete_memory(self, request: Request) -> Response:
        sid, mid = request.path_params["store_id"], request.path_params["memory_id"]
        p = await self.principal(request)
        p.require_store(sid, write=True)
        raw = request.query_params.get("expected_content_sha256")
        expected = None if raw is None else params.sha256(raw, "expected_content_sha256")
        await self.call(
            self.storage.delete_memory,
            sid,
            mid,
            expected_sha256=expected,
            actor=p.actor,
            backdate_s=self.hosted.backdate(request),
        )
        return _json({"id": mid, "type": "memory_deleted"})

    async def write_batch(self, request: Request) -> Response:
        """Many writes to one store in one transaction, each item its own answer (batch.py)."""
        sid = request.path_params["store_id"]
        p = await self.principal(request)
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
            res = await self.call(
                self.storage.write_batch, sid, items, p.actor, max_memories=self.max_memories
            )
            for i, outcome in zip(sent, res.outcomes, strict=True):
                answers[i] = batch.result(ops[i], outcome, full)
            counter = res.counter
        else:  # nothing to write: the store must still exist (and say its counter)
            counter = (await self.call(self.storage.get_counters, [sid]))[sid]
        return _json(
            {"type": "memory_batch", "memory_store_id": sid, "counter": counter, "results": answers},
            headers={COUNTER_HEADER: str(counter)},
        )

    # --- versions ------------------------------------------------------------------------------

    async def list_versions(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        p = await self.principal(request)
        p.require_store(sid)
        self.hosted.check_versions(p)
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
        after = self.after(request, listing)
        if after is not None and not isinstance(after, str):  # a cursor of the seq-ordered listing
            raise invalid("page: this cursor is from an older version of this service; list again")
        page = await self.call(
            self.storage.list_versions,
            sid,
            filters=filters,
            limit=limit,
            after=after,
            with_content=full,
        )
        next_page = self.cursors.encode(listing, page.next_after)
        return _json({"data": [wire.version(v, full) for v in page.items], "next_page": next_page})

    async def get_version(self, request: Request) -> Response:
        sid, vid = request.path_params["store_id"], request.path_params["version_id"]
        p = await self.principal(request)
        p.require_store(sid)
        self.hosted.check_versions(p)
        full = params.q_view(request, "full")
        return _json(wire.version(await self.call(self.storage.get_version, sid, vid), full))

    async def redact_version(self, request: Request) -> Response:
        sid, vid = request.path_params["store_id"], request.path_params["version_id"]
        p = await self.principal(request)
        p.require_store(sid)
        p.require_admin("redacting a memory version")
        return _json(wire.version(await self.call(self.storage.redact_version, sid, vid, p.actor), True))

    # --- counter extension ---------------------------------------------------------------------

    async def get_counter(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        (await self.principal(request)).require_store(sid)
        counters = await self.call(self.storage.get_counters, [sid])
        self.metrics.counter_reads(1)
        return _json(wire.counter(sid, counters[sid]))

    async def get_counters(self, request: Request) -> Response:
        p = await self.principal(request)
        ids = counter_ids(request.query_params.getlist("ids"))
        if not ids:
            raise invalid("ids: give one or more memory store ids, comma-separated")
        if len(ids) > MAX_COUNTER_IDS:
            raise invalid(f"ids: at most {MAX_COUNTER_IDS} memory store ids per request (got {len(ids)})")
        for sid in ids:
            p.require_store(sid)
        counters = await self.call(self.storage.get_counters, ids)
        self.metrics.counter_reads(len(ids))
        return _json({"type": "list", "data": [wire.counter(sid, counters[sid]) for sid in ids]})

    async def watch(self, request: Request) -> Response:
        """Held until a store's counter differs from the known one, or `wait` passes (docs/SEMANTICS.md#d-counter)."""
        p = await self.principal(request)
        known: dict[str, int] = {}
        for raw in request.query_params.getlist("known"):
            for item in raw.split(","):
                item = item.strip()
                if not item:
                    continue
                sid, sep, value = item.rpartition(":")
                if not sep or not sid or not value.isdigit() or len(value) > 18:
                    raise invalid(f"known: expected STORE_ID:COUNTER items, comma-separated (got {item!r})")
                if sid in known:
                    raise invalid(f"known: memory store {sid} is named twice")
                known[sid] = int(value)
        if not known:
            raise invalid("known: give one or more STORE_ID:COUNTER items, comma-separated")
        if len(known) > MAX_COUNTER_IDS:
            raise invalid(f"known: at most {MAX_COUNTER_IDS} memory stores per request (got {len(known)})")
        raw_wait = request.query_params.get("wait", str(DEFAULT_WATCH_WAIT_S))
        try:
            wait_s = float(raw_wait)
        except ValueError:
            wait_s = -1.0
        if not 0 <= wait_s <= MAX_WATCH_WAIT_S:  # also refuses nan
            raise invalid(f"wait: seconds between 0 and {MAX_WATCH_WAIT_S:g} (got {raw_wait!r})")
        for sid in known:
            p.require_store(sid)
        try:
            with self.metrics.watches_held.track_inprogress():
                answer = await self.watch_hub.wait(known, wait_s)
            assert answer is not None  # None only with a first_read
            changed, counters = answer
        except StorageError as e:
            raise from_storage(e) from None
        self.metrics.counter_reads(len(known))
        return _json({
            "type": "memory_store_watch",
            "status": "changed" if changed else "unchanged",
            "data": [wire.counter(sid, counters[sid]) for sid in known],
        })  # fmt: skip

    async def get_changes(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        (await self.principal(request)).require_store(sid)
        if request.query_params.get("since") is None:
            raise invalid("since: is required (a counter value this client has applied)")
        since = params.q_int(request, "since", None, 0, None)
        ch = await self.call(self.storage.changes_since, sid, since)
        self.metrics.counter_reads(1)
        return _json(
            {
                "type": "memory_store_changes",
                "memory_store_id": sid,
                "since": ch.since,
                "counter": ch.counter,
                "status": "too_old" if ch.too_old else "ok",
                "changes": [wire.change(c) for c in ch.changes],
            },
            headers={COUNTER_HEADER: str(ch.counter)},
        )

    async def get_snapshot(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        (await self.principal(request)).require_store(sid)
        reader = await self.call(self.storage.open_snapshot, sid)
        self.metrics.counter_reads(1)

        def line(obj: object) -> bytes:
            # orjson: encoding 32 MiB of memories with the json module takes ~0.3 s, orjson ~0.04 s
            return orjson.dumps(obj) + b"\n"

        async def body():
            # Every batch comes from the reader's one read transaction: the stream is the store at
            # `reader.counter`, whatever writers do meanwhile.
            try:
                yield line(
                    {"type": "memory_store_snapshot", "memory_store_id": sid, "counter": reader.counter}
                )
                count = 0
                while batch := await anyio.to_thread.run_sync(reader.read, _SNAPSHOT_BATCH):
                    count += len(batch)
                    yield b"".join(line(wire.memory(m, True)) for m in batch)
                yield line({"type": "snapshot_end", "count": count})
            finally:
                reader.close()

        return StreamingResponse(
            body(),
            media_type="application/x-ndjson",
            headers={COUNTER_HEADER: str(reader.counter)},
            background=BackgroundTask(reader.close),  # also closes it when the body never started
        )

    # --- sessions ------------------------------------------------------------------------------

    async def create_session(self, request: Request) -> Response:
        p = await self.principal(request, sessions_api=True)
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
        session = await self.call(
            self.storage.create_session, specs, token_hash=hash_token(token), title=title, metadata=meta
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
        self._own_session(await self.principal(request, sessions_api=True), sid)
        return _json(wire.session(await self.call(self.storage.get_session, sid)))

    async def archive_session(self, request: Request) -> Response:
        sid = request.path_params["session_id"]
        self._own_session(await self.principal(request, sessions_api=True), sid)
        return _json(wire.session(await self.call(self.storage.archive_session, sid)))

    # --- operations: metrics and health --------------------------------------------------------

    async def get_metrics(self, request: Request) -> Response:
        return Response(self.metrics.render(), headers={"content-type": CONTENT_TYPE})

    async def get_live(self, request: Request) -> Response:
        # Liveness: the process answers HTTP. Never touches the database, so an orchestrator does
        # not restart every replica when the database has a bad minute.
        return _json({"status": "ok"})

    async def get_ready(self, request: Request) -> Response:
        # Readiness: this app exists only after the storage opened and migrated (server.py opens
        # it first), and the database must answer one round trip now, within a bound.
        try:
            with anyio.fail_after(READY_TIMEOUT_S):
                await anyio.to_thread.run_sync(self.storage.ping, abandon_on_cancel=True)
        except TimeoutError:
            return _json({"status": "unavailable", "reason": "the database did not answer in time"}, 503)
        except Exception as e:  # any database error: not ready, said without details
            log.warning("readiness check failed: %s", type(e).__name__)
            return _json({"status": "unavailable", "reason": "the database is not reachable"}, 503)
        return _json({"status": "ready"})

    def routes(self) -> list[BaseRoute]:
        s = STORES_PATH + "/{store_id}"
        m = s + "/memories/{memory_id}"
        v = s + "/memory_versions/{version_id}"
        table = [
            (STORES_PATH, "POST", self.create_store),
            (STORES_PATH, "GET", self.list_stores),
            (COUNTERS_PATH, "GET", self.get_counters),
            (WATCH_PATH, "GET", self.watch),
            (s, "GET", self.get_store),
            (s, "POST", self.update_store),
            (s, "DELETE", self.delete_store),
            (s + "/archive", "POST", self.archive_store),
            (s + "/counter", "GET", self.get_counter),
            (s + "/changes", "GET", self.get_changes),
            (s + "/snapshot", "GET", self.get_snapshot),
            (s + "/memories", "POST", self.create_memory),
            (s + "/memories", "GET", self.list_memories),
            (s + "/memory_batch", "POST", self.write_batch),
            (m, "GET", self.get_memory),
            (m, "POST", self.update_memory),
            (m, "DELETE", self.delete_memory),
            (s + "/memory_versions", "GET", self.list_versions),
            (v, "GET", self.get_version),
            (v + "/redact", "POST", self.redact_version),
            (SESSIONS_PATH, "POST", self.create_session),
            (SESSIONS_PATH + "/{session_id}", "GET", self.get_session),
            (SESSIONS_PATH + "/{session_id}/archive", "POST", self.archive_session),
            ("/metrics", "GET", self.get_metrics),
            ("/healthz", "GET", self.get_live),
            ("/readyz", "GET", self.get_ready),
        ]
        if (
            not self.extensions
        ):  # behave like the hosted API: no counter, feed or snapshot (SEMANTICS.md#d-no-counter)
            table = [
                t
                for t in table
                if t[2]
                not in (
                    self.get_counter,
                    self.get_counters,
                    self.get_changes,
                    self.get_snapshot,
                    self.watch,
                    self.write_batch,
                )
            ]
        return [Route(path, fn, methods=[method]) for path, method, fn in table]


def _request_id(request: Request) -> str:
    return request.scope.get("state", {}).get("request_id", "")


async def _on_api_error(request: Request, exc: Exception) -> Response:
    err = exc if isinstance(exc, ApiError) else from_storage(exc)  # type: ignore[arg-type]
    return _error_response(err, _request_id(request))


async def _on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        err = not_found(f"no such endpoint: {request.method} {request.url.path}")
    elif exc.status_code == 405:
        err = ApiError(
            405, "invalid_request_error", f"method {request.method} is not allowed on {request.url.path}"
        )
    else:
        err = ApiError(exc.status_code, "invalid_request_error", str(exc.detail))
    return _error_response(err, _request_id(request))


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    return _error_response(ApiError(500, "api_error", "internal server error"), _request_id(request))


class _RequestFrame:
    """Outermost layer: request id on every response, one access-log line, metrics, last-resort 500.

    It also reads every request's body whole before the routes run (see `body.py`): a handler
    can never leave a body unread on a keep-alive connection, and bodies over 1 MiB are 413
    everywhere.
    """

    def __init__(
        self,
        app,
        metrics: Metrics,
        watch_hub: WatchHub,
        counter_path: CounterPath | None = None,
        list_path: ListPath | None = None,
        org_limits: OrgLimits | None = None,
    ):
        self.app = app
        self.org_limits = org_limits  # the per-organisation limits, before any path (orglimit.py)
        self.metrics = metrics
        self.watch_hub = watch_hub  # for server.py, which closes it at SIGTERM
        self.counter_path = counter_path  # answers plain counter reads without the router
        self.list_path = list_path  # answers list pages without the router (list_path.py)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = next_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status: list[int] = []
        tracked = body.Tracked(receive) if body.streamed(scope) else None

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
                headers = [*message.get("headers", []), (REQUEST_ID_HEADER.encode(), request_id.encode())]
                if tracked is not None and not tracked.ended:  # a streamed body left unread
                    headers.append((b"connection", b"close"))
                message = {**message, "headers": headers}
            await send(message)

        try:
            if tracked is not None:
                await self.app(scope, tracked, send_with_id)
                return
            try:
                raw = await body.read_whole(scope, receive)
            except body.ClientGone:
                status.append(499)  # nobody to answer; logged like nginx's "client closed request"
                return
            except (body.BadLength, body.BodyTooLarge) as e:
                await self._refuse_body(e, request_id, scope, receive, send_with_id)
                return
            if self.org_limits is not None and await self._org_refused(
                request_id, scope, receive, send_with_id
            ):
                return
            if self.counter_path is not None and await self.counter_path.answer(scope, receive, send_with_id):
                return
            if self.list_path is not None and await self.list_path.answer(scope, receive, send_with_id):
                return
            await self.app(scope, body.replaying(raw, receive), send_with_id)
        except Exception:
            # Starlette already answered with the envelope (handler for Exception) and re-raised.
            log.exception("unhandled error in %s %s", scope["method"], scope["path"])
            if not status:
                resp = _error_response(ApiError(500, "api_error", "internal server error"), request_id)
                await resp(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", "unmatched")
            code = status[0] if status else 500
            self.metrics.observe(scope["method"], route, code, seconds)
            # Path only: no query string (it can hold path prefixes), never headers (credentials).
            access_line(scope["method"], scope["path"], code, seconds)

    async def _org_refused(self, request_id: str, scope, receive, send) -> bool:
        """Count the request in its organisation's class; answer 429 (True) when over the limit."""
        assert self.org_limits is not None
        cls = self.org_limits.classify(scope)
        if cls is None:
            return False
        wait = await self.org_limits.take(cls)
        self.metrics.org_request(cls, wait is not None)
        if wait is None:
            return False
        resp = _error_response(self.org_limits.refusal(cls, wait), request_id)
        await resp(scope, receive, send)
        return True

    @staticmethod
    async def _refuse_body(exc: Exception, request_id: str, scope, receive, send) -> None:
        if isinstance(exc, body.BodyTooLarge):
            err = ApiError(413, "request_too_large", str(exc))
        else:
            err = invalid(str(exc))
        resp = _error_response(err, request_id)
        if not getattr(exc, "drained", False):
            # The rest of the body is still on its way: only a new connection can carry a request.
            resp.headers["connection"] = "close"
        await resp(scope, receive, send)


def create_app(
    storage: Storage,
    admin_key: str,
    max_memories: int = DEFAULT_MAX_MEMORIES,
    *,
    metrics: Metrics | None = None,
    extensions: bool = True,
    watch_hub: WatchHub | None = None,
    console: bool = False,
    rate_limiter: RateLimiter | None = None,
    hosted: HostedOptions | None = None,
    org_limits: OrgLimits | None = None,
    fast_paths: bool = True,
):
    """The ASGI app serving `storage`. `admin_key` can do everything; sessions get scoped tokens.

    The returned app's `watch_hub` holds the watches; its change source runs for the app's lifespan,
    and `watch_hub.close()` (server.py, at SIGTERM) answers every held watch at once.
    `rate_limiter` (None: no limit) limits each credential's requests (429 with retry-after).
    `hosted`: the emulator's switches (hosted.py; default: the hosted API's documented behaviour).
    `org_limits` (None: none): the per-organisation limits of every request (orglimit.py).
    `fast_paths` False: every request through the router (tests compare the two paths' bytes)."""
    metrics = metrics or Metrics()
    hub = watch_hub or WatchHub(storage)
    service = _Service(storage, admin_key, max_memories, metrics, hub, rate_limiter)
    service.extensions = extensions
    if hosted is not None:
        service.hosted = hosted
    # The fast paths answer before the router: the organisation's limit is taken before them (the
    # request frame), a caller's rate limit by them as the full path takes it (ratelimit.py), so a
    # runaway ticker is limited like any other request, with the same 429.
    limit = None if rate_limiter is None else FastPathLimit(rate_limiter, metrics, storage.session_for_token)
    fast = CounterPath(storage, admin_key, metrics, hub, limit) if extensions and fast_paths else None
    if fast is not None and hub.fast_read is None:
        hub.fast_read = fast.watched_counters

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hub.run)
            try:
                yield
            finally:
                hub.close()
                tg.cancel_scope.cancel()
                if fast is not None:
                    await fast.aclose()

    routes = service.routes()
    if console:  # the web console at /console (docs/SEMANTICS.md#d-console); imported only when served
        from memfs.service.console import console_mount

        routes.append(console_mount(storage, admin_key, max_memories))
    app = Starlette(
        lifespan=lifespan,
        routes=routes,
        exception_handlers={
            ApiError: _on_api_error,
            StorageError: _on_api_error,
            HTTPException: _on_http_exception,
            Exception: _on_unexpected,
        },
    )
    list_path = (
        ListPath(storage, admin_key, service.cursors, extensions=extensions, limit=limit)
        if fast_paths
        else None
    )
    return _RequestFrame(app, metrics, hub, fast, list_path, org_limits)
