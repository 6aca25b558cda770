"""How a request to the store service failed: the service refused it (`ApiError`), or no whole
answer came (`Unreachable`).

Their own module, importing nothing, so that the snapshot parser (memfs/client/snapshot_stream.py,
light) and the engine's port raise the same errors as the client without importing httpx or trio; memfs.client re-exports both. They are what the engine's `StoreApi` port raises
(memfs/sync/ports.py), whatever store stands behind it (tests/support/stores.py raises them too)."""

from __future__ import annotations

from typing import Any

# Refusals that a second try can get past, named by `error.details.error_code` (anthropic 2.16): the
# body arrived too slowly (400, nothing was done), the workspace's storage is not connected yet (503).
RETRYABLE_CODES = frozenset({"request_body_timeout", "storage_not_ready"})
# Answers that ask for the same request again at once (anthropic 2.17): 503 `change_outcome_unknown`,
# "send the same request again to finish it; changes already saved aren't repeated". The client
# sends it again without waiting for a retry-after (memfs/client/api.py `_retry_wait`).
RESEND_CODES = frozenset({"change_outcome_unknown"})


def error_code(body: Any) -> str | None:
    """`error.details.error_code` of an error body, when it has one."""
    details = body.get("error", {}).get("details") if isinstance(body, dict) else None
    code = details.get("error_code") if isinstance(details, dict) else None
    return code if isinstance(code, str) else None


class ApiError(Exception):
    """The service answered with an error status."""

    def __init__(
        self, status: int, type_: str, message: str, body: Any = None, retry_after: float | None = None
    ):
        super().__init__(f"{status} {type_}: {message}")
        self.status = status
        self.type = type_
        self.message = message
        self.body = body
        self.retry_after = retry_after  # seconds the service asked us to wait (429/5xx), if it said
        # The client had sent this same request before (a retry): a 409 may answer our own first
        # attempt, which landed (memfs/client/api.py `_own_write`).
        self.repeated = False

    @property
    def retryable(self) -> bool:
        return (
            self.status in (408, 429)
            or self.status >= 500
            or error_code(self.body) in RETRYABLE_CODES | RESEND_CODES
        )

    @property
    def refused(self) -> bool:
        """The service will never accept this request as it is (bad path, too big, not UTF-8...)."""
        return self.status in (400, 413, 422) and not self.retryable


class Unreachable(Exception):
    """No answer: connection refused or reset, timeout, truncated body."""


def first_failure(group: BaseExceptionGroup) -> BaseException:
    """What a failed nursery (an exception group, nested or not) failed with, as itself, for a
    caller that catches it by type: its first ApiError or Unreachable, else its first leaf."""
    leaves: list[BaseException] = []

    def walk(g: BaseExceptionGroup) -> None:
        for e in g.exceptions:
            walk(e) if isinstance(e, BaseExceptionGroup) else leaves.append(e)

    walk(group)
    for e in leaves:
        if isinstance(e, (ApiError, Unreachable)):
            return e
    return leaves[0]
