"""`memfs status|unmount|flush` (SEMANTICS.md#d-commands, #d-end): what a mount holds, its end,
and what a dead mount left staged. Light at the top, as commands.py is."""

from __future__ import annotations

import json
import os
from pathlib import Path

from memfs.session import control
from memfs.session.cli_support import EXIT_NOT_ON_STORE, _fail, _token
from memfs.session.hook import EXIT_NOT_ANSWERING

TYPE_CHECKING = False  # typing itself costs the per-call hook ~5 ms of imports
if TYPE_CHECKING:
    import argparse
    from typing import Any

NAMED_PER_STORE = 10  # paths `memfs status` names per store and category (the rest are counted)


def cmd_status(args: argparse.Namespace) -> int:
    try:
        state_dir = control.lookup_state_dir(args.root)
    except control.RegistryRefused as exc:
        return _fail("status", str(exc))
    try:
        answer: dict[str, Any] = control.call(state_dir, {"op": "status"}, timeout=30)
        answer["live"] = True
    except control.DaemonNotAnswering as exc:
        return _fail("status", str(exc), EXIT_NOT_ANSWERING)
    except TimeoutError:
        return _fail(
            "status",
            f"the memfs daemon for {args.root} answered the ping but not the status "
            f"within 30s; see {state_dir / 'memfs.log'}",
            EXIT_NOT_ANSWERING,
        )
    except control.NoDaemon:
        offline = _offline_status(state_dir)
        if offline is None:
            return _fail("status", f"no memfs mount at {args.root} and no state dir at {state_dir}")
        answer = offline
    answer["state_dir"] = str(state_dir)
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    live = "live" if answer.get("live") else "NOT RUNNING"
    print(f"memfs at {args.root}: {live}; state dir {state_dir}")
    if answer.get("mode"):  # a running daemon: live mode (watching) or polling, and why
        print(f"  sync: {answer['mode']}: {answer.get('mode_reason') or '-'}")
    if isinstance(answer.get("requests"), dict):  # what the mount sent (SEMANTICS.md#d-budget)
        r = answer["requests"]
        line = "  requests: last minute " + (
            ", ".join(f"{k} {n}" for k, n in r["last_minute"].items()) or "none"
        )
        line += "; last hour " + (", ".join(f"{k} {n}" for k, n in r["last_hour"].items()) or "none")
        print(
            line + (f"; held back {r['held_for']:g}s more (the service asked)" if r.get("held_for") else "")
        )
    for s in answer.get("stores", []):
        print(
            f"  {s['mount_path']}  {s['access']}  id={s['store_id']}  counter={s.get('counter')}  "
            f"last sync={s.get('last_sync_at') or '-'} ({s.get('last_result') or '-'})  "
            + (
                f"last ok={s.get('last_ok_at') or 'never'}  "
                if s.get("last_result") not in (None, "ok")  # how far behind a mount that cannot sync is
                else ""
            )
            + f"staged={s.get('staged', 0)}  "
            f"refused={s.get('refused', 0)}  held={s.get('held', 0)}  deletes held={s.get('deletes_held', 0)}"
            + (f"  error: {s['last_error']}" if s.get("last_error") else "")
            + (f"  archived at {s['archived_at']}: read-only" if s.get("archived_at") else "")
        )
        reasons = s.get("reasons", {})
        for category, paths in s.get("paths", {}).items():
            for path in paths[:NAMED_PER_STORE]:
                why = f": {reasons[path]}" if path in reasons else ""
                print(f"    {category}: {path}{why}")
            if len(paths) > NAMED_PER_STORE:
                print(f"    {category}: and {len(paths) - NAMED_PER_STORE} more")
    return 0


def _offline_status(state_dir: Path) -> dict[str, Any] | None:
    from memfs.session.offline import offline_status

    if not (state_dir / "state.db").exists():
        return None
    return {"live": False, **offline_status(state_dir)}


def _not_on_store_message(answer: dict[str, Any], state_dir: str) -> str:
    """`N change(s) are not on the store service: <bounded list>; kept in STATE: the fix`."""
    from memfs.session.offline import describe_not_on_store

    summaries = answer.get("not_on_store", {}).values()
    staged = sum(s["staged"] for s in summaries)
    archived = sum(s["staged"] for s in summaries if s.get("archived_at"))
    named = "\n  ".join(describe_not_on_store(answer))
    fixes = []
    if archived:
        fixes.append(
            f"changes to an archived store: it will never take them; a copy of each is in {state_dir}/kept/ "
            "(SEMANTICS.md#d-archived)"
        )
    if staged > archived:
        fixes.append(
            f"staged changes: `memfs flush --state-dir {state_dir}` when the store service is "
            "reachable (or the next mount with this state dir uploads them)"
        )
    if sum(s["refused"] + s["held"] for s in summaries):
        fixes.append(
            f"refused and held files: mount again with --state-dir {state_dir}, then change or "
            "remove them (`memfs status` names them)"
        )
    refused = sum(s["refused"] for s in summaries)
    held = sum(s["held"] for s in summaries)
    return (
        f"{answer.get('pending', 0)} change(s) are not on the store service ({staged} staged change(s), "
        f"{refused} refused by the service, {held} held back); they are kept in the state dir "
        f"{state_dir}:\n  {named}\n" + "\n".join(fixes)
    )


def _deletes_held_note(answer: dict[str, Any]) -> str:
    held = sum(s.get("deletes_held", 0) for s in answer.get("not_on_store", {}).values())
    return (
        f" ({held} local delete(s) held back by --sync-deletions: the store keeps those memories)"
        if held
        else ""
    )


def cmd_unmount(args: argparse.Namespace) -> int:
    from memfs.mount.mount_table import fuse_mount_at
    from memfs.session.daemon import clear_stale_mount, wait_until_unmounted

    root = os.path.abspath(args.root)
    try:
        state_dir = control.lookup_state_dir(root)
    except control.RegistryRefused as exc:
        return _fail("unmount", str(exc))
    try:
        answer = control.call(
            state_dir, {"op": "unmount", "flush_timeout": args.flush_timeout}, timeout=args.flush_timeout + 30
        )
    except control.DaemonNotAnswering as exc:
        return _fail("unmount", str(exc), EXIT_NOT_ANSWERING)
    except TimeoutError:
        return _fail(
            "unmount",
            f"the memfs daemon for {root} did not finish its final sync within "
            f"{args.flush_timeout + 30:g}s; see {state_dir / 'memfs.log'}",
            EXIT_NOT_ANSWERING,
        )
    except control.NoDaemon:
        entry = control.registry_entry(root)
        mount_point = entry["root"] if entry and entry.get("root") else root
        if fuse_mount_at(mount_point) is None:
            return _fail("unmount", f"nothing is mounted at {root}")
        clear_stale_mount(mount_point)
        return _fail(
            "unmount",
            f"the memfs daemon for {root} was dead; cleared its mount. Staged changes, "
            f"if any, are kept in {state_dir}: upload them with `memfs flush --state-dir {state_dir}`",
        )
    if not wait_until_unmounted(answer.get("root") or root, 15, resolve=not answer.get("root")):
        return _fail("unmount", f"{root} is still mounted (busy?); try again or `fusermount3 -uz {root}`")
    if int(answer.get("pending", 0)):
        return _fail(
            "unmount",
            _not_on_store_message(answer, str(answer.get("state_dir") or state_dir)),
            EXIT_NOT_ON_STORE,
        )
    print(f"memfs: unmounted {root}; every change is on the store service{_deletes_held_note(answer)}")
    return 0


def cmd_flush(args: argparse.Namespace) -> int:
    import functools

    import trio

    from memfs.logging_setup import setup_logging
    from memfs.session.offline import flush_state_dir

    setup_logging(args.log_format)
    state_dir = Path(args.state_dir)
    if not (state_dir / "state.db").exists():
        return _fail("flush", f"no memfs state in {state_dir}")
    token = None if args.api_key_file else _token()
    api_key = False
    if not token:  # a store mounted with --store: the organisation's API key (SEMANTICS.md#d-store-mount)
        from memfs.session.store_mount import read_api_key

        token, _ = read_api_key(args.api_key_file)
        api_key = token is not None
    if not token:
        return _fail(
            "flush",
            "no credential: set ANTHROPIC_WORK_SECRET or MEMFS_TOKEN (a session's mount), or "
            "ANTHROPIC_API_KEY or --api-key-file (a store mounted with --store)",
        )
    try:
        result = trio.run(
            functools.partial(flush_state_dir, api_key=api_key),
            state_dir,
            args.base_url,
            token,
            args.flush_timeout,
            args.sync_deletions,
        )
    except Exception as exc:  # print one clear line, not a traceback
        return _fail("flush", f"{type(exc).__name__}: {exc}")
    if result["pending"]:
        error = f" (last error: {result['error']})" if result.get("error") else ""
        return _fail("flush", _not_on_store_message(result, str(state_dir)) + error, EXIT_NOT_ON_STORE)
    print(
        f"memfs flush: uploaded {result.get('pushed', 0)} change(s); every change is on the store service"
        f"{_deletes_held_note(result)}"
    )
    return 0
