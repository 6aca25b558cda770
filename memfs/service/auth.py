"""Credentials, scoping and the `anthropic-beta` rule (docs/SEMANTICS.md#d-api, #d-security).

The admin key is compared in constant time; session tokens are stored only as SHA-256 hashes
(a lookup by hash leaks nothing useful about the token). Nothing here logs a credential.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from starlette.requests import Request

from memfs.protocol import MEMORY_BETA as BETA_MEMORY
from memfs.protocol import SESSIONS_BETA as BETA_AGENTS
from memfs.service import request as request_parts
from memfs.service.errors import ApiError, invalid, not_found, permission
from memfs.service.storage import Actor, SessionRecord


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def admin_key_id(admin_key: str) -> str:
    """A stable `apikey_…` id for the admin key that does not reveal it."""
    return "apikey_" + hashlib.sha256(b"memfs-admin-key-id:" + admin_key.encode()).hexdigest()[:24]


def check_memory_beta(request: Request) -> None:
    betas = request_parts.betas(request.scope)
    has_memory, has_agents = BETA_MEMORY in betas, BETA_AGENTS in betas
    if has_memory and has_agents:
        raise invalid(f"anthropic-beta: send either {BETA_MEMORY} or {BETA_AGENTS}, not both")
    if not (has_memory or has_agents):
        raise invalid(
            f"anthropic-beta header is required: this endpoint needs {BETA_MEMORY} or {BETA_AGENTS}"
        )


def check_sessions_beta(request: Request) -> None:
    if BETA_AGENTS not in request_parts.betas(request.scope):
        raise invalid(f"anthropic-beta header is required: session endpoints need {BETA_AGENTS}")


def presented_credential(request: Request) -> str | None:
    return request_parts.credential(request.scope)


def unauthenticated(message: str) -> ApiError:
    return ApiError(401, "authentication_error", message)


@dataclass
class Principal:
    """Who is calling: the admin key, or a session token scoped to its session's stores."""

    actor: Actor
    session: SessionRecord | None = None

    @property
    def is_admin(self) -> bool:
        return self.session is None

    def require_admin(self, what: str) -> None:
        if not self.is_admin:
            raise permission(f"{what} needs the admin key; a session token cannot do it")

    def require_store(self, store_id: str, *, write: bool = False) -> None:
        """Admin: any store. Session: only attached stores (404 otherwise), writes only read_write (403)."""
        if self.session is None:
            return
        res = self.session.resource_for(store_id)
        if res is None:
            raise not_found(f"memory store {store_id} not found")
        if write and res.access != "read_write":
            raise permission(f"memory store {store_id} is attached read_only to session {self.session.id}")

    def store_ids(self) -> list[str] | None:
        return None if self.session is None else [r.memory_store_id for r in self.session.resources]


def is_admin_key(presented: str, admin_key: str) -> bool:
    return hmac.compare_digest(presented.encode("utf-8", "surrogateescape"), admin_key.encode("utf-8"))
