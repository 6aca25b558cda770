"""One file the worker's `write` or `edit` just wrote, pushed at once (SEMANTICS.md#d-merge, "told in
band"): `write_through` pushes the file's store under the engine's tick lock, and `outcome` (pure)
reads what became of the file off it, its base and what the applied plans said.

- "pushed": the file is on the store as written;
- "merged": the store had moved; the file was merged with the store's version and the merge is on
  the store (what is on disk now is the merge);
- "conflict": the two changed the same lines (or the file does not merge): the store's version is
  in the file, the agent's went onto the store as `copy` (or, with `--on-conflict store-wins`,
  into the state dir);
- "gone": the store deleted the memory meanwhile (the agent's version is kept in the state dir);
- "staged": not on the store yet (`error` says why: unreachable, refused, or a write other than a
  merge still superseded after every round); the mount goes on trying, as for any staged change.
  A store that keeps moving under the merges ends as "conflict" (TRIES).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from memfs.client.errors import ApiError, Unreachable
from memfs.records import BaseEntry, LocalFile
from memfs.sync import plan as P
from memfs.sync.not_on_store import archived_reason
from memfs.sync.report import TickReport

if TYPE_CHECKING:
    from memfs.sync.engine import SyncEngine

# A write-through's rounds, the bound of the tick's merges (plan.MERGE_TRIES) included, so that
# the two agree: the first push on what the mount knows (its 409 is no merge's), then read, merged
# and pushed up to MERGE_TRIES times, then, the store still moving, one more read settles it as a
# true conflict (a conflict copy), told in band like any conflict: never "staged" for that.
TRIES = P.MERGE_TRIES + 2


async def write_through(engine: SyncEngine, store_id: str, path: str) -> dict[str, Any]:
    """Push `path`'s store now and say what became of `path`. The first try plans on the store as
    the mount last read it and costs one write request; a 409 (the store moved) reads the store,
    merges and pushes again, TRIES rounds at most. Other staged changes of the store go with it, as they
    would at the next tick."""
    store = next((s for s in engine.stores if s.store_id == store_id), None)
    if store is None or store.access != "read_write":
        return {"ok": False, "error": f"no read_write store {store_id!r} in this mount"}
    engine.schedule.used()
    report = TickReport()
    async with engine.tick_lock:
        await engine.push_done.wait()
        for attempt in range(TRIES):
            superseded = report.superseded
            try:
                stages = await engine.store_pull.pull(
                    store,
                    None,
                    report,
                    has_counter=engine.has_counter,
                    tally=engine.sync[store_id],
                    read=attempt > 0,
                )
            except (ApiError, Unreachable) as exc:
                report.ok, report.error = False, str(exc)
                break
            await engine.fs.wait_invalidated()
            if stages:
                engine.push_done = trio.Event()
                await engine.push_all([(store, stages)], report)
            if not report.ok or report.superseded == superseded:
                break
    if store_id in engine.pusher.archived:  # it takes no write any more (SEMANTICS.md#d-archived)
        return {"ok": True, "result": "staged", "error": archived_reason(engine.pusher.archived[store_id])}
    base = {b.memory_id: b for b in engine.state.baseline(store_id).values()}
    local = engine.fs.local_file(store_id, path)
    return outcome(path, local, base.get(local.memory_id) if local and local.memory_id else None, report)


def outcome(path: str, local: LocalFile | None, base: BaseEntry | None, report: TickReport) -> dict[str, Any]:
    notes = [n for n in report.notices if n.path == path]
    kinds = {n.kind for n in notes}
    copy = next((n.copy for n in notes if n.kind == "conflict-copy"), "")
    if copy:
        return {"ok": True, "result": "conflict", "copy": copy, "details": _details(notes, "conflict-copy")}
    if "store-won-conflict" in kinds:
        return {
            "ok": True,
            "result": "conflict",
            "copy": "",
            "details": _details(notes, "store-won-conflict"),
        }
    if local is None:
        why = _details(notes, "deleted-by-store") or "the file is gone"
        return {"ok": True, "result": "gone", "details": why}
    on_store = base is not None and base.memory_id == local.memory_id and base.sha == local.sha
    if on_store:
        return {"ok": True, "result": "merged" if "merged" in kinds else "pushed"}
    if not report.ok:
        error = report.error or "the store service could not be reached"
    elif report.superseded:
        error = "the store kept changing under this write; it is merged at the next sync"
    else:
        error = _details(notes, "upload-refused") or "not uploaded yet"
    return {"ok": True, "result": "staged", "error": error}


def _details(notes: list, kind: str) -> str:
    return next((n.details for n in notes if n.kind == kind), "")
