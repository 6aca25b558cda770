"""What the store client's calls return that the sync engine reads: a listing (`Listing`) and a
change feed's answer (`Changes`). Plain records, importing nothing of memfs: the engine's port
(memfs/sync/ports.py `StoreApi`) names them without importing the client's transport."""

from __future__ import annotations

import email.utils
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Change:
    memory_id: str
    operation: str  # "upserted" | "deleted"
    path: str
    previous_path: str | None
    sha: str | None
    size: int | None
    updated_at: str | None
    # view=full: None when deleted, our own write, or past the budget (docs/API.md)
    content: str | None = None


@dataclass(frozen=True)
class Changes:
    counter: int
    too_old: bool
    changes: list[Change]


@dataclass
class Listing:
    """A store's memories read by several listings (one per path prefix), concurrently.

    Without a counter (the hosted API) the listings are not one snapshot: a memory renamed from
    one prefix to another while they were read can be in both (`duplicates`) or in neither. The
    caller settles both (sync/remote.py). With a counter, `counters` holds every page's header:
    one value means one snapshot; several mean the listing straddled writes, and the lowest is
    the counter to resume from."""

    items: list[dict[str, Any]] = field(default_factory=list)
    counters: set[int] = field(default_factory=set)
    duplicates: set[str] = field(default_factory=set)
    requests: int = 0
    # The service's clock at the earliest of its pages' answers (their `Date` headers, to the
    # second, as a Unix time; None: none said): no page was read much before it, so a version
    # written after the listing read its memory is no older (sync/feed.py `listed_position`).
    served: float | None = None
    _date: str = ""  # the `Date` last parsed (the pages of one second say the same)

    def heard_date(self, value: str) -> None:
        if value == self._date:
            return
        self._date = value
        try:
            at = email.utils.parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError):
            return
        if self.served is None or at < self.served:
            self.served = at

    @property
    def counter(self) -> int | None:
        return min(self.counters) if self.counters else None

    @property
    def consistent(self) -> bool:
        return len(self.counters) == 1
