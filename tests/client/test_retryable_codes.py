"""The error codes anthropic 2.16 names as retryable: 400 `request_body_timeout` (the body arrived too
slowly, nothing was done) and 503 `storage_not_ready`. The mount's client retries them like a 429, and
a push they answer is a failed tick (tried again), never a refusal remembered against the file."""

from __future__ import annotations

import httpx
import pytest
import trio

from memfs.client import StoreClient
from memfs.client.errors import ApiError

pytestmark = pytest.mark.timeout(30)


def _error(status: int, type_: str, code: str | None, **headers: str) -> httpx.Response:
    error: dict = {"type": type_, "message": "no"}
    if code is not None:
        error["details"] = {"error_code": code}
    return httpx.Response(status, json={"type": "error", "error": error}, headers=headers)


def _create(first: httpx.Response) -> tuple[dict | ApiError, int, int]:
    answers = [first, httpx.Response(200, json={"id": "mem_1", "path": "/a.md"})]
    sent = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answers[min(len(sent) - 1, 1)]

    async def main() -> dict | ApiError:
        async with StoreClient("http://svc.test", "t", transport=httpx.MockTransport(answer)) as c:
            try:
                return await c.create_memory("memstore_x", "/a.md", "hi")
            finally:
                nonlocal retried
                retried = c.retried

    retried = 0
    try:
        got: dict | ApiError = trio.run(main)
    except ApiError as exc:
        got = exc
    return got, len(sent), retried


@pytest.mark.parametrize(
    "status,type_,code",
    [(400, "invalid_request_error", "request_body_timeout"), (503, "api_error", "storage_not_ready")],
)
def test_a_retryable_code_is_sent_again_after_its_retry_after(status, type_, code):
    got, sent, retried = _create(_error(status, type_, code, **{"retry-after-ms": "10"}))
    assert got == {"id": "mem_1", "path": "/a.md"} and sent == 2 and retried == 1


def test_without_a_short_retry_after_it_fails_the_request_as_retryable_not_refused():
    got, sent, _ = _create(_error(400, "invalid_request_error", "request_body_timeout"))
    assert isinstance(got, ApiError) and sent == 1
    assert got.retryable and not got.refused  # the tick fails and is tried again; the file is not refused


def test_another_400_is_still_a_refusal():
    got, sent, _ = _create(_error(400, "invalid_request_error", None, **{"retry-after-ms": "10"}))
    assert isinstance(got, ApiError) and sent == 1
    assert got.refused and not got.retryable
    other_code = ApiError(400, "invalid_request_error", "no", {"error": {"details": {"error_code": "x"}}})
    assert other_code.refused and not other_code.retryable
