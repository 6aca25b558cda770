"""Sync decisions for one store (SEMANTICS.md#d-three-way): a pure function from (base, local, remote) to a Plan.

No I/O here. The engine gathers `Inputs`, fetches the content every `Materialise` names, applies
`plan.view`, then `plan.bookkeeping`, then `plan.notices` as one unit (all or nothing: a base entry
must never claim content the view did not get), and then runs `plan.push` in list order: holds and
deletes, then updates (renames ordered so that none lands on a path still in use), then creates.
Each group's order is a valid sequential order; `plan.push_stages` groups pushes that may run
concurrently. After every successful push the engine records the store's answer as the base entry
(creates also give the local file its memory id). Every choice is explained in docs/SEMANTICS.md.

Merge mode (`Inputs.on_conflict == "merge"`, SEMANTICS.md#d-merge): a memory both sides changed
the content of is left as it is and named in `plan.merge_wanted`; the engine merges the three
versions (sync/merging.py) and plans again with `Inputs.merges`, which turns it into the merged
text pushed over the store's, or into the store's text with a `PlaceCopy` (+ `PushCreate`) of the
agent's version beside it. A memory whose last MERGE_TRIES merged pushes the store superseded
(`Inputs.merge_tries`, counted by the engine) is not merged again: its next conflict is a true one.
The records live in sync/actions.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memfs.limits import RESERVED_NAMES, PathError, check_memory_path
from memfs.records import BaseEntry, LocalFile
from memfs.sync.actions import (
    EMPTY_BASE,
    BookAction,
    ClearHeld,
    ClearRefused,
    DropBase,
    HoldDelete,
    Inputs,
    KeepLocal,
    Materialise,
    MergeKey,
    MergeResult,
    MergeWanted,
    MoveLocal,
    Notice,
    PlaceCopy,
    Plan,
    PushAction,
    PushCreate,
    PushDelete,
    PushUpdate,
    RemoteEntry,
    RemoveLocal,
    SetBase,
    SetLocalMemoryId,
    Skip,
    Unskip,
    ViewAction,
)
from memfs.sync.merge import conflict_copy_path
from memfs.sync.renames import TEMP_PREFIX as TEMP_PREFIX  # (where the engine and tests look for it)
from memfs.sync.renames import PathsInUse, is_temp_path, schedule
from memfs.sync.renames import temp_path as temp_path

# The records live in memfs/sync/actions.py; every caller finds them here.
__all__ = [
    "BookAction",
    "ClearHeld",
    "ClearRefused",
    "DropBase",
    "EMPTY_BASE",
    "HoldDelete",
    "Inputs",
    "KeepLocal",
    "MERGE_TRIES",
    "Materialise",
    "MergeKey",
    "MergeResult",
    "MergeWanted",
    "MoveLocal",
    "Notice",
    "PlaceCopy",
    "Plan",
    "PushAction",
    "PushCreate",
    "PushDelete",
    "PushUpdate",
    "RemoteEntry",
    "RemoveLocal",
    "SetBase",
    "SetLocalMemoryId",
    "Skip",
    "TEMP_PREFIX",
    "Unskip",
    "ViewAction",
    "is_temp_path",
    "plan_store",
    "temp_path",
    "unviewable",
]

# A memory's merges in a row whose push met a 409 (another writer moved the store again) before
# its next content conflict is settled as a true conflict (SEMANTICS.md#d-merge): under a writer
# faster than a round trip, merging again would never land; the conflict copy lands at once.
MERGE_TRIES = 5

# ---- helpers ----------------------------------------------------------------------------------


def unviewable(path: str) -> str | None:
    """Why a store path cannot be a file in the view (None: it can)."""
    try:
        check_memory_path(path)
    except PathError as exc:
        return f"the path cannot exist as a file here: {exc}"
    if path.count("/") == 1 and path[1:] in RESERVED_NAMES:
        return f"{path[1:]} is reserved in the store root"
    return None


# ---- the decision -----------------------------------------------------------------------------


@dataclass(eq=False)
class _Mem:
    """One memory's fate, worked out in phases."""

    m: str
    b: BaseEntry | None
    r: RemoteEntry | None
    l: LocalFile | None  # noqa: E741
    set_id: bool = False  # l is a file without this id that now continues the memory
    view: tuple[str, str, int] | None = None  # (path, sha, size) the view shows afterwards
    push: str | None = None  # "update" | "delete" | "hold"
    suppressed: bool = False  # the local state is not sent (bad UTF-8, refused with this sha)
    keep: bool = False  # the agent's content at l.path is saved before the view changes
    notes: list[Notice] = field(default_factory=list)
    skip: tuple[str, str] | None = None  # (notice kind, reason): not materialised here
    pending: bool = False  # a content conflict waiting for its merge: left as it is, base kept
    copy: PlaceCopy | None = None  # a true conflict: the agent's version, beside the store's
    merged: bool = False  # the view holds a merge made by this plan (its push says so)

    # The phases keep invariants the types cannot say (a memory in the view is one the store holds;
    # a kept or moved one has a local file): these read a field that must be set, loudly if not.
    @property
    def base_entry(self) -> BaseEntry:
        assert self.b is not None, f"{self.m}: no base entry"
        return self.b

    @property
    def remote_entry(self) -> RemoteEntry:
        assert self.r is not None, f"{self.m}: not on the store"
        return self.r

    @property
    def local_entry(self) -> LocalFile:
        assert self.l is not None, f"{self.m}: no local file"
        return self.l

    @property
    def view_entry(self) -> tuple[str, str, int]:
        assert self.view is not None, f"{self.m}: not in the view"
        return self.view

    @property
    def store_path(self) -> str | None:
        """Where the store will hold this memory once the plan's pushes are done."""
        if self.r is None or self.push == "delete":
            return None
        if self.push == "update" and not self.suppressed and self.view is not None:
            return self.view[0]
        return self.r.path


def plan_store(inputs: Inputs) -> Plan:
    return _Planner(inputs).run()


class _Planner:
    def __init__(self, inp: Inputs):
        self.inp = inp
        self.ro = inp.access == "read_only"
        self.base: dict[str, BaseEntry] = {b.memory_id: b for b in inp.base.values()}
        self.remote: dict[str, RemoteEntry] = {r.memory_id: r for r in inp.remote.values()}
        self.local: dict[str, LocalFile] = {f.path: f for f in inp.local.values()}
        self.refused: dict[str, str] = {p: r.sha for p, r in inp.refused.items()}
        self.mems: dict[str, _Mem] = {}
        self.new: dict[str, LocalFile] = {}  # local files that continue no base memory
        # new file path -> "push" | "blocked" | "adopted" | "drop" | "keep" | "copied" | "pending"
        self.fate: dict[str, str] = {}
        self.new_notes: list[Notice] = []
        self.wanted: list[MergeWanted] = []  # content conflicts whose merge the inputs do not hold
        self.copy_paths: set[str] = set()  # conflict copies' paths given out in this plan
        self.new_copies: dict[
            str, PlaceCopy
        ] = {}  # new file path -> its conflict copy (SEMANTICS.md#d-merge)

    def run(self) -> Plan:
        self._merge_all()
        for o in self._viewed():  # a base path was materialised before: known good
            rpath = o.remote_entry.path
            if o.view_entry[0] == rpath != getattr(o.b, "path", None) and (why := unviewable(rpath)):
                self._drop(o, "not-materialised", why)
        # A memory dropped for the limits stays where it is on the store, which can block a local
        # rename or a create placed before: settle again until nothing more is dropped.
        while True:
            self._fall_back()
            exact = self._place_new_files()
            if not self._apply_limits():
                break
        self._decision_3(exact)
        return self._emit()

    # -- phase 1: three-way merge per memory ----------------------------------------------------
    def _merge_all(self) -> None:
        by_id: dict[str, LocalFile] = {}
        for path in sorted(self.local):
            f = self.local[path]
            if f.memory_id in self.base and f.memory_id not in by_id:
                by_id[f.memory_id] = f
            else:  # new, or an id the base does not know (stale): a new file
                self.new[path] = f
        # `rm f; create f` (or an editor saving that way) continues the memory - same id, history
        # kept, no delete - when the store still holds it, unmoved, at that path.
        continued = set()
        base_at = {b.path: m for m, b in self.base.items()}
        for path in list(self.new):
            m = base_at.get(path)
            if m is not None and m not in by_id and m in self.remote and self.remote[m].path == path:
                by_id[m] = self.new.pop(path)
                continued.add(m)
        for m in sorted(self.base.keys() | self.remote.keys()):
            o = _Mem(m, self.base.get(m), self.remote.get(m), by_id.get(m), set_id=m in continued)
            self._merge(o)
            self.mems[m] = o

    def _merge(self, o: _Mem) -> None:
        b, r, lo = o.b, o.r, o.l
        if r is None:  # the store deleted it (b is set): SEMANTICS.md#d-store-deleted
            assert b is not None, o.m  # a memory comes from the base or the store
            if lo is not None and (lo.path, lo.sha) != (b.path, b.sha):
                o.keep = True
                o.notes.append(
                    Notice(
                        "deleted-by-store",
                        lo.path,
                        "the store deleted this memory while it was changed here",
                        kept=True,
                    )
                )
            return
        if b is None:  # new on the store
            o.view = (r.path, r.sha, r.size)
            return
        rpath = b.path if is_temp_path(r.path, o.m) else r.path
        remote_move, remote_edit = rpath != b.path, r.sha != b.sha
        if lo is None:  # deleted here
            if not (remote_move or remote_edit) and not self.ro:
                o.push = "delete" if self.inp.deletions == "enabled" else "hold"
                return
            o.view = (r.path, r.sha, r.size)
            why = "the store changed it since" if remote_move or remote_edit else "the store is read-only"
            o.notes.append(
                Notice("store-won-conflict", b.path, f"deleted here, but {why}: restored at {r.path}")
            )
            return
        lpath = b.path if is_temp_path(lo.path, o.m) else lo.path
        local_move, local_edit = lpath != b.path, lo.sha != b.sha
        if self.ro:  # the store wins every difference
            o.view = (r.path, r.sha, r.size)
            if (local_move or local_edit) and (lo.path, lo.sha) != (r.path, r.sha):
                o.keep = lo.sha not in (b.sha, r.sha)
                o.notes.append(
                    Notice(
                        "store-won-conflict",
                        lo.path,
                        f"the store is read-only: its version replaced this change, at {r.path}",
                        kept=o.keep,
                    )
                )
            return
        # Path and content merge separately: a side that did not change one takes the other's.
        path = rpath if remote_move else lpath
        sha, size = (r.sha, r.size) if remote_edit else (lo.sha, lo.size)
        content_conflict = local_edit and remote_edit and lo.sha != r.sha
        path_conflict = local_move and remote_move and lpath != rpath
        o.view = (path, sha, size)
        o.keep = content_conflict
        if content_conflict and self._merging(lo):
            o.keep = False
            self._merge_content(o, path, (b.sha, r.sha, lo.sha))
        elif content_conflict:
            o.notes.append(
                Notice(
                    "store-won-conflict",
                    lo.path,
                    f"changed here and on the store: the store's version is at {path}",
                    kept=True,
                )
            )
        elif path_conflict:
            o.notes.append(
                Notice(
                    "store-won-conflict",
                    lo.path,
                    f"renamed here and on the store: the store's path {path} wins",
                )
            )
        if o.pending:
            return
        path, sha, _ = o.view_entry
        if (path, sha) != (r.path, r.sha):
            o.push = "update"
            o.suppressed = sha == lo.sha and (lo.bad_utf8 or self.refused.get(lo.path) == lo.sha)

    # -- merging concurrent writers (SEMANTICS.md#d-merge) ---------------------------------------
    def _merging(self, lo: LocalFile) -> bool:
        return self.inp.on_conflict == "merge" and not lo.bad_utf8

    def _merge_content(self, o: _Mem, path: str, key: MergeKey) -> None:
        """Both sides changed the content: the merge's text (pushed over the store's), or on a
        true conflict the store's text here and the agent's in a conflict copy beside it; with no
        merge at hand yet, the file is left as it is and the merge is asked for."""
        lo, r = o.local_entry, o.remote_entry
        result = self._merge_result(o.m, key)
        if result is None:
            self.wanted.append(MergeWanted(o.m, lo.path, *key))
            o.view, o.pending = (lo.path, lo.sha, lo.size), True
        elif result.sha is not None:
            o.view, o.merged = (path, result.sha, result.size), True
            o.notes.append(
                Notice(
                    "merged",
                    lo.path,
                    f"changed here and on the store: merged with the store's version at {path}",
                )
            )
        else:
            o.view = (path, r.sha, r.size)
            how = "in the same lines" if self._merges_left(o.m) else "again after each merge"
            why = f"changed here and on the store {how}: the store's version is at {path}"
            o.copy = self._copy_for(lo, path)
            if o.copy is None:
                o.keep = True
                o.notes.append(Notice("store-won-conflict", lo.path, why, kept=True))
            else:
                o.notes.append(
                    Notice("conflict-copy", lo.path, f"{why}; yours is at {o.copy.path}", copy=o.copy.path)
                )

    def _merges_left(self, m: str) -> bool:
        return self.inp.merge_tries.get(m, 0) < MERGE_TRIES

    def _merge_result(self, m: str, key: MergeKey) -> MergeResult | None:
        """The merge of `key` (None: not at hand yet); past the bound, a true conflict."""
        return self.inp.merges.get(key) if self._merges_left(m) else MergeResult(None)

    def _copy_for(self, f: LocalFile, path: str) -> PlaceCopy | None:
        """Where the agent's version of `path` goes onto the store as a new memory beside it (None:
        no copies in this plan, copy_when unset: the state dir keeps it)."""
        if self.inp.copy_when is None:
            return None
        taken = set(self.local) | {r.path for r in self.remote.values()} | self.copy_paths
        try:
            copy = conflict_copy_path(path, self.inp.copy_who, self.inp.copy_when)
            n = 1
            while copy in taken:
                n += 1
                copy = conflict_copy_path(path, f"{self.inp.copy_who}-{n}", self.inp.copy_when)
        except PathError:  # no name fits beside so long a path: the state dir keeps it
            return None
        self.copy_paths.add(copy)
        return PlaceCopy(copy, f.sha, f.size)

    # -- phase 2: what cannot be in the view --------------------------------------------------
    def _viewed(self) -> list[_Mem]:
        return [o for o in self.mems.values() if o.view is not None]

    def _drop(self, o: _Mem, kind: str, reason: str) -> None:
        """Not materialised: gone from the view (the agent's changes, if any, kept), not pushed."""
        lo, b = o.l, o.b
        o.view, o.push, o.suppressed, o.set_id, o.notes = None, None, False, False, []
        o.pending, o.copy, o.merged = False, None, False
        o.keep = lo is not None and (b is None or (lo.path, lo.sha) != (b.path, b.sha))
        o.skip = (kind, reason)

    def _store_tree(self) -> PathsInUse:
        return PathsInUse((p, o.m) for o in self.mems.values() if (p := o.store_path) is not None)

    def _fall_back(self) -> None:
        """A local rename onto (or beside) a path the store keeps using is undone: store wins."""
        while True:
            moved = [o for o in self._viewed() if o.view_entry[0] != o.remote_entry.path and not o.pending]
            tree = self._store_tree() if moved else PathsInUse()
            lost = [o for o in moved if tree.blockers(o.view_entry[0], o.m)]
            if not lost:
                return
            for o in lost:
                path, sha, size = o.view_entry
                r = o.remote_entry
                o.view = (r.path, sha, size)
                o.push = "update" if sha != r.sha else None
                if not o.notes:
                    o.notes.append(
                        Notice(
                            "store-won-conflict",
                            o.local_entry.path,
                            f"renamed here to {path}, but the store holds another memory at or "
                            f"around that path: moved back to {r.path}",
                        )
                    )

    def _place_new_files(self) -> dict[str, str]:
        """New local files against the store's paths: same path -> SEMANTICS.md#d-store-created (resolved later);
        a file/directory clash -> the file stays local, not sent (it would be a 409), and a memory
        that would arrive there is not materialised."""
        tree = self._store_tree() if self.new else PathsInUse()
        exact: dict[str, str] = {}
        self.fate, self.new_notes = {}, []
        for path, f in sorted(self.new.items()):
            if tree.files.get(path):
                exact[path] = min(tree.files[path])
            elif self.ro:
                self._lose(f, "store-won-conflict", "the store is read-only: this file is not uploaded")
            elif blockers := tree.blockers(path, None):
                self.fate[path] = "blocked"
                for m in sorted(blockers):
                    o = self.mems[m]
                    if o.view is not None and o.view[0] == o.store_path:
                        self._drop(
                            o,
                            "not-materialised",
                            f"a file here cannot also be a directory: {o.remote_entry.path} clashes with the local file {path}",
                        )
            else:
                self.fate[path] = "push"
        return exact

    def _apply_limits(self) -> bool:
        """SEMANTICS.md#d-over-limits: materialise in the store's list order until the next one would pass a limit;
        it and every later one are not materialised. Only memories the view would hold count.
        Returns whether it dropped anything."""
        order = [m for m in dict.fromkeys(self.inp.remote_order) if m in self.remote]
        seen = set(order)
        order += sorted((m for m in self.remote if m not in seen), key=lambda m: (self.remote[m].path, m))
        files = size = 0
        full = dropped = False
        for m in order:
            o = self.mems[m]
            if o.view is None:
                full = full or (o.skip is not None and o.skip[0] == "over-limit")  # an earlier pass's cut
                continue
            r = o.remote_entry
            sz = r.size or 0
            if not full and files + 1 <= self.inp.max_files and size + sz <= self.inp.max_bytes:
                files, size = files + 1, size + sz
                continue
            full = True
            if (
                o.push == "update"
                and not o.suppressed
                and (r.path, r.sha) == (o.base_entry.path, o.base_entry.sha)
            ):
                continue  # the agent's own pending change goes out first; the next tick drops it
            self._drop(
                o,
                "over-limit",
                f"not materialised: the store holds more than --max-files "
                f"{self.inp.max_files} / --max-bytes {self.inp.max_bytes} allow",
            )
            dropped = True
        return dropped

    def _decision_3(self, exact: dict[str, str]) -> None:
        """A new local file where the store holds a memory: the store's content wins."""
        for path, m in exact.items():
            f, o = self.new[path], self.mems[m]
            if o.view is not None and o.view[0] == path:
                if f.sha != o.view[1] and self._both_created(o, f):
                    self._merge_created(o, f)
                elif f.sha != o.view[1]:
                    self._lose(
                        f,
                        "overwritten-by-store",
                        "the store created a memory at this path: its content replaced this new file",
                    )
                elif o.l is None:  # the same content: our create whose answer was lost, or a twin
                    o.l, o.set_id = f, True
                    self.fate[path] = "adopted"
                else:
                    self.fate[path] = "drop"
            elif o.view is None and o.skip is not None:
                if f.sha == o.remote_entry.sha:
                    self.fate[path] = "drop"
                else:
                    self._lose(
                        f,
                        "overwritten-by-store",
                        "the store holds a memory at this path that is not "
                        "materialised here: this new file was removed",
                    )
            else:  # the store keeps it there while the view shows it elsewhere (a refused rename)
                self.fate[path] = "drop" if self.ro else "blocked"

    def _both_created(self, o: _Mem, f: LocalFile) -> bool:
        """A new local file where the store created a memory nobody here continues (merge mode)."""
        r = o.remote_entry
        return self._merging(f) and o.b is None and o.l is None and o.view == (r.path, r.sha, r.size)

    def _merge_created(self, o: _Mem, f: LocalFile) -> None:
        """Both sides created one path: merged on an empty base (the file continues the store's
        memory with the merged text), or on a true conflict the store's text and a conflict copy."""
        r = o.remote_entry
        key = (EMPTY_BASE, r.sha, f.sha)
        result = self._merge_result(o.m, key)
        if result is None:
            self.wanted.append(MergeWanted(o.m, f.path, *key))
            self.fate[f.path] = "pending"
            o.view, o.pending = None, True  # not materialised over the agent's file meanwhile
        elif result.sha is not None:
            o.l, o.set_id, o.merged = f, True, True
            o.view = (r.path, result.sha, result.size)
            o.push = "update" if result.sha != r.sha else None
            self.fate[f.path] = "adopted"
            o.notes.append(
                Notice("merged", f.path, "created here and on the store: merged with the store's version")
            )
        else:
            copy = self._copy_for(f, r.path)
            why = "created here and on the store"
            if copy is None:
                self._lose(f, "overwritten-by-store", f"{why}: the store's content replaced this new file")
                return
            self.fate[f.path] = "copied"
            self.new_copies[f.path] = copy
            self.new_notes.append(
                Notice(
                    "conflict-copy",
                    f.path,
                    f"{why}: the store's version is here; yours is at {copy.path}",
                    copy=copy.path,
                )
            )

    def _lose(self, f: LocalFile, kind: str, details: str) -> None:
        self.fate[f.path] = "keep"
        self.new_notes.append(Notice(kind, f.path, details, kept=True))

    # -- emission -----------------------------------------------------------------------------
    def _emit(self) -> Plan:
        e = _Emission(self.inp, self.refused, self.new_notes)
        e.wanted, e.new_copies = self.wanted, self.new_copies
        for _, o in sorted(self.mems.items()):
            e.memory(o)
        for path, f in sorted(self.new.items()):
            e.new_file(path, f, self.fate[path])
        e.closing_book(self.mems.keys())
        return e.plan(self._view_moves(e.moves, e.remove), self._update_stages(e.updates))

    def _view_moves(self, moves: list[tuple[str, str, str]], remove: list[RemoveLocal]) -> list[MoveLocal]:
        """Local moves in a valid order: every file that stays is in the way until it moves."""
        removed = {a.path for a in remove}
        tree = PathsInUse()
        if moves:
            tree = PathsInUse((p, f"file:{p}") for p in self.new if self.fate[p] in ("push", "blocked"))
            for o in self.mems.values():
                if o.l is not None and o.l.path not in removed:
                    tree.add(o.l.path, o.m)
        return [MoveLocal(src, dst) for wave in schedule(moves, tree) for _, src, dst in wave]

    def _update_stages(self, updates: list[_Mem]) -> list[tuple[PushUpdate, ...]]:
        """Content-only updates go at once; renames in waves so that none targets a path (or a
        path beside one) still in use on the store; a cycle goes through a temporary path."""
        final = {o.m: o for o in updates}
        renames = [
            (o.m, o.remote_entry.path, o.view_entry[0])
            for o in updates
            if o.view_entry[0] != o.remote_entry.path
        ]
        tree = self._store_tree_before_updates() if renames else PathsInUse()
        stages: list[list[PushUpdate]] = [
            [
                self._update(o, o.remote_entry.path, o.remote_entry.path)
                for o in updates
                if o.view_entry[0] == o.remote_entry.path
            ]
        ]
        for i, wave in enumerate(schedule(renames, tree)):
            if i >= len(stages):
                stages.append([])
            for m, src, dst in wave:
                stages[i].append(self._update(final[m], src, dst))
        return [tuple(sorted(s, key=lambda a: (a.path, a.memory_id))) for s in stages if s]

    def _store_tree_before_updates(self) -> PathsInUse:
        return PathsInUse(
            (o.r.path, o.m) for o in self.mems.values() if o.r is not None and o.push != "delete"
        )

    @staticmethod
    def _update(o: _Mem, src: str, dst: str) -> PushUpdate:
        vpath, vsha, _ = o.view_entry
        rsha = o.remote_entry.sha
        if dst != vpath:  # the first hop of a cycle: move only
            return PushUpdate(o.m, src, rsha, dst)
        changed = vsha != rsha
        return PushUpdate(
            o.m, src, rsha, dst if dst != src else None, vsha if changed else None, merge=o.merged and changed
        )


class _Emission:
    """The actions of a decided plan, gathered memory by memory, then new file by new file."""

    def __init__(self, inp: Inputs, refused: Mapping[str, str], new_notes: list[Notice]):
        self.inp, self.refused = inp, refused
        self.held = frozenset(inp.deletes_held)
        self.keep: list[KeepLocal] = []
        self.remove: list[RemoveLocal] = []
        self.moves: list[tuple[str, str, str]] = []  # (memory id, from, to) in the view
        self.mats: list[Materialise] = []
        self.book: list[BookAction] = []
        self.notes: list[Notice] = list(new_notes)
        self.holds: list[HoldDelete | PushDelete] = []
        self.updates: list[_Mem] = []
        self.creates: list[PushCreate] = []
        self.still_refused: set[str] = set()
        self.copies: list[PlaceCopy] = []
        self.wanted: list[MergeWanted] = []
        self.new_copies: Mapping[str, PlaceCopy] = {}

    def memory(self, o: _Mem) -> None:
        if o.keep:
            self.keep.append(KeepLocal(o.local_entry.path, o.local_entry.sha))
        if o.view is None:
            self._not_viewed(o)
        else:
            self._viewed(o, o.view)
        self.notes += o.notes
        self._skip(o)
        self._push(o)
        if o.copy is not None and o.view is not None:
            self._copy(o.copy)

    def _copy(self, c: PlaceCopy) -> None:
        self.copies.append(c)
        self.creates.append(PushCreate(c.path, c.sha, c.size, copy=True))

    def _not_viewed(self, o: _Mem) -> None:
        if o.l is not None:
            self.remove.append(RemoveLocal(o.l.path))
        if o.b is not None and o.push not in ("delete", "hold"):
            self.book.append(DropBase(o.m))

    def _viewed(self, o: _Mem, view: tuple[str, str, int]) -> None:
        m, lo = o.m, o.l
        vpath, vsha, vsize = view
        if lo is not None and lo.path != vpath:
            self.moves.append((m, lo.path, vpath))
        if lo is None or lo.sha != vsha:
            self.mats.append(Materialise(m, vpath, vsha, vsize))
        elif o.set_id:
            self.book.append(SetLocalMemoryId(vpath, m))
        r = o.remote_entry
        target = BaseEntry(m, r.path, r.sha, r.size)
        if o.b != target and not o.pending:
            self.book.append(SetBase(target))

    def _skip(self, o: _Mem) -> None:
        prev = self.inp.skipped.get(o.m)
        if o.skip is None:
            if prev is not None:
                self.book.append(Unskip(o.m))
            return
        kind, reason = o.skip
        r = o.remote_entry
        fresh = prev is None or (prev.path, prev.sha) != (r.path, r.sha)
        if fresh:
            self.book.append(Skip(o.m, r.path, r.sha, r.size, reason))
        if fresh or o.keep:
            self.notes.append(Notice(kind, o.local_entry.path if o.keep else r.path, reason, kept=o.keep))

    def _push(self, o: _Mem) -> None:
        m, lo = o.m, o.l
        if o.push == "hold":
            if m not in self.held:
                self.holds.append(HoldDelete(m, o.base_entry.path, self.inp.deletions))
        elif m in self.held:
            self.book.append(ClearHeld(m))
        if o.push == "delete":
            self.holds.append(PushDelete(m, o.remote_entry.path, o.remote_entry.sha))
        elif o.push == "update" and not o.suppressed:
            self.updates.append(o)
        elif (
            o.push == "update"
            and lo is not None
            and o.view == (lo.path, lo.sha, lo.size)
            and self.refused.get(lo.path) == lo.sha
        ):
            self.still_refused.add(lo.path)

    def new_file(self, path: str, f: LocalFile, fate: str) -> None:
        if fate in ("keep", "drop", "copied"):
            if fate == "keep":
                self.keep.append(KeepLocal(path, f.sha))
            if fate == "copied":
                self._copy(self.new_copies[path])
            self.remove.append(RemoveLocal(path))
            return
        if f.memory_id is not None and fate != "adopted":
            self.book.append(SetLocalMemoryId(path, None))  # a stale id must not claim a memory
        if fate in ("push", "blocked") and self.refused.get(path) == f.sha:
            self.still_refused.add(path)
        elif fate == "push" and not f.bad_utf8:
            self.creates.append(PushCreate(path, f.sha, f.size))

    def closing_book(self, memories: Iterable[str]) -> None:
        """Clear what the journal remembers of memories and paths the plan no longer knows."""
        known = set(memories)
        if self.inp.remote_changed:  # otherwise `remote` was built from base and says nothing of these
            self.book += [Unskip(m) for m in sorted(self.inp.skipped) if m not in known]
        self.book += [ClearHeld(m) for m in sorted(self.held) if m not in known]
        self.book += [ClearRefused(p) for p in sorted(self.refused) if p not in self.still_refused]

    def plan(self, view_moves: list[MoveLocal], update_stages: list[tuple[PushUpdate, ...]]) -> Plan:
        view: list[ViewAction] = [
            *sorted(self.keep, key=lambda a: a.path),
            *sorted(self.remove, key=lambda a: a.path),
            *view_moves,
            *sorted(self.mats, key=lambda a: a.path),
            *sorted(self.copies, key=lambda a: a.path),
        ]
        stages = [
            tuple(sorted(self.holds, key=_push_key)),
            *update_stages,
            tuple(sorted(self.creates, key=lambda a: a.path)),
        ]
        return Plan(
            view=tuple(view),
            bookkeeping=tuple(sorted(self.book, key=_book_key)),
            notices=tuple(sorted(self.notes, key=lambda n: (n.path, n.kind))),
            push_stages=tuple(s for s in stages if s),
            merge_wanted=tuple(self.wanted),
        )


_BOOK_ORDER = {
    DropBase: 0,
    SetBase: 1,
    SetLocalMemoryId: 2,
    Skip: 3,
    Unskip: 4,
    ClearHeld: 5,
    ClearRefused: 6,
}


def _book_key(a: Any) -> tuple:
    if isinstance(a, SetBase):
        return (1, a.entry.path)
    return (_BOOK_ORDER[type(a)], a.path if isinstance(a, (SetLocalMemoryId, ClearRefused)) else a.memory_id)


def _push_key(a: Any) -> tuple:
    return (0 if isinstance(a, HoldDelete) else 1, a.path, a.memory_id)
