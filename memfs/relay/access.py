"""Which credential may read which store from the relay's cache (SEMANTICS.md#d-relay).

The cache serves a credential only the stores the upstream has confirmed it may read, and asks
the upstream again once a confirmation is older than `ttl` (a minute by default), so a revoked
token (an archived session) stops reading within that. A confirmation comes from the upstream's
own answers to that credential: a session read (`GET /v1/sessions/{id}`, which names every store
the session attaches), a write to the store the upstream accepted, or a one-memory listing the
relay asks for. With the operator's key, a session's
token is confirmed again by the list of the store's sessions (`store_sessions`): one request a
minute per store, whatever the number of tokens. Credentials are kept as their SHA-256
only; pure, with the clock passed in.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

DEFAULT_TTL_S = 60.0


def credential_hash(credential: str) -> str:
    return hashlib.sha256(credential.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class AccessBook:
    ttl: float = DEFAULT_TTL_S
    _confirmed: dict[tuple[str, str], float] = field(default_factory=dict)  # (cred, store) -> when
    _sessions: dict[str, str] = field(default_factory=dict)  # cred -> the session it is the token of

    def fresh(self, cred: str, store_id: str, now: float) -> bool:
        """Confirmed within the ttl: the cache may serve it without asking."""
        at = self._confirmed.get((cred, store_id))
        return at is not None and now - at < self.ttl

    def ever(self, cred: str, store_id: str) -> bool:
        """Confirmed once and not revoked since (what an unreachable upstream leaves to go on)."""
        return (cred, store_id) in self._confirmed

    def confirm(self, cred: str, store_ids: list[str] | tuple[str, ...], now: float) -> None:
        for sid in store_ids:
            self._confirmed[(cred, sid)] = now

    def revoke(self, cred: str, store_id: str | None = None) -> None:
        """The upstream refused it: the store (or, None, every store) is no longer served to it."""
        for key in [k for k in self._confirmed if k[0] == cred and store_id in (None, k[1])]:
            del self._confirmed[key]
        if store_id is None:
            self._sessions.pop(cred, None)

    def learn_session(self, cred: str, session_id: str, store_ids: list[str], now: float) -> None:
        """The upstream answered this credential its session: it may read exactly those stores."""
        self._sessions[cred] = session_id
        for key in [k for k in self._confirmed if k[0] == cred and k[1] not in store_ids]:
            del self._confirmed[key]
        self.confirm(cred, store_ids, now)

    def store_sessions(self, store_id: str, active: set[str], now: float) -> None:
        """The upstream listed the sessions attaching the store that are not archived (with the
        operator's key): every credential known as the token of one of them is confirmed for the
        store, every other session's token refused it. One request for all of a store's tokens."""
        for cred, session_id in self._sessions.items():
            if session_id in active:
                self._confirmed[(cred, store_id)] = now
            else:
                self._confirmed.pop((cred, store_id), None)

    def session_of(self, cred: str) -> str | None:
        return self._sessions.get(cred)

    def __len__(self) -> int:
        return len(self._confirmed)
