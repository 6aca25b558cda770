"""The records that the mount and the sync engine both speak: one type per concept.

The filesystem core builds `LocalFile`s, the state dir stores and returns `BaseEntry`,
`SkippedEntry`, `RefusedEntry` and `StoreInfo`, and the sync planner decides over exactly these
objects; nobody copies one family into another by matching attribute names. This module imports
nothing of memfs but the wire's names (`memfs.protocol`), so that `mount/` and `sync/` may both
depend on it (tests/test_layers.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from memfs.protocol import Access


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """One attached store, as the session resolved it (and the state dir's `stores` row keeps)."""

    store_id: str
    name: str
    slug: str
    access: Access

    @property
    def read_only(self) -> bool:
        return self.access == "read_only"


@dataclass(frozen=True, slots=True)
class LocalFile:
    """A file of the view in its committed state (last close/fsync): what a sync may push.
    `memory_id`: the memory it continues (None: a new file)."""

    path: str
    memory_id: str | None
    sha: str
    size: int
    bad_utf8: bool = False  # content is not UTF-8: kept in the view, never pushed


@dataclass(frozen=True, slots=True)
class BaseEntry:
    """What the store held at the last sync for one materialised memory (the baseline)."""

    memory_id: str
    path: str
    sha: str
    size: int


@dataclass(frozen=True, slots=True)
class SkippedEntry:
    """A remote memory already noticed as not materialisable here (keyed by its memory id)."""

    path: str
    sha: str | None
    size: int | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RefusedEntry:
    """Content at a path that the store refused to take (keyed by the path); not retried until
    the file's content changes."""

    sha: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class FeedPosition:
    """Where a store's reading of the hosted API's version feed stands (SEMANTICS.md#d-no-counter):
    the newest version `created_at` applied (RFC 3339, as the service wrote it) and the ids of the
    versions already seen within the overlap window behind it (the next read drops them)."""

    position: str
    seen: frozenset[str]
