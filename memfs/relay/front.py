"""The relay's HTTP side: every request, routed to the cache, to the upstream, or written through.

- **Cached reads** (routes.py): each store named is checked against the access book (access.py),
  asked of the upstream with the caller's own credential when the confirmation is missing or
  old; a store not in the cache yet is
  downloaded first (poller.py, once however many ask); then the request is answered by the
  cache's own service app (memfs/service/app.py on the cache's storage) as the relay's admin, so
  the counter, watch, changes feed, snapshot and fast paths are the service's own.
- **Writes** go to the upstream with the caller's own credential; once accepted, the answer (with
  the content the request carried) is applied to the cache before the caller hears of it, which
  moves the cache's counter and wakes every watch on the store. A 429 holds the relay's polls too.
- **Everything else** passes through unchanged (an official worker pointed at the relay works).
  A session read's answer teaches the access book which stores that token may read.

The credential is the one the upstream authenticates: a request naming two different ones
(`x-api-key` and `authorization: Bearer`, or either twice) is refused 400, so the relay never
records one credential for the upstream's answer to another. A 401 from the upstream, to any
request, is remembered (access.py) and the poll stops using that credential (poller.py). A path
with a `.` or `..` segment is refused 400 and never sent upstream. An API request's body is read
only once its credential is known to authenticate upstream (`_admit`): a client the upstream would
refuse is answered 401 with its body unread and the connection closed, however slowly it drips.

The upstream unable to confirm (unreachable, 429, 5xx): reads a credential had confirmed are served
from the cache for `--confirm-grace` past their confirmation's `--confirm-every`, then 503;
writes and everything else are answered 503 (the mount keeps the write staged). Credentials never
reach a log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import anyio.to_thread

from memfs.protocol import (
    API_KEY_HEADER,
    API_PREFIX,
    BETA_HEADER,
    EXTENSIONS,
    EXTENSIONS_HEADER,
    MEMORY_BETA,
    SESSIONS_BETA,
    STORES_PATH,
    memories_path,
    session_path,
)
from memfs.relay.access import AccessBook, credential_hash
from memfs.relay.poller import Poller, to_record
from memfs.relay.routes import STATUS_PATH, Routed, route
from memfs.relay.upstream import Answer, Upstream, UpstreamUnreachable, with_json_error
from memfs.service import body
from memfs.service.access_log import RequestLine
from memfs.service.errors import ApiError, invalid
from memfs.service.mirror import Gone, Mirror, State
from memfs.service.request import next_request_id
from memfs.service.responses import error_response

log = logging.getLogger("memfs.relay")
access_line = RequestLine("memfs.service.access")

_AUTH = (b"authorization", API_KEY_HEADER.encode())
_BETA = BETA_HEADER.encode()
# The relay serves the extensions from its cache whatever its upstream is (the hosted API has
# none): every answer says so, the upstream's passed on included (protocol.py EXTENSIONS_HEADER).
_OFFERED = (EXTENSIONS_HEADER.encode(), EXTENSIONS.encode())


class Refused(Exception):
    """The upstream refused the credential this store: its own answer is passed on."""


@dataclass(frozen=True)
class Caller:
    """The credential a request presents, and the headers that carry it (all naming it)."""

    credential: str
    headers: tuple[tuple[bytes, bytes], ...]

    @cached_property
    def hash(self) -> str:
        return credential_hash(self.credential)


class RelayFront:
    def __init__(
        self,
        local,  # the cache's own app (memfs.service.app.create_app on the cache's storage)
        admin_key: str,
        upstream: Upstream,
        poller: Poller,
        mirror: Mirror,
        book: AccessBook,
    ):
        self.local = local
        self.watch_hub = local.watch_hub  # asgi_server closes it at SIGTERM
        self.org_limits = None
        self.admin_key = admin_key
        self.upstream = upstream
        self.poller = poller
        self.mirror = mirror
        self.book = book
        poller.on_refused = self._poll_refused
        self._loop: asyncio.AbstractEventLoop | None = None  # where the poll's refusals are applied
        self.no_batch: Answer | None = None  # the upstream's 404 for the batch route, once it gave one
        self._confirming: dict[tuple[str, str], asyncio.Future[bool | None]] = {}

    async def __call__(self, scope, receive, send) -> None:
        self._loop = self._loop or asyncio.get_running_loop()
        if scope["type"] != "http":
            await self.local(scope, receive, send)  # the lifespan: the cache's watch hub
            return
        routed = route(scope["method"], scope["path"], scope["query_string"].decode("latin-1"))
        if routed.kind == "local" and scope["path"] != STATUS_PATH:
            await self.local(scope, receive, send)
            return
        started = time.perf_counter()
        status: list[int] = []

        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
                headers = message.get("headers", [])
                if not any(k.lower() == _OFFERED[0] for k, _ in headers):  # an upstream's answer passed on
                    message = {**message, "headers": [*headers, _OFFERED]}
            await send(message)

        try:
            await self._handle(routed, scope, receive, sending)
        except Exception:
            log.exception("relay: unhandled error in %s %s", scope["method"], scope["path"])
            if not status:
                await _answer_error(
                    ApiError(500, "api_error", "internal server error"), scope, receive, sending
                )
        finally:
            if not scope.get("state", {}).get("request_id"):  # the cache's app logged what it answered
                access_line(
                    scope["method"],
                    scope["path"],
                    status[0] if status else 499,
                    time.perf_counter() - started,
                )

    async def _handle(self, routed: Routed, scope, receive, send) -> None:
        unread = body.declares_body(scope)  # until read: an answer before it closes the connection

        async def sending(message) -> None:
            if message["type"] == "http.response.start" and unread:
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        if routed.kind == "invalid":
            dots = invalid("the path has a '.' or '..' segment (percent-encoded or not): it is not sent on")
            await _answer_error(dots, scope, receive, sending)
            return
        try:
            auth = _caller(scope)
        except ApiError as refused:
            await _answer_error(refused, scope, receive, sending)
            return
        if scope["path"] == STATUS_PATH:
            await self._status(auth, scope, receive, sending)
            return
        try:
            raw = b""
            if unread:
                await self._admit(routed, auth, scope)
                try:
                    raw = await body.read_whole(scope, receive)
                    unread = False
                except body.ClientGone:
                    return
                except body.BodyTooLarge as e:
                    unread = not e.drained
                    raise ApiError(413, "request_too_large", str(e)) from None
                except body.BadLength as e:
                    raise invalid(str(e)) from None
            if routed.kind == "cached" and auth is not None:
                try:
                    await self._serve_cached(routed, auth, scope, raw, receive, sending)
                    return
                except Refused:
                    pass  # the upstream's own answer, below
            await self._pass(routed, auth, scope, raw, sending)
        except UpstreamUnreachable as exc:
            log.warning("relay: the upstream is unreachable: %s", exc)
            what = (
                "the write was not made: send it again later" if routed.kind == "write" else "try again later"
            )
            err = ApiError(503, "api_error", f"the relay cannot reach its upstream ({exc}); {what}")
            await _answer_error(err, scope, receive, sending)
        except ApiError as err:
            await _answer_error(err, scope, receive, sending)

    async def _admit(self, routed: Routed, auth: Caller | None, scope) -> None:
        """Whether a request's body may be read: an API request's only once its credential is known
        to authenticate upstream (ApiError 401, or UpstreamUnreachable when the upstream cannot
        say), so no client the upstream would refuse holds a connection by dripping a body. A
        credential the book knows costs nothing; another is asked upstream once per --confirm-every
        (the store the request names, which also confirms it for the cache; else a one-store
        listing). Outside the API (no credential needed upstream) the body deadline alone bounds it."""
        if not scope["path"].startswith(API_PREFIX):
            return
        if auth is None:
            raise ApiError(
                401,
                "authentication_error",
                "no credentials: send x-api-key: KEY or Authorization: Bearer KEY",
            )
        now = time.monotonic()
        if self.book.authenticated(auth.hash, now):
            return
        if not self.book.refused(auth.hash, now):
            if routed.store_ids:
                known = await self._confirm(auth, routed.store_ids[0])
                if known is not None:  # False: refused (401) or only not that store's (403/404)
                    known = not self.book.refused(auth.hash, time.monotonic())
            else:
                known = await self._authenticates(auth)
            if known is None:
                raise UpstreamUnreachable("cannot confirm the credential before reading the body")
            if known:
                return
        raise ApiError(
            401, "authentication_error", "the upstream refused this credential (401): the body was not read"
        )

    async def _pass(self, routed: Routed, auth: Caller | None, scope, raw: bytes, send) -> None:
        """Sent upstream as it came (less hop-by-hop and identity headers); its answer passed on."""
        if self.no_batch is not None and scope["path"].endswith("/memory_batch"):
            await _answer(self.no_batch, send)  # the upstream has none: said once, not asked again
            return
        kind = "write" if routed.kind == "write" else "pass"
        answer = await self.upstream.send(
            kind, scope["method"], scope["path"], scope["query_string"], scope["headers"], raw
        )
        if answer.status == 429:
            self.poller.hold(_retry_after(answer))
        if scope["path"].endswith("/memory_batch") and _no_such_route(answer):
            self.no_batch = answer  # every mount tries it once: one upstream request for all
        if auth is not None and answer.status == 401:
            self._refused(auth.hash)
        elif routed.kind == "write" and auth is not None:
            await self._written(routed.store_ids[0], auth, scope, raw, answer)
        elif auth is not None and 200 <= answer.status < 300:
            self.book.authenticate(auth.hash, time.monotonic())
            self._learn(scope, auth, answer)
        await _answer(answer, send)

    # -- cached reads -------------------------------------------------------------------------------

    async def _serve_cached(self, routed: Routed, auth: Caller, scope, raw: bytes, receive, send):
        credential, cred = auth.credential, auth.hash
        if self.book.refused(cred, time.monotonic()):
            raise ApiError(
                401,
                "authentication_error",
                "the upstream refused this credential (401): it is not asked again yet",
            )
        for sid in routed.store_ids:
            if self.book.fresh(cred, sid, time.monotonic()):
                continue
            confirmed = await self._confirm(auth, sid)
            if confirmed is None:  # the upstream did not say: what it said last stands, for a while
                if self.book.in_grace(cred, sid, time.monotonic()):
                    continue
                raise UpstreamUnreachable(f"cannot confirm access to {sid}")
            if not confirmed:
                raise Refused
        for sid in routed.store_ids:
            if sid not in self.poller.cached:
                await self._download(sid, credential)
            self.poller.touch(sid, credential, watch=routed.watch)
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _AUTH]
        headers.append((API_KEY_HEADER.encode(), self.admin_key.encode()))
        scope["state"] = state = scope.get("state") or {}
        await self.local({**scope, "headers": headers, "state": state}, body.replaying(raw, receive), send)

    async def _confirm(self, auth: Caller, sid: str) -> bool | None:
        """Whether the upstream lets this credential read the store (None: it did not say)."""
        return await self._once((auth.hash, sid), lambda: self._ask_store(auth, sid))

    async def _authenticates(self, auth: Caller) -> bool | None:
        """Whether the upstream takes this credential at all (None: it did not say)."""
        return await self._once((auth.hash, ""), lambda: self._ask_authenticates(auth))

    async def _once(self, key: tuple[str, str], ask: Callable[[], Awaitable[bool | None]]) -> bool | None:
        """One question in flight per credential and store ("": none), whoever else asks meanwhile."""
        pending = self._confirming.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
        self._confirming[key] = fut
        result: bool | None = None
        try:
            result = await ask()
        except UpstreamUnreachable:
            result = None
        finally:  # whoever waits on it hears "not said" if this one failed or was cancelled
            del self._confirming[key]
            fut.set_result(result)
        return result

    async def _ask_authenticates(self, auth: Caller) -> bool | None:
        """Asked with the credential itself: the cheapest listing any credential may ask."""
        answer = await self.upstream.send(
            "confirm", "GET", STORES_PATH, b"limit=1", [*auth.headers, (_BETA, MEMORY_BETA.encode())]
        )
        if answer.status == 401:
            self._refused(auth.hash)
            return False
        if answer.status == 429:
            self.poller.hold(_retry_after(answer))
        if 200 <= answer.status < 300 or answer.status in (403, 404):  # 403/404: it is known, not allowed
            self.book.authenticate(auth.hash, time.monotonic())
            return True
        return None

    async def _ask_store(self, auth: Caller, sid: str) -> bool | None:
        """Asked with the credential itself, whatever else the relay holds: its session (which
        names every store it may read) when known, else a one-memory listing of the store."""
        cred = auth.hash
        session = self.book.session_of(cred)
        now = time.monotonic()
        if session is not None:
            answer = await self.upstream.send(
                "confirm",
                "GET",
                session_path(session),
                b"",
                [*auth.headers, (_BETA, SESSIONS_BETA.encode())],
            )
            if answer.status == 200:
                stores = _session_stores(answer)
                if stores is None:  # archived: its token reads nothing more
                    self.book.revoke(cred)
                    return False
                self.book.learn_session(cred, session, stores, now)
                return sid in stores
        else:
            answer = await self.upstream.send(
                "confirm",
                "GET",
                memories_path(sid),
                b"limit=1&depth=1",
                [*auth.headers, (_BETA, MEMORY_BETA.encode())],
            )
            if answer.status == 200:
                self.book.confirm(cred, [sid], now)
                return True
        if answer.status == 401:
            self._refused(cred)
            return False
        if answer.status in (403, 404):  # it authenticates, but may not read this store
            self.book.revoke(cred, sid)
            self.book.authenticate(cred, now)
            return False
        if answer.status == 429:
            self.poller.hold(_retry_after(answer))
        return None

    def _refused(self, cred: str, store_id: str | None = None) -> None:
        """The upstream refused the credential (None: 401, every store) or the store to it: the
        cache serves it no more, the poll stops using it."""
        if store_id is None:
            self.book.refuse(cred, time.monotonic())
        else:
            self.book.revoke(cred, store_id)
        self.poller.forget(cred, store_id)

    def _poll_refused(self, cred: str, store_id: str | None) -> None:
        """A poll met a refusal (called on the poll's thread): the access book is told on this
        loop (the poll has dropped the credential itself)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._refused, cred, store_id)

    async def _download(self, sid: str, credential: str) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[BaseException | None] = loop.create_future()

        def done(exc: BaseException | None) -> None:
            loop.call_soon_threadsafe(_settle, fut, exc)

        self.poller.download(sid, credential, done)
        exc = await fut
        if exc is None:
            return
        status = getattr(exc, "status", None)
        if isinstance(status, int) and 400 <= status < 500 and status != 429:
            raise ApiError(status, getattr(exc, "type", None) or "api_error", str(exc))
        raise UpstreamUnreachable(f"downloading {sid}: {exc}")

    # -- writes and what passes through ---------------------------------------------------------

    async def _written(self, sid: str, auth: Caller, scope, raw: bytes, answer: Answer) -> None:
        cred = auth.hash
        # Only an accepted write proves access: a 403 is read_only on memfs serve, but what else
        # it may mean on the hosted API is not documented.
        if not 200 <= answer.status < 300:
            return
        self.book.confirm(cred, [sid], time.monotonic())
        if sid not in self.poller.cached:
            return
        try:
            states = _written_states(sid, scope["method"], scope["path"], raw, answer.body)
        except (ValueError, KeyError, TypeError, IndexError):
            states = []
        if states:
            await anyio.to_thread.run_sync(self.mirror.apply, sid, states)

    def _learn(self, scope, auth: Caller, answer: Answer) -> None:
        """A session read that passed through: its token may read exactly its stores."""
        parts = scope["path"].split("/")
        if scope["method"] != "GET" or len(parts) != 4 or parts[1:3] != ["v1", "sessions"]:
            return
        stores = _session_stores(answer)
        if stores is not None:
            self.book.learn_session(auth.hash, parts[3], stores, time.monotonic())

    async def _status(self, auth: Caller | None, scope, receive, send) -> None:
        if auth is None or not secrets.compare_digest(auth.credential.encode(), self.admin_key.encode()):
            await _answer_error(
                ApiError(401, "authentication_error", "the relay's admin key is needed"), scope, receive, send
            )
            return
        out: dict[str, Any] = {
            "type": "relay_status",
            "upstream": self.upstream.base_url,
            "front_requests": dict(self.upstream.sent),
            "front_limited": self.upstream.limited,
            "confirmed": len(self.book),
            **self.poller.status(),
        }
        payload = json.dumps(out).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def _settle(fut: asyncio.Future[BaseException | None], exc: BaseException | None) -> None:
    if not fut.done():  # the caller may have gone (its request cancelled)
        fut.set_result(exc)


def _caller(scope) -> Caller | None:
    """The request's credential: of its `x-api-key` and `authorization` headers (blank ones aside),
    all must name the same, else 400. The upstream authenticates one of them by its own precedence
    (memfs serve: `x-api-key`, service/request.py `credential`), which the relay cannot know for
    every upstream: with one credential, whichever it picks is the one the relay records."""
    found: dict[str, None] = {}
    headers: list[tuple[bytes, bytes]] = []
    for k, v in scope["headers"]:
        name = k.lower()
        if name not in _AUTH or not v.strip():
            continue
        headers.append((name, v))
        found[_credential(name, v)] = None
    if len(found) > 1:
        raise invalid("send one credential: the x-api-key and authorization headers name different ones")
    return Caller(next(iter(found)), tuple(headers)) if found else None


def _credential(name: bytes, raw: bytes) -> str:
    """The credential of an `authorization: Bearer …` or `x-api-key: …` header."""
    value = raw.decode("latin-1").strip()
    return value[7:].strip() if name == b"authorization" and value[:7].lower() == "bearer " else value


def _no_such_route(answer: Answer) -> bool:
    """A 404 that names no memory store: the route is not there (the hosted API has no batch
    writes), as the store client reads it (memfs/client/api.py `write_batch`)."""
    if answer.status != 404:
        return False
    try:
        message = json.loads(answer.body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(message, str) and "memory store" not in message


def _retry_after(answer: Answer) -> float:
    try:
        return float(answer.header("retry-after") or 1.0)
    except ValueError:
        return 1.0


def _session_stores(answer: Answer) -> list[str] | None:
    """The stores a session's answer attaches; None when it is archived (or not a session)."""
    try:
        data = json.loads(answer.body)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("archived_at"):
        return None
    return [
        r["memory_store_id"]
        for r in data.get("resources") or []
        if isinstance(r, dict)
        and r.get("type") == "memory_store"
        and isinstance(r.get("memory_store_id"), str)
    ]


def _written_states(sid: str, method: str, path: str, raw: bytes, answer: bytes) -> list[State]:
    """What an accepted write changed, from its answer and the content its request carried."""
    data = json.loads(answer)
    if method == "DELETE":
        return [Gone(data["id"])] if data.get("type") == "memory_deleted" else []
    sent = json.loads(raw) if raw else {}
    if path.endswith("/memory_batch"):
        out: list[State] = []
        for op, result in zip(sent.get("operations") or [], data.get("results") or [], strict=False):
            out.extend(_one_state(sid, op, result))
        return out
    return _one_state(sid, sent, data)


def _one_state(sid: str, sent: dict, result: dict) -> list[State]:
    if result.get("type") == "memory_deleted":
        return [Gone(result["id"])]
    if result.get("type") != "memory":
        return []
    if result.get("content") is None and isinstance(sent.get("content"), str):
        result = {**result, "content": sent["content"]}
    return [to_record(sid, result)]


async def _answer(answer: Answer, send) -> None:
    answer = with_json_error(answer)
    headers = [*answer.headers, (b"content-length", str(len(answer.body)).encode())]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


async def _answer_error(err: ApiError, scope, receive, send) -> None:
    await error_response(err, next_request_id())(scope, receive, send)
