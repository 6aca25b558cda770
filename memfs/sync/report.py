"""What a tick and a store's sync report: the records the engine, the pusher and `memfs status` share."""

from __future__ import annotations

from dataclasses import dataclass, field

from memfs.records import StoreInfo
from memfs.sync import plan as P


class TickFailed(Exception):
    """The store could not be reached or answered with a retryable error (SEMANTICS.md#d-unreachable)."""


@dataclass
class StoreSync:
    """Per-store bookkeeping shown by `memfs status`."""

    store: StoreInfo
    last_sync_at: str | None = None
    last_result: str | None = None
    last_error: str | None = None
    last_ok_at: str | None = None  # the last sync that reached the store: how far behind an offline mount is
    pushed: int = 0
    # concurrent writers since the mount started (SEMANTICS.md#d-merge): changes merged with the
    # store's, true conflicts (the two changed the same lines), and the conflict copies made of them
    merges: int = 0
    conflicts: int = 0
    conflict_copies: int = 0
    # memory id -> its merged pushes in a row the store answered 409 (Inputs.merge_tries: the bound
    # of plan.MERGE_TRIES); dropped once a push of it lands or a plan has nothing of it to send
    merge_tries: dict[str, int] = field(default_factory=dict)

    def count_conflicts(self, plan: P.Plan) -> None:
        """Count what an applied plan did with concurrent changes; a memory it sends nothing of
        is settled (the view is the store's), so its merges in a row start again from none."""
        sending = {a.memory_id for a in plan.push if isinstance(a, P.PushUpdate)}
        for m in self.merge_tries.keys() - sending:
            del self.merge_tries[m]
        for n in plan.notices:
            if n.kind == "merged":
                self.merges += 1
            elif n.kind == "conflict-copy" or (n.kind == "store-won-conflict" and n.kept):
                self.conflicts += 1
        self.conflict_copies += sum(1 for a in plan.view if isinstance(a, P.PlaceCopy))

    def conflict_summary(self) -> dict[str, int]:
        return {"merges": self.merges, "conflicts": self.conflicts, "conflict_copies": self.conflict_copies}


@dataclass
class TickReport:
    ok: bool = True
    error: str | None = None
    pulled: int = 0
    pushed: int = 0
    requests: int = 0
    superseded: int = 0  # pushes answered 404/409: the store moved; the next pull settles (merges) them
    notices: list[P.Notice] = field(
        default_factory=list
    )  # what the applied plans said (write_through reads them)
