"""Test stores at the engine's `StoreApi` port (memfs/sync/ports.py), as Mountpoint for S3 has a real,
a mock and a failure client behind one trait.

- The real one: `StoreClient`, over the network or over the service app in process
  (tests/support/inprocess.py builds it over httpx's ASGI transport: every byte of the client's
  requests and the service's answers is real, only the socket is not).
- `FailingStore`: a `StoreApi` that wraps another and answers the calls a test names with a failure
  instead of passing them on: `Unreachable` (no whole answer), an `ApiError` 429 with a
  retry-after, a 5xx, a refusal. It stands where a fault reaches the engine: after the client's own
  retries (a short retry-after is retried inside the client and never gets here), so a test says
  what the engine does with what the store raised, without spelling HTTP. Faults the client must
  handle (headers, dropped connections, retries) stay with `FaultTransport`, in front of the app.

Every call that reaches the wrapper is recorded (`calls`), failed or passed on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from memfs.client.errors import ApiError, Unreachable
from memfs.client.records import Changes, Listing
from memfs.client.snapshot_stream import SnapshotSink
from memfs.protocol import WriteReason
from memfs.sync.ports import Budget, StoreApi

# The calls of the `StoreApi` port a fault can be put on (its async methods).
CALLS = frozenset(
    {
        "counters",
        "watch",
        "changes",
        "snapshot",
        "list_memories",
        "list_versions",
        "get_memory",
        "create_memory",
        "update_memory",
        "delete_memory",
        "write_batch",
    }
)


def unreachable(what: str = "connection dropped (injected)") -> Unreachable:
    return Unreachable(what)


def rate_limited(retry_after: float) -> ApiError:
    """A 429 whose retry-after is longer than the client retries inside a request (as it reaches
    the engine: the client gave up on it and holds its later requests)."""
    body = {"type": "error", "error": {"type": "rate_limit_error", "message": "injected 429"}}
    return ApiError(429, "rate_limit_error", "injected 429", body, retry_after)


def server_error(status: int = 503, retry_after: float | None = None) -> ApiError:
    body = {"type": "error", "error": {"type": "api_error", "message": f"injected {status}"}}
    return ApiError(status, "api_error", f"injected {status}", body, retry_after)


def refused(status: int = 400, message: str = "injected refusal") -> ApiError:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return ApiError(status, "invalid_request_error", message, body)


@dataclass
class StoreFault:
    """One rule: the `call` (on `store_id`, any store when None) raises `error`, `times` times
    (None: every time)."""

    call: str
    error: Exception
    store_id: str | None = None
    times: int | None = 1
    hits: int = 0

    def matches(self, call: str, store_id: str | None) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        return call == self.call and (self.store_id is None or store_id == self.store_id)


@dataclass
class FailingStore:
    """A `StoreApi` over `inner`: the faults first, then `inner` (Mountpoint's failure client)."""

    inner: StoreApi
    faults: list[StoreFault] = field(default_factory=list)
    calls: list[tuple[str, str | None]] = field(default_factory=list)  # (call, store id), in order

    def fail(
        self, call: str, error: Exception, *, store_id: str | None = None, times: int | None = 1
    ) -> StoreFault:
        if call not in CALLS:
            raise ValueError(f"{call!r} is not a call of the StoreApi port ({', '.join(sorted(CALLS))})")
        fault = StoreFault(call, error, store_id, times)
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        self.faults.clear()
        self.calls.clear()

    def count(self, call: str, store_id: str | None = None) -> int:
        return sum(1 for c, s in self.calls if c == call and (store_id is None or s == store_id))

    def _check(self, call: str, store_id: str | None = None) -> None:
        self.calls.append((call, store_id))
        for fault in self.faults:
            if fault.matches(call, store_id):
                fault.hits += 1
                raise fault.error

    # -- the port: what the engine reads of the store itself ----------------------------------
    @property
    def requests_sent(self) -> int:
        return self.inner.requests_sent

    @property
    def concurrency(self) -> int:
        return self.inner.concurrency

    @property
    def budget(self) -> Budget:
        return self.inner.budget

    # -- the port: its calls --------------------------------------------------------------------
    async def counters(self, store_ids: Iterable[str]) -> dict[str, int] | None:
        self._check("counters")
        return await self.inner.counters(store_ids)

    async def watch(self, known: dict[str, int], wait: float = 30.0) -> tuple[bool, dict[str, int]] | None:
        self._check("watch")
        return await self.inner.watch(known, wait)

    async def changes(self, store_id: str, since: int) -> Changes | None:
        self._check("changes", store_id)
        return await self.inner.changes(store_id, since)

    async def snapshot(self, store_id: str, sink: SnapshotSink) -> int | None:
        self._check("snapshot", store_id)
        return await self.inner.snapshot(store_id, sink)

    async def list_memories(
        self,
        store_id: str,
        *,
        view: str = "basic",
        known: dict[str, int] | None = None,
        on_page: Callable[[list[dict[str, Any]]], Awaitable[None]] | None = None,
    ) -> Listing:
        self._check("list_memories", store_id)
        return await self.inner.list_memories(store_id, view=view, known=known, on_page=on_page)

    async def list_versions(
        self, store_id: str, params: dict[str, str | int]
    ) -> tuple[dict[str, Any], str | None]:
        self._check("list_versions", store_id)
        return await self.inner.list_versions(store_id, params)

    async def get_memory(self, store_id: str, memory_id: str) -> dict[str, Any]:
        self._check("get_memory", store_id)
        return await self.inner.get_memory(store_id, memory_id)

    async def get_store(self, store_id: str) -> dict[str, Any]:
        self._check("get_store", store_id)
        return await self.inner.get_store(store_id)

    async def create_memory(
        self, store_id: str, path: str, content: str, *, reason: WriteReason | None = None
    ) -> dict[str, Any]:
        self._check("create_memory", store_id)
        return await self.inner.create_memory(store_id, path, content, reason=reason)

    async def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        expected_sha: str,
        content: str | None = None,
        path: str | None = None,
        reason: WriteReason | None = None,
    ) -> dict[str, Any]:
        self._check("update_memory", store_id)
        return await self.inner.update_memory(
            store_id, memory_id, expected_sha=expected_sha, content=content, path=path, reason=reason
        )

    async def delete_memory(self, store_id: str, memory_id: str, *, expected_sha: str | None) -> None:
        self._check("delete_memory", store_id)
        await self.inner.delete_memory(store_id, memory_id, expected_sha=expected_sha)

    async def write_batch(self, store_id: str, ops: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        self._check("write_batch", store_id)
        return await self.inner.write_batch(store_id, ops)


def _is_a_store(s: FailingStore) -> StoreApi:
    return s  # mypy: the wrapper has every call of the port, with the port's signatures
