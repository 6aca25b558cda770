"""API errors and the error envelope (docs/SEMANTICS.md#d-api)."""

from __future__ import annotations

from memfs.service import storage as st


class ApiError(Exception):
    """An error answered to the client: HTTP status, error type, message, extra `error` fields,
    and response headers (`retry-after` on a 429)."""

    def __init__(
        self, status: int, type_: str, message: str, *, headers: dict[str, str] | None = None, **extra: object
    ):
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.headers = headers or {}
        self.extra = extra


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request_error", message)


def not_found(message: str) -> ApiError:
    return ApiError(404, "not_found_error", message)


def permission(message: str) -> ApiError:
    return ApiError(403, "permission_error", message)


def rate_limited(message: str, headers: dict[str, str]) -> ApiError:
    return ApiError(429, "rate_limit_error", message, headers=headers)


def from_storage(exc: st.StorageError) -> ApiError:
    if isinstance(exc, st.NotFound):
        return not_found(str(exc))
    if isinstance(exc, st.Invalid):
        return invalid(str(exc))
    if isinstance(exc, st.PathConflict):
        return ApiError(
            409,
            "memory_path_conflict_error",
            str(exc),
            conflicting_memory_id=exc.conflicting_memory_id,
            conflicting_path=exc.conflicting_path,
        )
    if isinstance(exc, st.PreconditionFailed):
        return ApiError(409, "memory_precondition_failed_error", str(exc))
    return ApiError(500, "api_error", "internal error")


def envelope(err: ApiError, request_id: str) -> dict:
    return {
        "type": "error",
        "error": {"type": err.type, "message": err.message, **err.extra},
        "request_id": request_id,
    }
