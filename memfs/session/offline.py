"""What can be said and done from a state dir when no daemon serves it: `memfs status` offline,
`memfs flush`, and the lines naming what is not on the store (shared with `memfs unmount`).

Each builds the view the next mount would load (the kernel-free core over the state dir) and asks
the sync engine's one rule for "not on the store" (`memfs.sync.not_on_store`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memfs.client import StoreClient
from memfs.mount.filesystem import Filesystem
from memfs.mount.state import State
from memfs.protocol import as_deletions, as_on_conflict
from memfs.sync.engine import EngineOptions, SyncEngine
from memfs.sync.not_on_store import not_on_store
from memfs.sync.ports import StoreApi


def describe_not_on_store(answer: dict[str, Any], limit: int = 10) -> list[str]:
    """Lines naming what is not on the store (at most `limit`, then a count of the rest), from
    a `final_sync()` or `offline_status()` answer: "work-notes/bad.txt (held: …)"."""
    lines: list[str] = []
    total = 0
    slugs = answer.get("slugs", {})
    for sid, summary in answer.get("not_on_store", {}).items():
        slug = slugs.get(sid, sid)
        reasons = summary.get("reasons", {})
        for category in ("staged", "refused", "held"):
            for path in summary["paths"][category]:
                total += 1
                if len(lines) < limit:
                    why = f": {reasons[path]}" if path in reasons else ""
                    lines.append(f"{slug}{path} ({category}{why})")
    if total > limit:
        lines.append(f"and {total - limit} more")
    return lines


async def flush_state_dir(
    state_dir: Path,
    base_url: str | None,
    token: str,
    timeout: float,
    deletions: str | None,
    *,
    api_key: bool = False,
) -> dict[str, Any]:
    """`memfs flush`: push what a dead mount left staged, without mounting anything. `deletions`
    None: the --sync-deletions the mount used (a delete it held back stays held). `api_key`:
    `token` is an organisation's API key (a store mounted with `--store`)."""
    state = State(state_dir)
    state.lock(state.get_meta("root") or "(flush)")
    try:
        url = base_url or state.get_meta("base_url")
        if not url:
            raise ValueError(f"no --base-url given and none recorded in {state_dir}")
        stores = [s.info for s in state.stores()]
        fs = Filesystem(state, stores)
        async with StoreClient(url, token, api_key=api_key) as client:
            recorded = _recorded_limits(state)
            store: StoreApi = client  # the engine's port (memfs/sync/ports.py)
            options = EngineOptions(
                interval=5,
                deletions=as_deletions(deletions or state.get_meta("sync_deletions")),
                max_files=recorded["max_files"],
                max_bytes=recorded["max_bytes"],
                live=False,
                on_conflict=as_on_conflict(state.get_meta("on_conflict")),
                conflict_who=state.get_meta("conflict_who") or state.get_meta("session_id") or "agent",
            )
            engine = SyncEngine(store, state, fs, stores, options)
            return await engine.final_sync(timeout)
    finally:
        state.close()


def _recorded_limits(state) -> dict[str, int]:
    """The mount's --max-files/--max-bytes as recorded in the state dir (the plan needs them)."""
    return {
        "max_files": int(state.get_meta("max_files") or 10**9),
        "max_bytes": int(state.get_meta("max_bytes") or 10**12),
    }


def offline_status(state_dir: Path) -> dict[str, Any]:
    """What `memfs status` can say from a state dir when no daemon runs: the same fields as the
    live status, "not on the store" by the same rule (`not_on_store`) over the view the next
    mount would load from this state dir."""
    state = State(state_dir)
    try:
        root = state.get_meta("root") or ""
        rows = state.stores()
        fs = Filesystem(state, [s.info for s in rows])
        deletions = as_deletions(state.get_meta("sync_deletions"))
        limits_ = _recorded_limits(state)
        stores = []
        missing: dict[str, dict[str, Any]] = {}
        for s in rows:
            info = s.info
            summary = not_on_store(
                state, info, fs.local_view(info.store_id), deletions=deletions, **limits_
            ).summary()
            missing[info.store_id] = summary
            stores.append(
                {
                    "store_id": info.store_id,
                    "name": info.name,
                    "slug": info.slug,
                    # a store mounted at a path of its own is that path (SEMANTICS.md#d-store-mount)
                    "mount_path": root
                    if state.get_meta("layout") == "single"
                    else os.path.join(root, info.slug),
                    "access": info.access,
                    "counter": s.counter,
                    "last_sync_at": s.last_sync_at,
                    "last_result": s.last_result,
                    "last_error": s.last_error,
                    **summary,
                }
            )
        return {
            "stores": stores,
            "pending": sum(m["not_on_store"] for m in missing.values()),
            "not_on_store": missing,
            "slugs": {s.store_id: s.info.slug for s in rows},
        }
    finally:
        state.close()
