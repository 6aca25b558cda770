"""The request frame: the outermost ASGI layer of every request (request id, access log, metrics,
the credential checked, the body read whole, the organisation's limit, then the fast paths, then
the router)."""

from __future__ import annotations

import logging
import time

from memfs.protocol import API_PREFIX, EXTENSIONS, EXTENSIONS_HEADER, REQUEST_ID_HEADER
from memfs.service import body
from memfs.service.access_log import RequestLine
from memfs.service.counter_path import CounterPath
from memfs.service.credential_check import CredentialCheck
from memfs.service.errors import ApiError, invalid
from memfs.service.list_path import ListPath
from memfs.service.metrics import Metrics
from memfs.service.orglimit import OrgLimits
from memfs.service.request import (
    next_request_id,
)
from memfs.service.responses import error_response as _error_response
from memfs.service.watch import WatchHub

log = logging.getLogger("memfs.service")
access_line = RequestLine("memfs.service.access")  # a logger.info("%s %s %d %.1fms", …), cheaper
_API = API_PREFIX  # every route under it needs a credential
_CONSOLE = "/console"  # the console checks its own session (console/routes.py), after its form's body


class RequestFrame:
    """Outermost layer: request id on every response, one access-log line, metrics, last-resort 500.

    It also reads every request's body whole before the routes run (see `body.py`): a handler
    can never leave a body unread on a keep-alive connection, and bodies over 1 MiB are 413
    everywhere. But only a body someone may act on: an API request's (`/v1/…`) once its
    credential is known to authenticate (credential_check.py), and the console's (which checks
    its own session; its import streams). Any other body is never read: the request is answered
    as if it had none (the routes refuse an unknown credential before they look at a body: 401),
    and the answer closes the connection. So a client with no valid credential cannot hold a
    connection by dripping a body, and takes nothing from the organisation's allowance.
    """

    def __init__(
        self,
        app,
        metrics: Metrics,
        watch_hub: WatchHub,
        counter_path: CounterPath | None = None,
        list_path: ListPath | None = None,
        org_limits: OrgLimits | None = None,
        credentials: CredentialCheck | None = None,
        extensions: bool = False,
    ):
        self.app = app
        # said on every answer when the extensions are served (protocol.py EXTENSIONS_HEADER)
        self.offered = [(EXTENSIONS_HEADER.encode(), EXTENSIONS.encode())] if extensions else []
        self.credentials = credentials  # None: every credential taken as valid (a test's frame)
        self.org_limits = org_limits  # the per-organisation limits, before any path (orglimit.py)
        self.metrics = metrics
        self.watch_hub = watch_hub  # for asgi_server.py, which closes it at SIGTERM
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
        unread: list[bool] = []  # [True]: the body was left unread (not the app's to read)
        limit_headers: list[tuple[bytes, bytes]] = []  # the organisation's limit, where it counted

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
                headers = [
                    *message.get("headers", []),
                    (REQUEST_ID_HEADER.encode(), request_id.encode()),
                    *self.offered,
                    *limit_headers,
                ]
                if unread or (tracked is not None and not tracked.ended):  # a body left unread
                    headers.append((b"connection", b"close"))
                message = {**message, "headers": headers}
            await send(message)

        try:
            if tracked is not None:
                await self.app(scope, tracked, send_with_id)
                return
            path: str = scope["path"]
            has_body = body.declares_body(scope)
            cls = self.org_limits.classify(scope) if self.org_limits is not None else None
            # Checked only when something hangs on it: a body to read, a request to count.
            authenticated = (has_body or cls is not None) and await self._authenticates(scope)
            raw = b""
            if has_body and (authenticated or path == _CONSOLE or path.startswith(_CONSOLE + "/")):
                try:
                    raw = await body.read_whole(scope, receive)
                except body.ClientGone:
                    status.append(499)  # nobody to answer; logged like nginx's "client closed request"
                    return
                except (body.BadLength, body.BodyTooLarge) as e:
                    await self._refuse_body(e, request_id, scope, receive, send_with_id)
                    return
            elif has_body:
                unread.append(True)
            if (
                cls is not None
                and authenticated
                and await self._org_refused(cls, request_id, scope, receive, send_with_id, limit_headers)
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

    async def _authenticates(self, scope) -> bool:
        """An API request whose credential authenticates (credential_check.py); any other is not."""
        if not scope["path"].startswith(_API):
            return False
        return self.credentials is None or await self.credentials.authenticates(scope)

    async def _org_refused(
        self, cls: str, request_id: str, scope, receive, send, limit_headers: list
    ) -> bool:
        """Count an authenticated request in its organisation's class; answer 429 (True) when over
        the limit. Either way its answer will say where the class stands (`limit_headers`, orglimit.py)."""
        assert self.org_limits is not None
        wait = await self.org_limits.take(cls)
        limit_headers.extend(self.org_limits.headers(cls))
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
