"""A writer process for the concurrency test: `python concurrent_writer.py BASE_URL KEY STORE MODE TAG N`.

MODE "mixed" does creates, updates, renames and deletes under /TAG/; MODE "race" tries to create
/race/0 … /race/N-1, which another writer races for. Prints one JSON line of what was acknowledged.
"""

from __future__ import annotations

import json
import sys

import httpx


def main() -> None:
    base_url, key, store, mode, tag, n = sys.argv[1:7]
    n = int(n)
    acked, conflicts, errors = 0, 0, []
    headers = {"x-api-key": key, "anthropic-beta": "agent-memory-2026-07-22"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as c:
        mems = f"/v1/memory_stores/{store}/memories"
        ids: dict[int, str] = {}

        def note(r: httpx.Response) -> dict | None:
            nonlocal acked, conflicts
            if r.status_code == 200:
                acked += 1
                return r.json()
            if r.status_code == 409:
                conflicts += 1
            else:
                errors.append(f"{r.status_code} {r.text[:200]}")
            return None

        for i in range(n):
            if mode == "race":
                note(c.post(mems, json={"path": f"/race/{i}", "content": tag}))
            elif i < n * 6 // 10:
                m = note(c.post(mems, json={"path": f"/{tag}/{i}", "content": f"v1 {i}"}))
                if m:
                    ids[i] = m["id"]
            elif i < n * 8 // 10:
                j = i - n * 6 // 10
                note(c.post(f"{mems}/{ids[j]}", json={"content": f"v2 {j}"}))
            elif i < n * 9 // 10:
                j = i - n * 6 // 10
                note(c.post(f"{mems}/{ids[j]}", json={"path": f"/{tag}/renamed/{j}"}))
            else:
                j = i - n * 6 // 10
                note(c.delete(f"{mems}/{ids[j]}"))
    print(json.dumps({"acked": acked, "conflicts": conflicts, "errors": errors}))


if __name__ == "__main__":
    main()
