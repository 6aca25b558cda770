"""The web console of `memfs serve --console` (SEMANTICS.md#d-console), mounted at /console."""

from __future__ import annotations

from starlette.routing import Mount

from memfs.service.auth import admin_key_id
from memfs.service.console.backend import ConsoleBackend
from memfs.service.console.pages import BASE, SECURITY_HEADERS
from memfs.service.console.routes import Console
from memfs.service.cursors import Cursors
from memfs.service.rules import StoreService
from memfs.service.storage import Actor


def console_mount(storage: StoreService, admin_key: str, max_memories: int) -> Mount:
    """The console as one route of the service app; its writes are the admin key's (api_actor)."""
    actor = Actor("api_actor", admin_key_id(admin_key))
    # cursors keyed by the admin key, like the API's: a console URL's page token works on every replica
    backend = ConsoleBackend(storage, actor, max_memories, Cursors(admin_key))
    return Mount(BASE, app=_SecurityHeaders(Console(backend, admin_key).app()))


class _SecurityHeaders:
    """Adds the strict CSP and its companions to every console response, error pages included."""

    def __init__(self, app):
        self.app = app
        self._headers = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
        # Over TLS: browsers keep to https for a year, so the session cookie never goes out in
        # the clear. Not over plain http, where the header means nothing (RFC 6797, section 7.2).
        self._tls_headers = [*self._headers, (b"strict-transport-security", b"max-age=31536000")]

    async def __call__(self, scope, receive, send) -> None:
        headers = self._tls_headers if scope.get("scheme") == "https" else self._headers

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *headers]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
