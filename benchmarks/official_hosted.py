"""The official worker's side of the hosted rows (`scripts/bench --only hosted`), in a child process
(`scripts/bench --child-official '{"hosted": …}'`) against an emulator of its own, so that its
requests are counted apart from memfs's (the emulator's /metrics) and the two sides can run at once.

`SessionMemoryStores` at the worker's default interval (15 s, `DEFAULT_MEMORY_SYNC_INTERVAL`),
driven as `EnvironmentWorker` drives it: `sync_if_due()` before each tool call. Two programs:

- "rows": download; an idle window (nothing called: the worker sends nothing while its agent is
  idle); an active window (a tool call every 2 s, `sync_if_due` before each); then, when the
  parent says so on stdin (the timed row runs alone), one remote edit at a time until readable.
- "fleet": N sessions at once, each its own Bearer client, downloaded together, then agents active
  for a window while the child edits a memory every few seconds and checks when each edit is
  readable in each sandbox's copy.

Each phase prints one JSON line on stdout; the parent reads them in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.admin import Admin
from benchmarks.official import official_client

AGENT_PERIOD_S = 2.0  # a tool call every 2 s


def _emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


async def _open(base_url: str, sess: dict, root: Path):
    from anthropic.lib.tools._memories import DEFAULT_MEMORY_SYNC_INTERVAL, SessionMemoryStores

    client = official_client(base_url, sess["token"])
    session = await client.beta.sessions.retrieve(sess["id"])
    for r in session.resources:
        if r.type == "memory_store":
            r.mount_path = str(root / r.mount_path.rsplit("/", 1)[1])
    stores = SessionMemoryStores(client, workdir=str(root), sync_interval=DEFAULT_MEMORY_SYNC_INTERVAL)
    return client, stores, session


async def _close(client, stores) -> None:
    with contextlib.suppress(Exception):
        await stores.dispose()
    await client.close()


def _window(admin: Admin, before: dict[str, int], seconds: float) -> dict[str, Any]:
    after = admin.org_requests()
    return {
        "seconds": seconds,
        "requests": after["total"] - before["total"],
        "limited": after["limited"] - before["limited"],
    }


async def _active(stores, seconds: float) -> tuple[int, list[str]]:  # the "rows" program's agent
    """`sync_if_due` before a tool call every 2 s for `seconds`: (calls, errors)."""
    calls, errors = 0, []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            await stores.sync_if_due()
        except Exception as e:  # a 429 past the client's retries: the worker logs it and goes on
            errors.append(type(e).__name__)
        calls += 1
        await asyncio.sleep(max(0.0, AGENT_PERIOD_S - (time.monotonic() - started)))
    return calls, errors


async def rows(args: dict) -> None:
    admin = Admin(args["service_url"])
    root = Path(args["root"])
    client, stores, session = await _open(args["proxy_url"], args["session"], root)
    try:
        c0 = admin.org_requests()
        t = time.perf_counter()
        await stores.download(session)
        download = {"s": time.perf_counter() - t, **_window(admin, c0, 0)}
        c0 = admin.org_requests()
        await asyncio.sleep(args["idle_s"])
        idle = _window(admin, c0, args["idle_s"])
        c0 = admin.org_requests()
        calls, errors = await _active(stores, args["active_s"])
        active = {**_window(admin, c0, args["active_s"]), "calls": calls, "errors": errors}
        _emit({"phase": "windows", "download": download, "idle": idle, "active": active})
        await asyncio.to_thread(sys.stdin.readline)  # the parent's go for the timed row
        edits = []
        target = args["change_target"]
        for i in range(args["runs"]):
            new = f"official hosted edit {i} {time.time()}\n" + "x" * 2000
            admin.update(target["store_id"], target["memory_id"], new)
            stores._last_sync -= 3600  # due now (as benchmarks.official.make_due)
            c0 = admin.org_requests()
            t = time.perf_counter()
            await stores.sync_if_due()
            dt = time.perf_counter() - t
            local = root / target["slug"] / target["path"].lstrip("/")
            edits.append({"s": dt, **_window(admin, c0, dt), "visible": local.read_text() == new})
        _emit({"phase": "edit", "edit": edits})
    finally:
        await _close(client, stores)
        admin.close()


async def fleet(args: dict) -> None:
    admin = Admin(args["service_url"])
    root = Path(args["root"])
    opened = [await _open(args["proxy_url"], s, root / f"sb{i}") for i, s in enumerate(args["sessions"])]
    try:
        c0 = admin.org_requests()
        t = time.perf_counter()
        results = await asyncio.gather(*(st.download(se) for _c, st, se in opened), return_exceptions=True)
        failed = [type(r).__name__ for r in results if isinstance(r, BaseException)]
        download = {"s": time.perf_counter() - t, "failed": failed, **_window(admin, c0, 0)}
        c0 = admin.org_requests()
        edits: list[dict] = []
        editing, agents_stop = asyncio.Event(), asyncio.Event()
        editing.set()

        async def agent(stores) -> tuple[int, list[str]]:
            calls, errors = 0, []
            with contextlib.suppress(TimeoutError):  # tool calls are not in step
                await asyncio.wait_for(agents_stop.wait(), random.uniform(0, AGENT_PERIOD_S))
            while not agents_stop.is_set():
                started = time.monotonic()
                try:
                    await stores.sync_if_due()
                except Exception as e:  # a 429 past the client's retries: logged, the agent goes on
                    errors.append(type(e).__name__)
                calls += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        agents_stop.wait(), max(0.0, AGENT_PERIOD_S - (time.monotonic() - started))
                    )
            return calls, errors

        async def editor() -> None:
            targets, i = list(args["edit_targets"]), 0
            while editing.is_set():
                tgt = targets[i % len(targets)]
                new = f"official fleet edit {i} {time.time()}\n"
                try:
                    await asyncio.to_thread(admin.update, tgt["store_id"], tgt["memory_id"], new)
                except RuntimeError:  # a 429 to the admin: the edit skipped
                    pass
                else:
                    edits.append({**tgt, "content": new, "at": time.monotonic(), "seen": {}})
                i += 1
                await asyncio.sleep(args["edit_every_s"])

        def all_seen() -> bool:
            return all(len(e["seen"]) == len(opened) for e in edits)

        async def checker() -> None:
            while True:
                now = time.monotonic()
                for e in edits:
                    for k in range(len(opened)):
                        f = root / f"sb{k}" / e["slug"] / e["path"].lstrip("/")
                        if k not in e["seen"] and f.exists() and f.read_text() == e["content"]:
                            e["seen"][k] = now - e["at"]
                late = bool(edits) and now - edits[-1]["at"] > args["readable_within_s"] + 5
                if not editing.is_set() and (all_seen() or late):
                    return
                await asyncio.sleep(0.5)

        agent_tasks = [asyncio.create_task(agent(st)) for _c, st, _se in opened]
        ed, ch = asyncio.create_task(editor()), asyncio.create_task(checker())
        await asyncio.sleep(args["fleet_s"])
        editing.clear()
        await ed
        window = _window(admin, c0, args["fleet_s"])
        await ch  # the agents stay active while the last edits are checked
        agents_stop.set()
        agents = await asyncio.gather(*agent_tasks)
        _emit(
            {
                "phase": "fleet",
                "download": download,
                "window": window,
                "calls": sum(a[0] for a in agents),
                "errors": [e for a in agents for e in a[1]],
                "edits": [{"at": e["at"], "seen": list(e["seen"].values())} for e in edits],
                "sandboxes": len(opened),
            }
        )
    finally:
        for client, stores, _se in opened:
            await _close(client, stores)
        admin.close()


def run(args: dict) -> None:
    asyncio.run(rows(args) if args["hosted"] == "rows" else fleet(args))
