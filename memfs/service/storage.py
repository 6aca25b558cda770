"""The narrow storage interface of the store service, its records and its domain errors.

`app.py` talks only to `Storage`; a backend (SQLite today, PostgreSQL later) implements it.
Every method is blocking and is called from a worker thread, never from the event loop.
Records are plain dataclasses; turning them into wire JSON is the app's job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

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


class SnapshotReader(Protocol):
    """A read of one store at one counter, consumed in chunks (one read transaction)."""

    counter: int

    def read(self, n: int) -> list[MemoryRecord]: ...

    def close(self) -> None: ...


class Storage(Protocol):
    # stores
    def create_store(self, name: str, description: str, metadata: dict[str, str]) -> StoreRecord: ...
    def list_stores(
        self,
        *,
        limit: int,
        after: int | None,
        include_archived: bool,
        created_gte: str | None,
        created_lte: str | None,
        only_ids: Sequence[str] | None = None,
    ) -> Page: ...
    def get_store(self, store_id: str) -> StoreRecord: ...
    def update_store(
        self,
        store_id: str,
        *,
        name: str | None,
        description: str | None,
        metadata_patch: dict[str, str | None] | None,
    ) -> StoreRecord: ...
    def archive_store(self, store_id: str) -> StoreRecord: ...
    def delete_store(self, store_id: str) -> None: ...
    def store_totals(self, store_id: str) -> StoreTotals: ...  # the console's overview

    # memories
    # backdate_s (create, update, delete): record the write that many seconds in the past
    # (`memfs serve --test-late-versions`: a version that becomes visible behind later ones)
    def create_memory(
        self,
        store_id: str,
        path: str,
        content: str,
        actor: Actor,
        *,
        max_memories: int,
        backdate_s: float = 0.0,
    ) -> MemoryRecord: ...
    def list_memories(
        self,
        store_id: str,
        *,
        path_prefix: str,
        depth: int,
        limit: int,
        after: str | None,
        with_content: bool,
    ) -> Page: ...
    def list_memories_as(
        self,
        token_hash: str,
        store_id: str,
        *,
        path_prefix: str,
        depth: int,
        limit: int,
        after: str | None,
        with_content: bool,
    ) -> tuple[SessionRecord | None, Page | None]: ...
    def get_memory(self, store_id: str, memory_id: str) -> MemoryRecord: ...
    def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        content: str | None,
        path: str | None,
        expected_sha256: str | None,
        actor: Actor,
        backdate_s: float = 0.0,
        repeat_ok: bool = True,
    ) -> MemoryRecord: ...
    def delete_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        expected_sha256: str | None,
        actor: Actor,
        backdate_s: float = 0.0,
    ) -> None: ...

    def write_batch(
        self, store_id: str, items: Sequence[BatchItem], actor: Actor, *, max_memories: int
    ) -> BatchResult: ...

    # versions
    def list_versions(
        self, store_id: str, *, filters: VersionFilter, limit: int, after: str | None, with_content: bool
    ) -> Page:
        """Newest first: `created_at` descending, then `id` descending (the hosted order); `after`
        is a page's `next_after`, "CREATED_AT ID" of the last version it held."""

    def get_version(self, store_id: str, version_id: str) -> VersionRecord: ...
    def redact_version(self, store_id: str, version_id: str, actor: Actor) -> VersionRecord: ...

    # counter extension
    def get_counters(self, store_ids: Sequence[str]) -> dict[str, int]: ...
    def counters_for(self, token_hash: str | None, store_ids: Sequence[str]) -> dict[str, int] | None: ...
    def counters_batch(
        self, token_hashes: Sequence[str], store_ids: Sequence[str]
    ) -> tuple[dict[str, int], dict[str, set[str]]]: ...
    def changes_since(self, store_id: str, since: int) -> Changes: ...
    def open_snapshot(self, store_id: str) -> SnapshotReader: ...

    # sessions
    def create_session(
        self,
        resources: Sequence[ResourceSpec],
        *,
        token_hash: str,
        title: str | None,
        metadata: dict[str, str],
    ) -> SessionRecord: ...
    def get_session(self, session_id: str) -> SessionRecord: ...
    def session_for_token(self, token_hash: str) -> SessionRecord | None: ...
    def archive_session(self, session_id: str) -> SessionRecord: ...
    def sessions_for_store(self, store_id: str) -> list[SessionRecord]: ...  # newest first (console)

    # operations
    def ping(self) -> None:
        """One round trip to the database (raises when it does not answer)."""

    def close(self) -> None: ...
