"""Whether a request's credential authenticates, known in the request frame (frame.py) before
anything is spent on the request: its body read, its organisation's allowance taken.

Why in the frame and not only in the routes: the routes authenticate (routes/core.py `principal`)
after the frame has read the body and taken the organisation's allowance. When the frame did both
before any check, a body dripped one byte at a time by a client with a garbage key held a
connection for as long as it dripped, and six requests with garbage keys emptied the
organisation's allowance for every legitimate client. Now the credential is checked first; only
one that authenticates gets its body read and is counted.

The check is the routes' own, on the same storage: the admin key compared in constant time, a
session token looked up by its hash (`session_for_token`: a live session holds it). The routes still
authenticate every request themselves; this check only decides what the frame spends. A token found
valid is remembered for `ttl_s` (only its SHA-256, at most `max_kept` of them), so the hot paths do
not look it up twice: a token revoked within that time still has its body read and is counted for
that long, and its requests are refused by the routes as before. A refused credential is not
remembered (a flood of garbage keys costs one lookup each, as the routes' 401 already did). A storage
error is not a refusal: the frame then goes on as before (reads the body), and the routes answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio.to_thread

from memfs.service import request
from memfs.service.auth import hash_token, is_admin_key

DEFAULT_TTL_S = 60.0
DEFAULT_MAX_KEPT = 10_000


class CredentialCheck:
    def __init__(
        self,
        admin_key: str,
        session_for_token: Callable[[str], object | None],
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_kept: int = DEFAULT_MAX_KEPT,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._admin_key = admin_key
        self._lookup = session_for_token  # blocking: run in a worker thread
        self._ttl_s = ttl_s
        self._max_kept = max_kept
        self._clock = clock
        self._valid: dict[str, float] = {}  # token hash -> until when it is taken as valid
        self.lookups = 0  # storage lookups made (tests read it)

    async def authenticates(self, scope) -> bool:
        """True: the request's credential is the admin key or a live session's token (or the
        storage could not say); False: there is none, or nobody holds it."""
        cred = request.credential(scope)
        if cred is None:
            return False
        if is_admin_key(cred, self._admin_key):
            return True
        token_hash = hash_token(cred)
        now = self._clock()
        until = self._valid.get(token_hash)
        if until is not None and until > now:
            return True
        self.lookups += 1
        try:
            found = await anyio.to_thread.run_sync(self._lookup, token_hash) is not None
        except Exception:  # the storage did not answer: not a refusal, the routes will say
            return True
        if not found:
            self._valid.pop(token_hash, None)
            return False
        if token_hash not in self._valid and len(self._valid) >= self._max_kept:
            self._forget_expired(now)
            while len(self._valid) >= self._max_kept:  # the oldest entries first
                del self._valid[next(iter(self._valid))]
        self._valid[token_hash] = now + self._ttl_s
        return True

    def _forget_expired(self, now: float) -> None:
        self._valid = {h: until for h, until in self._valid.items() if until > now}
