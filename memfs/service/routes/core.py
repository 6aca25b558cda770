"""The routes' shared context: the storage, who is calling (credential, beta header, rate limit),
the cursors, the metrics and the switches. The routes (one module per resource) hold one."""

from __future__ import annotations

import functools

import anyio
import anyio.to_thread
from starlette.requests import Request

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
from memfs.service.cursors import CursorError, Cursors
from memfs.service.errors import ApiError, from_storage, invalid
from memfs.service.hosted import HostedOptions
from memfs.service.metrics import Metrics
from memfs.service.ratelimit import RateLimiter, caller_refusal
from memfs.service.rules import StoreService
from memfs.service.storage import Actor, StorageError
from memfs.service.watch import WatchHub


class RouteContext:
    """What every route shares: the storage, the credential check and the per-credential limit,
    the cursors, the metrics, the switches (the extensions, the emulator's)."""

    extensions = True  # the memfs extensions (counter, changes feed, snapshot, counter header, batch)
    hosted = HostedOptions()  # the emulator's switches (hosted.py)

    def __init__(
        self,
        storage: StoreService,
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

    def session_token(self, request: Request) -> str | None:
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
