"""The fake platform as a process, for scripts/test-container's worker mode.

    python -m tests.support.run_fake_platform --store-url URL --session-id ID --work-secret S \
        --script steps.json --out result.json

Reads the session's memory stores from the store service (as the real platform knows them), queues
one work item for it, prints `READY <platform url> <work item JSON>` and serves until the work item
is stopped (or --timeout), then writes what happened (tool results, stop requests, errors) to --out.
steps.json: [{"name": "bash", "input": {...}}, ...].
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
import time

import httpx

from tests.support.fake_platform import FakePlatform, PlatformServer, Step


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--store-url", required=True)
    p.add_argument("--session-id", required=True)
    p.add_argument("--work-secret", required=True)
    p.add_argument("--script", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--timeout", type=float, default=240)
    args = p.parse_args()
    secret = args.work_secret
    token = json.loads(base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4)))["sessions_token"]
    session = httpx.get(
        f"{args.store_url}/v1/sessions/{args.session_id}",
        timeout=30,
        headers={"authorization": f"Bearer {token}", "anthropic-beta": "managed-agents-2026-04-01"},
    )
    session.raise_for_status()
    steps = [Step(s["name"], s["input"]) for s in json.load(open(args.script))]
    platform = FakePlatform(ttl_seconds=10)
    stopped = threading.Event()
    at_stop: dict[str, dict[str, str]] = {}
    resources = session.json()["resources"]

    def on_stop(_work) -> None:
        # What the store holds when the worker stops the item: its final sync came before.
        for r in resources:
            page = httpx.get(
                f"{args.store_url}/v1/memory_stores/{r['memory_store_id']}/memories",
                params={"view": "full", "limit": 100},
                timeout=30,
                headers={"authorization": f"Bearer {token}", "anthropic-beta": "agent-memory-2026-07-22"},
            )
            at_stop[r["memory_store_id"]] = {
                m["path"]: m.get("content") for m in page.json().get("data", []) if m.get("type") == "memory"
            }
        stopped.set()

    platform.on_stop = on_stop
    with PlatformServer(platform) as server:
        work = server.call(
            lambda: platform.add_session(
                session_id=args.session_id, resources=resources, script=steps, token=token
            )
        )
        item = {
            "id": work.id,
            "environment_id": work.environment_id,
            "secret": work.secret,
            "data": {"type": "session", "id": work.session_id},
        }
        print("READY", server.base_url, json.dumps(item), flush=True)
        ok = stopped.wait(args.timeout)
        time.sleep(0.5)  # the stop's answer goes out
        state = server.call(
            lambda: {
                "stopped": ok,
                "stop_requests": work.stop_requests,
                "results": platform.sessions[args.session_id].results,
                "errors": platform.errors,
                "at_stop": at_stop,
            }
        )
    json.dump(state, open(args.out, "w"), indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
