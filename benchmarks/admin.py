"""The service as the bench's admin sees it: its public HTTP API and /metrics, nothing else."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import httpx

from benchmarks.config import ADMIN_KEY
from tests.support.service import MEMORY_BETA, SESSIONS_BETA

MEMORY_HEADERS = {"anthropic-beta": MEMORY_BETA}
SESSION_HEADERS = {"anthropic-beta": SESSIONS_BETA}


class Admin:
    def __init__(self, base_url: str):
        self.base_url = base_url
        self.http = httpx.Client(base_url=base_url, headers={"x-api-key": ADMIN_KEY}, timeout=60)

    def close(self) -> None:
        self.http.close()

    def _ok(self, r: httpx.Response) -> Any:
        if r.status_code >= 400:
            raise RuntimeError(f"{r.request.method} {r.request.url} -> {r.status_code}: {r.text[:300]}")
        return r.json()

    def create_store(self, name: str) -> str:
        return self._ok(self.http.post("/v1/memory_stores", json={"name": name}, headers=MEMORY_HEADERS))[
            "id"
        ]

    def session(self, store_ids: list[str]) -> dict:
        res = [{"type": "memory_store", "memory_store_id": s, "access": "read_write"} for s in store_ids]
        body = self._ok(self.http.post("/v1/sessions", json={"resources": res}, headers=SESSION_HEADERS))
        secret = body["work_secret"]
        token = json.loads(base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4)))
        return {
            "id": body["id"],
            "work_secret": secret,
            "token": token["sessions_token"],
            "slugs": [r["mount_path"].rsplit("/", 1)[1] for r in body["resources"]],
            "store_ids": [r["memory_store_id"] for r in body["resources"]],
        }

    def list_basic(self, store_id: str) -> dict[str, dict]:
        out: dict[str, dict] = {}
        page = None
        while True:
            params: dict[str, Any] = {"view": "basic", "limit": 100}
            if page:
                params["page"] = page
            body = self._ok(
                self.http.get(f"/v1/memory_stores/{store_id}/memories", params=params, headers=MEMORY_HEADERS)
            )
            out.update({m["path"]: m for m in body["data"] if m["type"] == "memory"})
            page = body.get("next_page")
            if not page:
                return out

    def create(self, store_id: str, path: str, content: str) -> dict:
        return self._ok(
            self.http.post(
                f"/v1/memory_stores/{store_id}/memories",
                json={"path": path, "content": content},
                headers=MEMORY_HEADERS,
            )
        )

    def contents(self, store_id: str) -> dict[str, str]:
        """Every memory's content by path (one GET per memory: for small stores)."""
        out = {}
        for path, m in self.list_basic(store_id).items():
            body = self._ok(
                self.http.get(f"/v1/memory_stores/{store_id}/memories/{m['id']}", headers=MEMORY_HEADERS)
            )
            out[path] = body["content"]
        return out

    def update(self, store_id: str, memory_id: str, content: str) -> dict:
        return self._ok(
            self.http.post(
                f"/v1/memory_stores/{store_id}/memories/{memory_id}",
                json={"content": content},
                headers=MEMORY_HEADERS,
            )
        )

    def requests_by_route(self) -> dict[str, int]:
        """Requests the service answered so far, by route template (/metrics itself left out).
        prometheus_client writes a counter's value as a float (`… 3.0`): read as one, or nothing
        matches and every row that subtracts two readings says 0 requests."""
        text = self.http.get("/metrics").text
        out: dict[str, int] = {}
        for m in re.finditer(
            r'^memfs_http_requests_total\{method="\w+",route="([^"]*)",status="\d+"\} (\S+)$', text, re.M
        ):
            if m.group(1) != "/metrics":
                out[m.group(1)] = out.get(m.group(1), 0) + int(float(m.group(2)))
        return out

    def requests(self, *, but: tuple[str, ...] = ()) -> int:
        """Requests the service answered so far (/metrics itself, and the routes `but`, left out)."""
        return sum(n for route, n in self.requests_by_route().items() if route not in but)

    def org_requests(self) -> dict[str, int]:
        """What the emulator's per-organisation limits counted so far (`memfs serve --hosted-api`):
        {"read_ok", "read_limited", "write_ok", "write_limited", "total", "limited"}."""
        text = self.http.get("/metrics").text
        out = {f"{c}_{o}": 0 for c in ("read", "write") for o in ("ok", "limited")}
        for m in re.finditer(
            r'^memfs_org_requests_total\{class="(\w+)",outcome="(\w+)"\} (\S+)$', text, re.M
        ):
            out[f"{m.group(1)}_{m.group(2)}"] = int(float(m.group(3)))
        out["total"] = sum(out.values())
        out["limited"] = out["read_limited"] + out["write_limited"]
        return out
