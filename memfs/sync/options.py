"""What the session tells the engine once, at its start: one frozen record (SEMANTICS.md#d-when,
#d-no-counter, #d-limits), so no part of the sync takes a dozen loose arguments."""

from __future__ import annotations

from dataclasses import dataclass

from memfs import limits
from memfs.protocol import Deletions, OnConflict


@dataclass(frozen=True, kw_only=True)
class EngineOptions:
    interval: float  # seconds between polls (live mode: between retries of what failed)
    max_files: int  # the mount's limits (SEMANTICS.md#d-limits)
    max_bytes: int
    deletions: Deletions = "enabled"  # what a remote or local delete does
    live: bool = True  # hold a watch when the service has one; False: `--live off`, polls only
    # Without a counter (the hosted API, SEMANTICS.md#d-no-counter): a mount nobody used since its
    # last poll polls at most every `idle_poll`; while in use, one store's version feed is read
    # over a wide window at most every `safety_net`, one store listed whole every `full_listing`.
    idle_poll: float = limits.IDLE_POLL_INTERVAL
    safety_net: float = limits.SAFETY_NET_INTERVAL
    full_listing: float = limits.FULL_LISTING_INTERVAL
    # Both sides changed a memory (SEMANTICS.md#d-merge): "merge" what does not overlap, a conflict
    # copy named after `conflict_who` (the session) for what does; "store-wins": the seeds' rule.
    on_conflict: OnConflict = "merge"
    conflict_who: str = "agent"
