"""The records of one store's sync decision (memfs/sync/plan.py): its `Inputs`, the actions a `Plan`
holds, and the merge results the engine hands back (SEMANTICS.md#d-merge). Data only; plan.py
re-exports every name, so callers keep writing `plan.Materialise`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memfs.limits import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES
from memfs.protocol import Access, Deletions, OnConflict
from memfs.records import BaseEntry, LocalFile, RefusedEntry, SkippedEntry

# ---- inputs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteEntry:
    """What the store holds now for one memory."""

    memory_id: str
    path: str
    sha: str
    size: int


EMPTY_BASE = ""  # the base sha of a memory both sides created at one path (MergeWanted.base_sha)


@dataclass(frozen=True)
class MergeResult:
    """What the engine's three-way merge (memfs/sync/merge.py) made of one content conflict:
    `sha`/`size` of the merged text (its blob stored), or sha None when the two changes overlap or
    the file is not one that merges (a true conflict)."""

    sha: str | None
    size: int = 0


MergeKey = tuple[str, str, str]  # (base sha or EMPTY_BASE, store's sha, local sha)


@dataclass(frozen=True)
class Inputs:
    """Everything one decision needs, in the records the state dir and the view hand out
    (memfs/records.py). `base` and `local` may be keyed any way (they are re-keyed by memory id /
    path: the state dir keys its baseline by path). `dirty` is informative only: `local` is the
    committed state, and the engine defers a plan whose view actions touch a dirty path."""

    base: Mapping[str, BaseEntry]
    local: Mapping[str, LocalFile]
    remote: Mapping[str, RemoteEntry]
    remote_order: Sequence[str] = ()
    dirty: frozenset[str] = frozenset()
    refused: Mapping[str, RefusedEntry] = field(default_factory=dict)  # by path
    skipped: Mapping[str, SkippedEntry] = field(default_factory=dict)  # by memory id
    deletes_held: frozenset[str] = frozenset()
    access: Access = "read_write"
    deletions: Deletions = "enabled"
    max_files: int = DEFAULT_MAX_FILES
    max_bytes: int = DEFAULT_MAX_BYTES
    remote_changed: bool = True
    # SEMANTICS.md#d-merge: "store-wins" is the seeds' rule; "merge" asks for a three-way merge of
    # every content conflict (Plan.merge_wanted) and plans with the results given here.
    on_conflict: OnConflict = "store-wins"
    merges: Mapping[MergeKey, MergeResult] = field(default_factory=dict)
    copy_who: str = "agent"  # whose version a conflict copy holds (its name says so)
    copy_when: datetime | None = None  # when the conflict was found (its name says so); None: no copies
    # memory id -> its merges in a row whose push the store superseded (a 409): at plan.MERGE_TRIES
    # the next content conflict of it is a true conflict, not merged again (SEMANTICS.md#d-merge)
    merge_tries: Mapping[str, int] = field(default_factory=dict)


# ---- actions ----------------------------------------------------------------------------------
# view


@dataclass(frozen=True)
class KeepLocal:
    """Save the agent's content (blob `sha`, at `path` now) to the state dir before it is overridden."""

    path: str
    sha: str


@dataclass(frozen=True)
class RemoveLocal:
    path: str


@dataclass(frozen=True)
class MoveLocal:
    """Apply a rename in the view, keeping the inode; a Materialise at new_path may follow."""

    old_path: str
    new_path: str


@dataclass(frozen=True)
class Materialise:
    """Write the store's content (`sha`) at `path`, as memory `memory_id`."""

    memory_id: str
    path: str
    sha: str
    size: int


@dataclass(frozen=True)
class PlaceCopy:
    """Put the agent's content (blob `sha`) at `path` as a new file, to be created on the store:
    the conflict copy of SEMANTICS.md#d-merge."""

    path: str
    sha: str
    size: int


@dataclass(frozen=True)
class MergeWanted:
    """A content conflict the plan could not settle without the merge of these three versions
    (the engine merges them and plans again with `Inputs.merges`)."""

    memory_id: str
    path: str  # the local file's
    base_sha: str  # EMPTY_BASE: both sides created the memory
    remote_sha: str
    local_sha: str

    @property
    def key(self) -> MergeKey:
        return (self.base_sha, self.remote_sha, self.local_sha)


# push (HoldDelete sends nothing: the engine records it in deletes_held and logs it once)


@dataclass(frozen=True)
class PushDelete:
    memory_id: str
    path: str
    expected_sha: str


@dataclass(frozen=True)
class HoldDelete:
    memory_id: str
    path: str
    reason: Deletions  # the --sync-deletions mode that holds it: "log_only" | "disabled"


@dataclass(frozen=True)
class PushUpdate:
    """Update memory_id, now at `path` with `expected_sha` (the precondition), to new_path and/or
    new_sha (None: unchanged). `merge`: new_sha is a three-way merge made by this plan, whose 409
    counts toward Inputs.merge_tries (informative: left out of equality, as the same change sent
    again is the same request)."""

    memory_id: str
    path: str
    expected_sha: str
    new_path: str | None = None
    new_sha: str | None = None
    merge: bool = field(default=False, compare=False)

    @property
    def local_path(self) -> str:
        """Where the view holds what is sent (the key to record a refusal under)."""
        return self.new_path or self.path

    @property
    def local_sha(self) -> str:
        return self.new_sha or self.expected_sha


@dataclass(frozen=True)
class PushCreate:
    """Create a memory at `path` with blob `sha`. `copy`: a conflict copy this plan placed
    (informative, as PushUpdate.merge: the store service counts it, SEMANTICS.md#d-merge)."""

    path: str
    sha: str
    size: int
    copy: bool = field(default=False, compare=False)


# bookkeeping


@dataclass(frozen=True)
class SetBase:
    entry: BaseEntry


@dataclass(frozen=True)
class DropBase:
    memory_id: str


@dataclass(frozen=True)
class SetLocalMemoryId:
    """The file at `path` (after the view actions) continues `memory_id` (None: a new file)."""

    path: str
    memory_id: str | None


@dataclass(frozen=True)
class Skip:
    memory_id: str
    path: str
    sha: str
    size: int
    reason: str


@dataclass(frozen=True)
class Unskip:
    memory_id: str


@dataclass(frozen=True)
class ClearHeld:
    memory_id: str


@dataclass(frozen=True)
class ClearRefused:
    path: str


@dataclass(frozen=True)
class Notice:
    """One line of .sync-notices.log. `kept`: the KeepLocal of this same path saved the agent's
    version; the engine adds where. `details` is prose and is left out of equality."""

    kind: str
    path: str
    details: str = field(default="", compare=False)
    kept: bool = False
    copy: str = field(default="", compare=False)  # a conflict-copy notice: where the agent's version went


ViewAction = KeepLocal | RemoveLocal | MoveLocal | Materialise | PlaceCopy
PushAction = PushDelete | HoldDelete | PushUpdate | PushCreate
BookAction = SetBase | DropBase | SetLocalMemoryId | Skip | Unskip | ClearHeld | ClearRefused


@dataclass(frozen=True)
class Plan:
    """view: KeepLocal*, RemoveLocal*, MoveLocal* (dependency order), Materialise*, PlaceCopy*.
    bookkeeping: DropBase*, SetBase*, SetLocalMemoryId*, Skip*, Unskip*, ClearHeld*, ClearRefused*.
    push_stages: [HoldDelete* + PushDelete*], [PushUpdate*] (one stage per rename wave), [PushCreate*].
    merge_wanted: content conflicts left as they are until the engine brings their merge (a plan
    with any is made again with `Inputs.merges`; applied as it is, it leaves those files alone)."""

    view: tuple[ViewAction, ...] = ()
    bookkeeping: tuple[BookAction, ...] = ()
    notices: tuple[Notice, ...] = ()
    push_stages: tuple[tuple[PushAction, ...], ...] = ()
    merge_wanted: tuple[MergeWanted, ...] = ()

    @property
    def push(self) -> tuple[PushAction, ...]:
        return tuple(a for stage in self.push_stages for a in stage)

    @property
    def actions(self) -> tuple[Any, ...]:
        return self.view + self.bookkeeping + self.notices + self.push

    @property
    def empty(self) -> bool:
        return not self.actions
