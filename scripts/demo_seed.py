"""Seed the demo: two stores with a few memories (created once), and a fresh session attaching both.

Prints `SESSION_ID WORK_SECRET` on stdout for scripts/run. Idempotent: stores and memories that
already exist are reused.
"""

from __future__ import annotations

import os
import sys

import httpx

DEMO = {
    "demo-notes": {
        "description": "A read-write demo store",
        "access": "read_write",
        "memories": {
            "/notes/todo.md": "# TODO\n- try `ls /mnt/memory/demo-notes`\n- edit this file and run `memfs sync`\n",
            "/notes/ideas.md": "Ideas worth keeping across sessions.\n",
            "/profile/user.md": "The user prefers concise answers.\n",
        },
    },
    "team-handbook": {
        "description": "A read-only demo store",
        "access": "read_only",
        "memories": {
            "/handbook/style.md": "Write short sentences. Name things for what they hold.\n",
            "/handbook/oncall.md": "Page the on-call engineer only for user-visible outages.\n",
        },
    },
}


def main() -> int:
    base = sys.argv[1]
    key = os.environ["MEMFS_ADMIN_KEY"]
    mem = httpx.Client(base_url=base, headers={"x-api-key": key, "anthropic-beta": "agent-memory-2026-07-22"})
    ses = httpx.Client(
        base_url=base, headers={"x-api-key": key, "anthropic-beta": "managed-agents-2026-04-01"}
    )
    existing = {}
    page = None
    while True:
        params = {"limit": 100, **({"page": page} if page else {})}
        body = mem.get("/v1/memory_stores", params=params).raise_for_status().json()
        existing.update({s["name"]: s["id"] for s in body["data"]})
        page = body.get("next_page")
        if not page:
            break
    resources = []
    for name, spec in DEMO.items():
        store_id = existing.get(name)
        if store_id is None:
            store_id = (
                mem.post("/v1/memory_stores", json={"name": name, "description": spec["description"]})
                .raise_for_status()
                .json()["id"]
            )
        for path, content in spec["memories"].items():
            r = mem.post(f"/v1/memory_stores/{store_id}/memories", json={"path": path, "content": content})
            if r.status_code != 409:  # 409: already seeded by an earlier run
                r.raise_for_status()
        resources.append({"type": "memory_store", "memory_store_id": store_id, "access": spec["access"]})
    session = ses.post("/v1/sessions", json={"resources": resources}).raise_for_status().json()
    print(session["id"], session["work_secret"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
