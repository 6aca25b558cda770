"""What a tick and a store's sync report: the records the engine, the pusher and `memfs status` share."""

from __future__ import annotations

from dataclasses import dataclass

from memfs.records import StoreInfo


class TickFailed(Exception):
    """The store could not be reached or answered with a retryable error (SEMANTICS.md#d-unreachable)."""


@dataclass
class StoreSync:
    """Per-store bookkeeping shown by `memfs status`."""

    store: StoreInfo
    last_sync_at: str | None = None
    last_result: str | None = None
    last_error: str | None = None
    pushed: int = 0


@dataclass
class TickReport:
    ok: bool = True
    error: str | None = None
    pulled: int = 0
    pushed: int = 0
    requests: int = 0
