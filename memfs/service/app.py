"""The store service as an ASGI app: the route table, the error handlers and the app's setup.

The routes are one module per resource (memfs/service/routes/), sharing a `RouteContext` (who is
calling, the storage, the cursors); the request frame (frame.py) wraps them with the request id,
the access log, the metrics, the body and the organisation's limit; the fast paths
(counter_path.py, list_path.py) answer the hottest reads before the router.

`create_app(storage, admin_key, …)` returns the app. Storage calls are blocking and run in worker
threads; the event loop only parses, checks and serialises.
"""

from __future__ import annotations

import contextlib

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from memfs.limits import DEFAULT_MAX_MEMORIES
from memfs.protocol import (
    COUNTERS_PATH,
    SESSIONS_PATH,
    STORES_PATH,
    WATCH_PATH,
    batch_path,
    changes_path,
    memories_path,
    memory_path,
    session_path,
    snapshot_path,
    store_counter_path,
    store_path,
    versions_path,
)
from memfs.service.counter_path import CounterPath
from memfs.service.credential_check import CredentialCheck
from memfs.service.errors import ApiError, from_storage, not_found
from memfs.service.frame import RequestFrame
from memfs.service.hosted import HostedOptions
from memfs.service.list_path import ListPath
from memfs.service.metrics import Metrics
from memfs.service.orglimit import OrgLimits
from memfs.service.ratelimit import FastPathLimit, RateLimiter
from memfs.service.responses import error_response as _error_response
from memfs.service.routes.core import RouteContext
from memfs.service.routes.extensions import ExtensionRoutes
from memfs.service.routes.memories import MemoryRoutes
from memfs.service.routes.operations import OperationRoutes
from memfs.service.routes.sessions import SessionRoutes
from memfs.service.routes.stores import StoreRoutes
from memfs.service.routes.versions import VersionRoutes
from memfs.service.rules import StoreService
from memfs.service.storage import StorageError
from memfs.service.watch import WatchHub


def _routes(ctx: RouteContext) -> list[BaseRoute]:
    # route patterns from the client's own builders (memfs/protocol.py), the ids as path parameters
    s, m = store_path("{store_id}"), memory_path("{store_id}", "{memory_id}")
    v = versions_path("{store_id}") + "/{version_id}"
    stores, memories, versions = StoreRoutes(ctx), MemoryRoutes(ctx), VersionRoutes(ctx)
    sessions, ops, ext = SessionRoutes(ctx), OperationRoutes(ctx), ExtensionRoutes(ctx)
    table = [
        (STORES_PATH, "POST", stores.create_store),
        (STORES_PATH, "GET", stores.list_stores),
        (s, "GET", stores.get_store),
        (s, "POST", stores.update_store),
        (s, "DELETE", stores.delete_store),
        (s + "/archive", "POST", stores.archive_store),
        (memories_path("{store_id}"), "POST", memories.create_memory),
        (memories_path("{store_id}"), "GET", memories.list_memories),
        (m, "GET", memories.get_memory),
        (m, "POST", memories.update_memory),
        (m, "DELETE", memories.delete_memory),
        (versions_path("{store_id}"), "GET", versions.list_versions),
        (v, "GET", versions.get_version),
        (v + "/redact", "POST", versions.redact_version),
        (SESSIONS_PATH, "POST", sessions.create_session),
        (SESSIONS_PATH, "GET", sessions.list_sessions),
        (session_path("{session_id}"), "GET", sessions.get_session),
        (session_path("{session_id}") + "/archive", "POST", sessions.archive_session),
        ("/metrics", "GET", ops.get_metrics),
        ("/healthz", "GET", ops.get_live),
        ("/readyz", "GET", ops.get_ready),
    ]
    if ctx.extensions:  # not like the hosted API: no counter, feed or snapshot (SEMANTICS.md#d-no-counter)
        table += [
            (COUNTERS_PATH, "GET", ext.get_counters),
            (WATCH_PATH, "GET", ext.watch),
            (store_counter_path("{store_id}"), "GET", ext.get_counter),
            (changes_path("{store_id}"), "GET", ext.get_changes),
            (snapshot_path("{store_id}"), "GET", ext.get_snapshot),
            (batch_path("{store_id}"), "POST", memories.write_batch),
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


def create_app(
    storage: StoreService,
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
    and `watch_hub.close()` (asgi_server.py, at SIGTERM) answers every held watch at once.
    `rate_limiter` (None: no limit) limits each credential's requests (429 with retry-after).
    `hosted`: the emulator's switches (hosted.py; default: the hosted API's documented behaviour).
    `org_limits` (None: none): the per-organisation limits of every request (orglimit.py).
    `fast_paths` False: every request through the router (tests compare the two paths' bytes)."""
    metrics = metrics or Metrics()
    hub = watch_hub or WatchHub(storage)
    service = RouteContext(storage, admin_key, max_memories, metrics, hub, rate_limiter)
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

    routes = _routes(service)
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
    # No redirect to the path with or without a trailing slash: Starlette answers it 307 with no
    # body (not JSON, which @anthropic-ai/sdk 1.17 refuses) and the hosted API has no such paths.
    app.router.redirect_slashes = False
    list_path = (
        ListPath(storage, admin_key, service.cursors, extensions=extensions, limit=limit)
        if fast_paths
        else None
    )
    # what the frame spends on a request (its body, the organisation's allowance) waits for this
    credentials = CredentialCheck(admin_key, storage.session_for_token)
    return RequestFrame(app, metrics, hub, fast, list_path, org_limits, credentials, extensions)
