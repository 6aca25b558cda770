"""The admin helpers `memfs store create|list` and `memfs session create`: requests to a running
service with its admin key, sent by the store client (memfs/client/api.py `StoreClient`, the
one way memfs speaks to a store service: the environment's proxy, CA settings, timeouts and
retries as for every other request)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from memfs.limits import MAX_STORES_PER_SESSION
from memfs.protocol import MEMORY_BETA, SESSIONS_BETA, SESSIONS_PATH, STORES_PATH, is_access

DEFAULT_BASE_URL = "http://127.0.0.1:8470"
TIMEOUT_S = 30.0


def register(sub: argparse._SubParsersAction) -> None:
    store = sub.add_parser("store", help="manage memory stores (admin, over HTTP)")
    store_sub = store.add_subparsers(dest="store_command", required=True, metavar="COMMAND")
    c = store_sub.add_parser("create", help="create a memory store")
    c.add_argument("name", help="the new store's name")
    c.add_argument("--description", default=None, help="the new store's description (default: none)")
    _client_args(c)
    c.set_defaults(func=_store_create)
    ls = store_sub.add_parser("list", help="list memory stores")
    ls.add_argument(
        "--include-archived", action="store_true", help="list archived stores too (default: only live ones)"
    )
    _client_args(ls)
    ls.set_defaults(func=_store_list)

    session = sub.add_parser("session", help="manage sessions (admin, over HTTP)")
    session_sub = session.add_subparsers(dest="session_command", required=True, metavar="COMMAND")
    sc = session_sub.add_parser("create", help="create a session attaching memory stores")
    sc.add_argument(
        "--store",
        action="append",
        default=[],
        metavar="ID[:read_only]",
        help=f"attach a store (repeat, up to {MAX_STORES_PER_SESSION}); ':read_only' or ':read_write' sets access",
    )
    _client_args(sc)
    sc.set_defaults(func=_session_create)


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--base-url",
        default=None,
        help=f"service URL (default: $ANTHROPIC_BASE_URL, else {DEFAULT_BASE_URL})",
    )
    p.add_argument("--admin-key", default=None, help="admin key (default: $MEMFS_ADMIN_KEY)")
    p.add_argument("--json", action="store_true", help="print the JSON response")


class _Failed(Exception):
    pass


def _request(
    args: argparse.Namespace, method: str, path: str, beta: str, body: dict | None = None, params: Any = None
) -> dict:
    """One call of the API with the admin key, through the store client; its JSON object."""
    base = (args.base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    key = args.admin_key or os.environ.get("MEMFS_ADMIN_KEY")
    if not key:
        raise _Failed("no admin key: pass --admin-key or set MEMFS_ADMIN_KEY")
    from memfs.session._trio import import_trio_without_ldconfig

    import_trio_without_ldconfig()
    import trio

    from memfs.client.api import StoreClient
    from memfs.client.errors import ApiError, Unreachable

    async def call() -> Any:
        async with StoreClient(base, key, api_key=True, timeout=TIMEOUT_S) as client:
            return await client.call(method, path, beta=beta, json=body, params=params)

    try:
        data = trio.run(call)
    except Unreachable as e:
        raise _Failed(f"cannot reach the memfs service at {base}: {e}") from None
    except ApiError as e:
        raise _Failed(f"{method} {path} failed: HTTP {e.status}: {e.message or e.type}") from None
    if not isinstance(data, dict):
        raise _Failed(f"{method} {path}: the service answered something that is not a JSON object")
    return data


def _run(fn) -> int:
    try:
        return fn()
    except _Failed as e:
        print(f"memfs: {e}", file=sys.stderr)
        return 1


def _store_create(args: argparse.Namespace) -> int:
    def go() -> int:
        body: dict = {"name": args.name}
        if args.description is not None:
            body["description"] = args.description
        store = _request(args, "POST", STORES_PATH, MEMORY_BETA, body)
        print(json.dumps(store, indent=2) if args.json else store["id"])
        return 0

    return _run(go)


def _store_list(args: argparse.Namespace) -> int:
    def go() -> int:
        stores: list[dict] = []
        page = None
        while True:
            params: dict[str, Any] = {"limit": 100}
            if args.include_archived:
                params["include_archived"] = "true"
            if page:
                params["page"] = page
            data = _request(args, "GET", STORES_PATH, MEMORY_BETA, params=params)
            stores += data.get("data", [])
            page = data.get("next_page")
            if not page:
                break
        if args.json:
            print(json.dumps(stores, indent=2))
        else:
            for s in stores:
                flag = "  (archived)" if s.get("archived_at") else ""
                print(f"{s['id']}  {s['name']}{flag}")
        return 0

    return _run(go)


def _parse_store_arg(value: str) -> dict:
    store_id, _, access = value.partition(":")
    access = access or "read_write"
    if not store_id or not is_access(access):
        raise _Failed(f"--store {value!r}: expected ID, ID:read_only or ID:read_write")
    return {"type": "memory_store", "memory_store_id": store_id, "access": access}


def _session_create(args: argparse.Namespace) -> int:
    def go() -> int:
        if len(args.store) > MAX_STORES_PER_SESSION:
            raise _Failed(f"at most {MAX_STORES_PER_SESSION} --store options")
        resources = [_parse_store_arg(v) for v in args.store]
        session = _request(args, "POST", SESSIONS_PATH, SESSIONS_BETA, {"resources": resources})
        if args.json:
            print(json.dumps(session, indent=2))
        else:
            print(f"session_id: {session['id']}")
            print(f"work_secret: {session['work_secret']}")
            for r in session.get("resources", []):
                print(f"  {r['mount_path']}  {r['memory_store_id']}  {r['access']}")
        return 0

    return _run(go)
