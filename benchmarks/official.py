"""The official side: `SessionMemoryStores` (anthropic 2.10.0), driven the way `EnvironmentWorker`
drives it (download, sync_if_due, finish, flush_writes, dispose), on a Bearer sub-client built the
way the worker builds it. Two of anthropic's private names are used, both the worker's own way of
doing it: `_copy_client_with_bearer_auth` (how the worker makes the sub-client) and
`SessionMemoryStores._last_sync` (back-dated instead of sleeping out the interval)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.admin import Admin
from benchmarks.config import INTERVAL
from tests.support.proxy import counts_at

REPO = Path(__file__).resolve().parent.parent


def official_client(base_url: str, token: str):
    from anthropic import AsyncAnthropic
    from anthropic.lib._scoped_client import _copy_client_with_bearer_auth

    # The worker's parent client holds the environment key; the memory calls ride a Bearer
    # sub-client made from it with the work item's sessions token (_worker.py).
    parent = AsyncAnthropic(api_key="environment-key-unused", base_url=base_url)
    return _copy_client_with_bearer_auth(parent, auth_token=token, helper="environments-worker")


async def official_open(base_url: str, sess: dict, root: Path):
    """(client, SessionMemoryStores, session) with each store's mount_path moved under `root`."""
    from anthropic.lib.tools._memories import SessionMemoryStores

    client = official_client(base_url, sess["token"])
    session = await client.beta.sessions.retrieve(sess["id"])
    for r in session.resources:
        if r.type == "memory_store":
            r.mount_path = str(root / r.mount_path.rsplit("/", 1)[1])  # /mnt/memory/<slug> -> root/<slug>
    stores = SessionMemoryStores(client, workdir=str(root), sync_interval=INTERVAL)
    return client, stores, session


def make_due(stores) -> None:
    """sync_if_due runs when `sync_interval` has passed since the last sync; back-date the last
    sync instead of sleeping 5 s (the only private attribute the bench touches)."""
    stores._last_sync -= INTERVAL + 1


async def official_teardown(stores, client) -> None:
    # The worker's teardown: finish (clean end), flush_writes, dispose.
    with contextlib.suppress(Exception):
        await stores.finish()
    with contextlib.suppress(Exception):
        await stores.flush_writes()
    with contextlib.suppress(Exception):
        await stores.dispose()
    await client.close()


async def official_download_time(base_url: str, sess: dict, root: Path) -> float:
    client, stores, session = await official_open(base_url, sess, root)
    try:
        t = time.perf_counter()
        await stores.download(session)
        return time.perf_counter() - t
    finally:
        with contextlib.suppress(Exception):
            await stores.dispose()
        await client.close()


def vm_status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    return out


async def official_steady(args: dict) -> dict:
    """Child process: the official worker downloads the session's stores through the counting
    proxy (timed); with `steady`, then idle ticks, one-change ticks and its memory footprint."""
    admin = Admin(args["service_url"])
    root = Path(args["root"])
    client, stores, session = await official_open(args["proxy_url"], args["session"], root)
    out: dict[str, Any] = {"idle": [], "change": []}
    target: dict = args.get("change_target") or {}
    try:
        t = time.perf_counter()
        await stores.download(session)
        out["download_s"] = time.perf_counter() - t
        if not args["steady"]:
            return out
        for _ in range(args["runs"]):
            make_due(stores)
            r0, b0 = admin.requests(), _bytes(args["ctl_port"])
            t = time.perf_counter()
            await stores.sync_if_due()
            dt = time.perf_counter() - t
            out["idle"].append(
                {"s": dt, "requests": admin.requests() - r0, "bytes": _bytes(args["ctl_port"]) - b0}
            )
        for i in range(args["runs"]):
            new = f"official one-change {i} {time.time()}\n" + "x" * 2000
            r0, b0 = admin.requests(), _bytes(args["ctl_port"])  # as memfs's: less the edit itself
            admin.update(target["store_id"], target["memory_id"], new)
            make_due(stores)
            t = time.perf_counter()
            await stores.sync_if_due()
            dt = time.perf_counter() - t
            local = root / target["slug"] / target["path"].lstrip("/")
            ok = local.read_text() == new
            out["change"].append(
                {
                    "s": dt,
                    "requests": admin.requests() - r0 - 1,
                    "bytes": _bytes(args["ctl_port"]) - b0,
                    "visible": ok,
                }
            )
        push = args.get("push_paths")
        if push:  # the worker's path after a tool call that changed files: sync_if_due uploads them
            for label in ("sync_if_due", "flush_writes"):
                token = f"official push {label} {time.time()}\n"
                for slug, path in push:
                    (root / slug / path.lstrip("/")).write_text(token + path + "\n")
                t = time.perf_counter()
                if label == "sync_if_due":
                    make_due(stores)
                    await stores.sync_if_due()
                else:  # the teardown's rescue pass: 32 uploads at a time
                    await stores.flush_writes()
                out[f"push_{label}_s"] = time.perf_counter() - t
                listed = admin.list_basic(args["push_store"])
                out[f"push_{label}_landed"] = sum(
                    1
                    for _slug, path in push
                    if listed[path]["content_sha256"]
                    == hashlib.sha256((token + path + "\n").encode()).hexdigest()
                )
        out["rss"] = vm_status()
        out["disk_bytes"] = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    finally:
        await official_teardown(stores, client)
        admin.close()
    return out


def official_child(args: dict) -> dict:
    """`official_steady` in a child process (`scripts/bench --child-official`), so that the
    official worker's memory footprint is its own."""
    proc = subprocess.run(
        [sys.executable, os.fspath(REPO / "scripts" / "bench"), "--child-official", json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"official child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_child(arg: str) -> None:
    args = json.loads(arg)
    if "hosted" in args:  # the hosted rows' programs (official_hosted.py): JSON lines as they go
        from benchmarks.official_hosted import run

        run(args)
        return
    print(json.dumps(asyncio.run(official_steady(args))))


def _bytes(ctl_port: int) -> int:
    """Bytes both ways through the counting proxy so far (this child has only its control port)."""
    c = counts_at(ctl_port)
    return c["up"] + c["down"]
