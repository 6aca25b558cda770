"""Which credential may read which store from the relay's cache (SEMANTICS.md#d-relay).

The cache serves a credential only the stores the upstream has confirmed it may read, and asks
the upstream again once a confirmation is older than `ttl` (`--confirm-every`, a minute by
default): every confirmation is an answer of the upstream to that credential itself (a session
read, `GET /v1/sessions/{id}`, which names every store the session attaches; a write to the
store the upstream accepted; or a one-memory listing the relay asks for), so a credential in use
is presented upstream at least once a `ttl`, and a revoked one (a deleted key, an archived
session) stops reading at its next confirmation. When the upstream cannot answer (unreachable,
429, 5xx) a confirmation still serves for `grace` more (`--confirm-grace`; 0: not at all), never
longer: a credential is served at most `ttl + grace` after the upstream last accepted it.

A 401 is remembered for a `ttl`: the credential is refused without asking the upstream again
(and the poll stops using it, poller.py), until the upstream accepts it again. Any other answer
the upstream gave the credential within a `ttl` (a confirmation, an accepted write, a 2xx passed
through, a probe answered 403/404) makes it `authenticated`: the front reads a request's body only
for a credential known so (front.py), so no client the upstream would refuse can hold a connection
by sending a body slowly. Credentials are kept as their SHA-256 only; pure, with the clock passed in.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

DEFAULT_TTL_S = 60.0
DEFAULT_GRACE_S = 120.0
REFUSED_KEPT = 4096  # 401s remembered at most (the oldest forgotten first)
AUTHENTICATED_KEPT = 65536  # credentials known to authenticate (the oldest forgotten: asked again)


def credential_hash(credential: str) -> str:
    return hashlib.sha256(credential.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class AccessBook:
    ttl: float = DEFAULT_TTL_S
    grace: float = DEFAULT_GRACE_S
    _confirmed: dict[tuple[str, str], float] = field(default_factory=dict)  # (cred, store) -> when
    _sessions: dict[str, str] = field(default_factory=dict)  # cred -> the session it is the token of
    _refused: dict[str, float] = field(default_factory=dict)  # cred -> when the upstream answered 401
    _authenticated: dict[str, float] = field(default_factory=dict)  # cred -> when last not refused

    def fresh(self, cred: str, store_id: str, now: float) -> bool:
        """Confirmed within the ttl: the cache may serve it without asking."""
        at = self._confirmed.get((cred, store_id))
        return at is not None and now - at < self.ttl

    def in_grace(self, cred: str, store_id: str, now: float) -> bool:
        """Confirmed within ttl + grace: what the cache may still serve while the upstream cannot
        answer (unreachable, 429, 5xx)."""
        at = self._confirmed.get((cred, store_id))
        return at is not None and now - at < self.ttl + self.grace

    def confirm(self, cred: str, store_ids: list[str] | tuple[str, ...], now: float) -> None:
        """The upstream accepted the credential for these stores (a 401 before it is forgotten)."""
        self.authenticate(cred, now)
        for sid in store_ids:
            self._confirmed[(cred, sid)] = now

    def authenticate(self, cred: str, now: float) -> None:
        """The upstream answered the credential as one it knows (a 401 before it is forgotten)."""
        self._refused.pop(cred, None)
        _remember(self._authenticated, cred, now, AUTHENTICATED_KEPT)

    def authenticated(self, cred: str, now: float) -> bool:
        """The upstream knew the credential within the ttl: its requests' bodies may be read."""
        at = self._authenticated.get(cred)
        return at is not None and now - at < self.ttl

    def revoke(self, cred: str, store_id: str | None = None) -> None:
        """The upstream refused it: the store (or, None, every store) is no longer served to it."""
        for key in [k for k in self._confirmed if k[0] == cred and store_id in (None, k[1])]:
            del self._confirmed[key]
        if store_id is None:
            self._sessions.pop(cred, None)
            self._authenticated.pop(cred, None)

    def refuse(self, cred: str, now: float) -> None:
        """The upstream answered 401 to it: nothing is served to it, and for a ttl it is refused
        without asking the upstream again."""
        self.revoke(cred)
        _remember(self._refused, cred, now, REFUSED_KEPT)

    def refused(self, cred: str, now: float) -> bool:
        at = self._refused.get(cred)
        return at is not None and now - at < self.ttl

    def learn_session(self, cred: str, session_id: str, store_ids: list[str], now: float) -> None:
        """The upstream answered this credential its session: it may read exactly those stores."""
        self._sessions[cred] = session_id
        for key in [k for k in self._confirmed if k[0] == cred and k[1] not in store_ids]:
            del self._confirmed[key]
        self.confirm(cred, store_ids, now)

    def session_of(self, cred: str) -> str | None:
        return self._sessions.get(cred)

    def __len__(self) -> int:
        return len(self._confirmed)


def _remember(seen: dict[str, float], cred: str, now: float, kept: int) -> None:
    """`cred` seen at `now`, re-inserted so that the oldest come first, and the oldest dropped
    past `kept` (a flood of made-up credentials cannot grow the book)."""
    seen.pop(cred, None)
    seen[cred] = now
    while len(seen) > kept:
        del seen[next(iter(seen))]
