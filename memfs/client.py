"""Async HTTP client for the store API and memfs's extensions (counter, changes, snapshot).

Used by the mount and the sync engine. It never retries: a failed request fails the tick, which
counts as an attempt (SPEC §5.4); a 409 is an answer, not a fault (SPEC §5.3).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

MEMORY_BETA = "agent-memory-2026-07-22"
SESSIONS_BETA = "managed-agents-2026-04-01"
COUNTER_HEADER = "memfs-store-counter"


class ApiError(Exception):
    """The service answered with an error status."""

    def __init__(self, status: int, type_: str, message: str, body: Any = None):
        super().__init__(f"{status} {type_}: {message}")
        self.status = status
        self.type = type_
        self.message = message
        self.body = body

    @property
    def retryable(self) -> bool:
        return self.status in (408, 429) or self.status >= 500

    @property
    def refused(self) -> bool:
        """The service will never accept this request as it is (bad path, too big, not UTF-8...)."""
        return self.status in (400, 413, 422)


class Unreachable(Exception):
    """No answer: connection refused or reset, timeout, truncated body."""


@dataclass(frozen=True)
class Change:
    memory_id: str
    operation: str  # "upserted" | "deleted"
    path: str
    previous_path: str | None
    sha: str | None
    size: int | None
    updated_at: str | None


@dataclass(frozen=True)
class Changes:
    counter: int
    too_old: bool
    changes: list[Change]


def sessions_token_from_secret(secret: str | None) -> str | None:
    """The `sessions_token` inside a work secret (url-safe base64 JSON, padding optional)."""
    if not secret:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4)))
    except (ValueError, TypeError):
        return None
    token = payload.get("sessions_token") if isinstance(payload, dict) else None
    return token if isinstance(token, str) and token else None


class StoreClient:
    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0, concurrency: int = 8):
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"authorization": f"Bearer {token}", "anthropic-beta": MEMORY_BETA},
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            # An http:// service never does TLS (redirects are not followed), so don't build a
            # verifying SSL context: loading the CA bundle costs ~0.25 s of every mount's start.
            verify=self.base_url.startswith("https:"),
        )
        self.requests_sent = 0

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> StoreClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        self.requests_sent += 1
        try:
            resp = await self._http.request(method, url, **kw)
        except httpx.HTTPError as exc:
            raise Unreachable(f"{method} {url}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code >= 400:
            raise _api_error(resp)
        return resp

    async def _json(self, method: str, url: str, **kw: Any) -> Any:
        resp = await self._request(method, url, **kw)
        try:
            return resp.json()
        except ValueError as exc:
            raise Unreachable(f"{method} {url}: answer is not JSON") from exc

    # -- sessions ---------------------------------------------------------------------------
    async def get_session(self, session_id: str) -> dict[str, Any]:
        return await self._json("GET", f"/v1/sessions/{session_id}", headers={"anthropic-beta": SESSIONS_BETA})

    # -- counter extension ------------------------------------------------------------------
    async def counters(self, store_ids: Iterable[str]) -> dict[str, int] | None:
        """Counters of several stores in one request; None when the service has no counter (§5.8)."""
        ids = list(store_ids)
        try:
            body = await self._json("GET", "/v1/memory_store_counters", params={"ids": ",".join(ids)})
        except ApiError as exc:
            if exc.status in (404, 405):
                return None
            raise
        return {item["memory_store_id"]: int(item["counter"]) for item in body["data"]}

    async def watch(self, known: dict[str, int], wait: float = 30.0) -> tuple[bool, dict[str, int]] | None:
        """Held until a store's counter differs from `known` (changed True) or `wait` seconds
        (≤ 60) pass (False), with the stores' current counters; None when the service has no watch."""
        params = {"known": ",".join(f"{sid}:{n}" for sid, n in known.items()), "wait": f"{wait:g}"}
        # The read timeout must outlast the hold; connect/write keep the client's own.
        timeout = httpx.Timeout(self._http.timeout.connect, read=wait + 10.0)
        try:
            body = await self._json("GET", "/v1/memory_store_watch", params=params, timeout=timeout)
        except ApiError as exc:
            # No watch here (a hosted-API-only service): no route. A 404 naming a store is raised.
            if exc.status == 405 or (exc.status == 404 and exc.message.startswith("no such endpoint")):
                return None
            raise
        counters = {item["memory_store_id"]: int(item["counter"]) for item in body["data"]}
        return body["status"] == "changed", counters

    async def changes(self, store_id: str, since: int) -> Changes | None:
        """Changes since a counter; None when the service has no feed."""
        try:
            body = await self._json("GET", f"/v1/memory_stores/{store_id}/changes", params={"since": since})
        except ApiError as exc:
            # Only asked after `counters` worked; a 404 here means no feed: the caller lists.
            if exc.status in (404, 405):
                return None
            raise
        changes = [
            Change(
                memory_id=c["memory_id"],
                operation=c["operation"],
                path=c["path"],
                previous_path=c.get("previous_path"),
                sha=c.get("content_sha256"),
                size=c.get("content_size_bytes"),
                updated_at=c.get("updated_at"),
            )
            for c in body.get("changes", [])
        ]
        return Changes(counter=int(body["counter"]), too_old=body.get("status") == "too_old", changes=changes)

    async def snapshot(self, store_id: str) -> tuple[int, list[dict[str, Any]]] | None:
        """Every memory with content at one counter, in one streamed request; None without the endpoint."""
        self.requests_sent += 1
        url = f"/v1/memory_stores/{store_id}/snapshot"
        try:
            async with self._http.stream("GET", url) as resp:
                if resp.status_code in (404, 405):
                    # No snapshot endpoint (or no such store: the listing that follows says so).
                    await resp.aread()
                    return None
                if resp.status_code >= 400:
                    await resp.aread()
                    raise _api_error(resp)
                header: dict[str, Any] | None = None
                memories: list[dict[str, Any]] = []
                ended = False
                async for line in resp.aiter_lines():
                    if not line.strip():
                        continue
                    item = orjson.loads(line)  # a first download's hot loop: see the service's snapshot
                    kind = item.get("type")
                    if kind == "memory_store_snapshot":
                        header = item
                    elif kind == "memory":
                        memories.append(item)
                    elif kind == "snapshot_end":
                        ended = int(item.get("count", -1)) == len(memories)
        except httpx.HTTPError as exc:
            raise Unreachable(f"GET {url}: {type(exc).__name__}: {exc}") from exc
        except ValueError as exc:
            raise Unreachable(f"GET {url}: malformed snapshot line") from exc
        if header is None or not ended:
            raise Unreachable(f"GET {url}: snapshot stream was truncated")
        return int(header["counter"]), memories

    # -- memories ---------------------------------------------------------------------------
    async def list_memories(self, store_id: str, *, view: str = "basic") -> tuple[list[dict[str, Any]], int | None]:
        """Every memory of a store (all pages). With a counter header, pages must agree on it;
        a listing that straddled a write is read again (at most 3 times), so the result is one snapshot."""
        limit = 100 if view == "basic" else 20
        for _attempt in range(3):
            items: list[dict[str, Any]] = []
            page: str | None = None
            counters: set[str] = set()
            while True:
                params: dict[str, Any] = {"view": view, "limit": limit}
                if page:
                    params["page"] = page
                resp = await self._request("GET", f"/v1/memory_stores/{store_id}/memories", params=params)
                body = resp.json()
                if COUNTER_HEADER in resp.headers:
                    counters.add(resp.headers[COUNTER_HEADER])
                items.extend(i for i in body["data"] if i.get("type") == "memory")
                page = body.get("next_page")
                if not page:
                    break
            if len(counters) <= 1:
                return items, (int(counters.pop()) if counters else None)
        raise Unreachable(f"listing of {store_id} kept changing while it was read")

    async def get_memory(self, store_id: str, memory_id: str) -> dict[str, Any]:
        return await self._json("GET", f"/v1/memory_stores/{store_id}/memories/{memory_id}", params={"view": "full"})

    async def create_memory(self, store_id: str, path: str, content: str) -> dict[str, Any]:
        return await self._json(
            "POST", f"/v1/memory_stores/{store_id}/memories", json={"path": path, "content": content}
        )

    async def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        expected_sha: str,
        content: str | None = None,
        path: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"precondition": {"type": "content_sha256", "content_sha256": expected_sha}}
        if content is not None:
            body["content"] = content
        if path is not None:
            body["path"] = path
        return await self._json("POST", f"/v1/memory_stores/{store_id}/memories/{memory_id}", json=body)

    async def delete_memory(self, store_id: str, memory_id: str, *, expected_sha: str | None) -> None:
        params = {"expected_content_sha256": expected_sha} if expected_sha else None
        await self._request("DELETE", f"/v1/memory_stores/{store_id}/memories/{memory_id}", params=params)


def _api_error(resp: httpx.Response) -> ApiError:
    try:
        body = resp.json()
        err = body.get("error", {}) if isinstance(body, dict) else {}
        return ApiError(resp.status_code, str(err.get("type", "error")), str(err.get("message", "")), body)
    except ValueError:
        return ApiError(resp.status_code, "error", resp.text[:200])
