"""What the store service's storage holds and refuses: its records and its domain errors.

The app calls the rules (`rules.StoreService`), the rules call a backend (`backend.py`), and all
of them speak these records. Records are plain dataclasses; turning them into wire JSON is the
app's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memfs.protocol import Access

# --- domain errors -----------------------------------------------------------------------------


class StorageError(Exception):
    """Base of the errors a backend raises for a request it refuses."""


class NotFound(StorageError):
    pass


class Invalid(StorageError):
    """The request breaks a rule (maps to 400 invalid_request_error)."""


class StoreArchived(Invalid):
    pass


class LimitExceeded(Invalid):
    """A configured limit (e.g. --max-memories) would be passed."""


class PreconditionFailed(StorageError):
    pass


class PathConflict(StorageError):
    def __init__(self, message: str, conflicting_memory_id: str, conflicting_path: str):
        super().__init__(message)
        self.conflicting_memory_id = conflicting_memory_id
        self.conflicting_path = conflicting_path


# --- records -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Actor:
    """Who wrote: type is "session_actor" (id = session id) or "api_actor" (id = api key id)."""

    type: str
    id: str


@dataclass
class StoreRecord:
    id: str
    name: str
    description: str
    metadata: dict[str, str]
    created_at: str
    updated_at: str
    archived_at: str | None


@dataclass
class MemoryRecord:
    id: str
    memory_store_id: str
    path: str
    content: str | None  # None when the caller asked for no content
    content_sha256: str
    content_size_bytes: int
    memory_version_id: str
    created_at: str
    updated_at: str


@dataclass
class StoreTotals:
    """A store's live memories at one counter: how many, and their content bytes."""

    counter: int
    memories: int
    bytes: int


@dataclass
class PrefixRecord:
    """A roll-up of deeper memories in a depth=1 listing."""

    path: str


@dataclass
class VersionRecord:
    id: str
    memory_id: str
    memory_store_id: str
    operation: str  # created | modified | deleted
    path: str | None
    content: str | None
    content_sha256: str | None
    content_size_bytes: int | None
    created_at: str
    created_by: Actor | None
    redacted_at: str | None
    redacted_by: Actor | None


@dataclass
class Change:
    """Current state of one memory written after the `since` counter (changes feed)."""

    memory_id: str
    operation: str  # upserted | deleted
    path: str
    previous_path: str | None
    content_sha256: str | None
    content_size_bytes: int | None
    memory_version_id: str
    updated_at: str
    # view=full: within the budget, not the reader's own (StoreService.changes_since)
    content: str | None = None


@dataclass
class Changes:
    memory_store_id: str
    since: int
    counter: int
    too_old: bool
    changes: list[Change] = field(default_factory=list)


@dataclass
class ResourceSpec:
    """One memory store to attach when creating a session."""

    memory_store_id: str
    access: Access
    instructions: str | None


@dataclass
class ResourceRecord:
    memory_store_id: str
    access: Access
    name: str
    description: str
    instructions: str | None
    mount_path: str


@dataclass
class SessionRecord:
    id: str
    title: str | None
    metadata: dict[str, str]
    resources: list[ResourceRecord]
    created_at: str
    updated_at: str
    archived_at: str | None

    def resource_for(self, store_id: str) -> ResourceRecord | None:
        for r in self.resources:
            if r.memory_store_id == store_id:
                return r
        return None


@dataclass
class Page:
    """One page of a listing. `next_after`: the position the next page resumes after (the last
    path of a memory listing, the last sequence number of a store listing, "CREATED_AT ID" of a
    version listing), None at
    the end; the app turns it into an opaque cursor (`cursors.py`)."""

    items: list
    next_after: str | int | None
    counter: int | None = None  # memory listings: the counter of the snapshot they were read from


@dataclass
class VersionFilter:
    memory_id: str | None = None
    session_id: str | None = None
    api_key_id: str | None = None
    operation: str | None = None
    created_gte: str | None = None
    created_lte: str | None = None


@dataclass(frozen=True)
class BatchCreate:
    """One item of a batch write (memfs's extension): what `create_memory` takes."""

    path: str
    content: str


@dataclass(frozen=True)
class BatchUpdate:
    """What `update_memory` takes (content and/or path; a rename is an update with a path)."""

    memory_id: str
    content: str | None
    path: str | None
    expected_sha256: str | None


@dataclass(frozen=True)
class BatchDelete:
    """What `delete_memory` takes."""

    memory_id: str
    expected_sha256: str | None


BatchItem = BatchCreate | BatchUpdate | BatchDelete


@dataclass
class BatchOutcome:
    """One item's answer: the memory written (create, update), or None for a delete; or the error
    its single request would have raised (then none of its writes were kept)."""

    memory: MemoryRecord | None = None
    error: StorageError | None = None


@dataclass
class BatchResult:
    outcomes: list[BatchOutcome]
    counter: int  # the store's counter after the batch, in the batch's transaction
