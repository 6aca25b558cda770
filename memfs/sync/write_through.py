"""What became of one file the worker's `write` or `edit` just wrote (SEMANTICS.md#d-merge, "told
in band"): the engine pushes the file's store at once (`SyncEngine.write_through`), and this pure
function reads the answer off the file, its base and what the applied plans said.

- "pushed": the file is on the store as written;
- "merged": the store had moved; the file was merged with the store's version and the merge is on
  the store (what is on disk now is the merge);
- "conflict": the two changed the same lines (or the file does not merge): the store's version is
  in the file, the agent's went onto the store as `copy` (or, with `--on-conflict store-wins`,
  into the state dir);
- "gone": the store deleted the memory meanwhile (the agent's version is kept in the state dir);
- "staged": not on the store yet (`error` says why: unreachable, refused, or the store kept moving);
  the mount goes on trying, as for any staged change.
"""

from __future__ import annotations

from typing import Any

from memfs.records import BaseEntry, LocalFile
from memfs.sync.report import TickReport


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
