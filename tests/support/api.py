"""A small admin-side view of the store service for end-to-end assertions (plain httpx)."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import httpx

MEMORY_BETA = {"anthropic-beta": "agent-memory-2026-07-22"}
SESSION_BETA = {"anthropic-beta": "managed-agents-2026-04-01"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def sessions_token(work_secret: str) -> str:
    """The session token a work secret carries (url-safe base64 of JSON, padding stripped)."""
    return json.loads(base64.urlsafe_b64decode(work_secret + "=" * (-len(work_secret) % 4)))["sessions_token"]


class Api:
    def __init__(self, base_url: str, admin_key: str):
        self.http = httpx.Client(base_url=base_url, headers={"x-api-key": admin_key}, timeout=30)

    def close(self) -> None:
        self.http.close()

    def _ok(self, resp: httpx.Response) -> Any:
        if resp.status_code >= 400:
            raise AssertionError(
                f"{resp.request.method} {resp.request.url} -> {resp.status_code}: {resp.text}"
            )
        return resp.json()

    def create_store(self, name: str) -> str:
        return self._ok(self.http.post("/v1/memory_stores", json={"name": name}, headers=MEMORY_BETA))["id"]

    def stores(self) -> list[dict]:
        """The stores that are not archived (one page of 100: enough for a test)."""
        return self._ok(self.http.get("/v1/memory_stores", params={"limit": 100}, headers=MEMORY_BETA))[
            "data"
        ]

    def create_session(self, stores: list[tuple[str, str]]) -> dict:
        resources = [{"type": "memory_store", "memory_store_id": s, "access": a} for s, a in stores]
        return self._ok(self.http.post("/v1/sessions", json={"resources": resources}, headers=SESSION_BETA))

    def create(self, store: str, path: str, content: str) -> dict:
        return self._ok(
            self.http.post(
                f"/v1/memory_stores/{store}/memories",
                json={"path": path, "content": content},
                headers=MEMORY_BETA,
            )
        )

    def update(self, store: str, memory_id: str, **body: Any) -> dict:
        return self._ok(
            self.http.post(f"/v1/memory_stores/{store}/memories/{memory_id}", json=body, headers=MEMORY_BETA)
        )

    def delete(self, store: str, memory_id: str) -> None:
        self._ok(self.http.delete(f"/v1/memory_stores/{store}/memories/{memory_id}", headers=MEMORY_BETA))

    def get(self, store: str, memory_id: str) -> dict:
        return self._ok(self.http.get(f"/v1/memory_stores/{store}/memories/{memory_id}", headers=MEMORY_BETA))

    def memories(self, store: str) -> dict[str, dict]:
        """path -> full memory (content included)."""
        out: dict[str, dict] = {}
        page = None
        while True:
            params: dict[str, str | int] = {"view": "full", "limit": 20, **({"page": page} if page else {})}
            body = self._ok(
                self.http.get(f"/v1/memory_stores/{store}/memories", params=params, headers=MEMORY_BETA)
            )
            out.update({m["path"]: m for m in body["data"] if m["type"] == "memory"})
            page = body.get("next_page")
            if not page:
                return out

    def contents(self, store: str) -> dict[str, str]:
        return {p: m["content"] for p, m in self.memories(store).items()}

    def versions(self, store: str, memory_id: str) -> list[dict]:
        body = self._ok(
            self.http.get(
                f"/v1/memory_stores/{store}/memory_versions",
                params={"memory_id": memory_id, "limit": 100},
                headers=MEMORY_BETA,
            )
        )
        return body["data"]
