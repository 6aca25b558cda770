"""What a mount holds that its store does not (SEMANTICS.md#d-end): the one rule shared by live and
offline `memfs status`, the final sync of `memfs unmount` and the daemon's exit, and `memfs flush`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memfs.protocol import Deletions
from memfs.records import LocalFile, StoreInfo
from memfs.sync import plan as P
from memfs.sync.ports import Journal
from memfs.sync.remote import remote_from_base

HELD_NOT_UTF8 = "its content is not UTF-8, which the store cannot hold; it stays local until it is changed"
HELD_CLASH = (
    "the store holds a memory at or around this path (a file/directory clash); it stays local "
    "until that memory is gone"
)


@dataclass
class NotOnStore:
    """What one store's view holds that the store does not (SEMANTICS.md#d-end), by category:
    staged (pushes the next tick makes), refused (the service refused the upload; not retried
    until the file changes), held (kept back locally because the store cannot hold it), and
    deletes_held (deleted here, kept on the store by --sync-deletions log_only/disabled). The
    first three are changes that exist only in the state dir: `count`, which makes `memfs unmount`
    and the daemon exit non-zero. A held delete loses nothing (the store keeps more, as asked)."""

    staged: list[str]
    refused: dict[str, str]  # path -> the service's reason
    held: dict[str, str]  # path -> why it is held back
    deletes_held: list[str]
    # The store was archived while mounted (SEMANTICS.md#d-archived): what is staged stays staged,
    # for good; each staged path names it as its reason.
    archived_at: str | None = None

    @property
    def count(self) -> int:
        return len(self.staged) + len(self.refused) + len(self.held)

    def summary(self) -> dict[str, Any]:
        """The fields `memfs status` (live and offline) and `memfs unmount` show for one store."""
        return {
            "staged": len(self.staged),
            "refused": len(self.refused),
            "held": len(self.held),
            "deletes_held": len(self.deletes_held),
            "not_on_store": self.count,
            "paths": {
                "staged": self.staged,
                "refused": sorted(self.refused),
                "held": sorted(self.held),
                "deletes_held": self.deletes_held,
            },
            "reasons": {**self._staged_reasons(), **self.refused, **self.held},
            "archived_at": self.archived_at,
        }

    def _staged_reasons(self) -> dict[str, str]:
        """Why what is staged stays so: only an archived store says (a staged change goes out at the next tick)."""
        return dict.fromkeys(self.staged, archived_reason(self.archived_at)) if self.archived_at else {}


def archived_reason(archived_at: str) -> str:
    return f"the store was archived at {archived_at} and takes no new or changed memory (a copy is in kept/)"


def not_on_store(
    state: Journal,
    store: StoreInfo,
    local: Mapping[str, LocalFile],
    *,
    deletions: Deletions,
    max_files: int,
    max_bytes: int,
) -> NotOnStore:
    """The one rule for "what is not on the store", shared by live and offline `memfs status`,
    the final sync of `memfs unmount` and the daemon's exit, and `memfs flush`: the difference
    between the view (`local`: path -> committed file, from the state dir's `files`) and the
    baseline, planned as the next tick would plan it against an unchanged store."""
    sid = store.store_id
    if store.access != "read_write":
        return NotOnStore([], {}, {}, [])
    base = state.baseline(sid)
    refused = state.refused(sid)
    held_ids = state.deletes_held(sid)
    remote, order = remote_from_base(state, sid, base)
    plan = P.plan_store(
        P.Inputs(
            base=base,
            local=local,
            remote=remote,
            remote_order=tuple(order),
            refused=refused,
            skipped=state.skipped(sid),
            deletes_held=frozenset(held_ids),
            access=store.access,
            deletions=deletions,
            max_files=max_files,
            max_bytes=max_bytes,
            remote_changed=False,
        )
    )
    staged: set[str] = set()
    deletes_held = {b.path for b in base.values() if b.memory_id in held_ids}
    for a in plan.push:
        if isinstance(a, P.HoldDelete):
            deletes_held.add(a.path)
            continue
        path = a.local_path if isinstance(a, P.PushUpdate) else a.path
        if not path.startswith(P.TEMP_PREFIX):  # the first hop of a swap is half of one change
            staged.add(path)
    synced = {(b.path, b.sha) for b in base.values()}
    refused_now: dict[str, str] = {}
    held: dict[str, str] = {}
    for path, f in local.items():
        if path in staged or (path, f.sha) in synced:
            continue
        row = refused.get(path)
        if f.bad_utf8:
            held[path] = HELD_NOT_UTF8
        elif row is not None and row.sha == f.sha:
            refused_now[path] = row.reason
        else:
            held[path] = HELD_CLASH
    return NotOnStore(sorted(staged), refused_now, held, sorted(deletes_held - staged))
