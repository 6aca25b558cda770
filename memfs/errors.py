"""How a request to the store service failed: the service refused it (`ApiError`), or no whole
answer came (`Unreachable`).

Their own module, importing nothing, so that the mount's early download (memfs/session/early_fetch.py,
which runs before httpx and trio are imported) and the snapshot parser raise the same errors as
the client; memfs.client re-exports both."""

from __future__ import annotations

from typing import Any


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

    @property
    def retryable(self) -> bool:
        return self.status in (408, 429) or self.status >= 500

    @property
    def refused(self) -> bool:
        """The service will never accept this request as it is (bad path, too big, not UTF-8...)."""
        return self.status in (400, 413, 422)


class Unreachable(Exception):
    """No answer: connection refused or reset, timeout, truncated body."""
