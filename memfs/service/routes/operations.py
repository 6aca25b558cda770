"""Operations: /metrics, /healthz (liveness), /readyz (readiness)."""

from __future__ import annotations

import logging

import anyio
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from memfs.service.metrics import CONTENT_TYPE
from memfs.service.responses import json_response as _json
from memfs.service.routes.core import RouteContext

log = logging.getLogger("memfs.service")
READY_TIMEOUT_S = 2.0


class OperationRoutes:
    def __init__(self, ctx: RouteContext):
        self.ctx = ctx

    async def get_metrics(self, request: Request) -> Response:
        return Response(self.ctx.metrics.render(), headers={"content-type": CONTENT_TYPE})

    async def get_live(self, request: Request) -> Response:
        # Liveness: the process answers HTTP. Never touches the database, so an orchestrator does
        # not restart every replica when the database has a bad minute.
        return _json({"status": "ok"})

    async def get_ready(self, request: Request) -> Response:
        # Readiness: this app exists only after the storage opened and migrated (serving.py opens
        # it first), and the database must answer one round trip now, within a bound.
        try:
            with anyio.fail_after(READY_TIMEOUT_S):
                await anyio.to_thread.run_sync(self.ctx.storage.ping, abandon_on_cancel=True)
        except TimeoutError:
            return _json({"status": "unavailable", "reason": "the database did not answer in time"}, 503)
        except Exception as e:  # any database error: not ready, said without details
            log.warning("readiness check failed: %s", type(e).__name__)
            return _json({"status": "unavailable", "reason": "the database is not reachable"}, 503)
        return _json({"status": "ready"})
