"""One store's pull, planned and applied to the view and the baseline (SEMANTICS.md#d-tick).

`plan_pull` gathers the plan's inputs from the view and the journal; `apply_plan` carries out its
view and bookkeeping actions without awaiting, so every store's view changes atomically with
respect to the FUSE handlers (the caller holds one state transaction around it). The decisions
themselves are plan.py's (pure).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime

from memfs.protocol import Deletions, OnConflict
from memfs.records import BaseEntry, LocalFile, StoreInfo
from memfs.sync import plan as P
from memfs.sync.narrow import narrowed_inputs
from memfs.sync.ports import Journal, View
from memfs.sync.remote import Pulled

log = logging.getLogger("memfs.sync")

NOTICES_PER_KIND = 20  # per store and sync; past it, one line stands for the rest


def plan_pull(
    fs: View,
    state: Journal,
    store: StoreInfo,
    base: Mapping[str, BaseEntry],
    remote: dict[str, P.RemoteEntry],
    order: list[str],
    *,
    remote_changed: bool,
    deletions: Deletions,
    max_files: int,
    max_bytes: int,
    on_conflict: OnConflict = "store-wins",
    merges: Mapping[P.MergeKey, P.MergeResult] | None = None,
    copy_who: str = "agent",
    copy_when: datetime | None = None,
    merge_tries: Mapping[str, int] | None = None,
) -> P.Plan:
    """The plan of one store's pull on the view as it is now (the conflict settings: SEMANTICS.md#d-merge)."""
    sid = store.store_id
    inputs = P.Inputs(
        base=base,
        local=fs.local_view(sid),
        remote=remote,
        remote_order=tuple(order),
        dirty=frozenset(fs.dirty_paths(sid)),
        refused=state.refused(sid),
        skipped=state.skipped(sid),
        deletes_held=frozenset(state.deletes_held(sid)),
        access=store.access,
        deletions=deletions,
        max_files=max_files,
        max_bytes=max_bytes,
        remote_changed=remote_changed,
        on_conflict=on_conflict,
        merges=merges or {},
        copy_who=copy_who,
        copy_when=copy_when,
        merge_tries=merge_tries or {},
    )
    return P.plan_store(inputs)


def plan_narrowed(
    fs: View,
    state: Journal,
    store: StoreInfo,
    base: Mapping[str, BaseEntry],
    base_remote: Mapping[str, P.RemoteEntry],
    dirs: Mapping[str, int],
    remote: dict[str, P.RemoteEntry],
    *,
    deletions: Deletions,
    max_files: int,
    max_bytes: int,
) -> P.Plan | None:
    """`plan_pull`'s plan for a store whose view equals its baseline (the caller knows: nothing
    staged), made on the memories the remote changes name only (sync/narrow.py), or None where
    the whole store must be planned."""
    sid = store.store_id
    if state.skipped(sid) or state.refused(sid) or state.deletes_held(sid):
        return None
    inputs = narrowed_inputs(
        base,
        base_remote,
        dirs,
        remote,
        lambda path: fs.local_file(sid, path),
        access=store.access,
        deletions=deletions,
        max_files=max_files,
        max_bytes=max_bytes,
    )
    if inputs is None:
        return None
    return P.plan_store(inputs)


def maybe_staged(fs: View, sid: str, base: Mapping[str, BaseEntry]) -> bool:
    """A cheap test (no plan) that the view may differ from the baseline: an idle tick over
    many files must not cost a plan per store on the thread that serves FUSE."""
    local = fs.local_view(sid)
    if len(local) != len(base):
        return True
    by_id = {b.memory_id: b for b in base.values()}
    for f in local.values():
        b = by_id.get(f.memory_id) if f.memory_id is not None else None
        if b is None or b.path != f.path or b.sha != f.sha:
            return True
    return False


def summarise_notices(notices: Iterable[P.Notice], limit: int = NOTICES_PER_KIND) -> list[P.Notice]:
    """One sync's notices as lines: a mass event (a 10,000-memory store on a 2,000-file mount is
    8,000 over-limit memories) is `limit - 1` lines and one that counts the rest, instead of
    thousands of which the notices file keeps the last 100. A notice whose content was kept is
    always its own line: it names where the agent's version is."""
    counts: dict[str, int] = {}
    for n in notices:
        if not n.kept:
            counts[n.kind] = counts.get(n.kind, 0) + 1
    out: list[P.Notice] = []
    seen: dict[str, int] = {}
    for n in notices:
        if n.kept or counts[n.kind] <= limit:
            out.append(n)
            continue
        i = seen[n.kind] = seen.get(n.kind, 0) + 1
        if i < limit:
            out.append(n)
        elif i == limit:
            rest = counts[n.kind] - limit
            out.append(
                P.Notice(
                    n.kind,
                    n.path,
                    f"{n.details}; and {rest} more {n.kind} path(s) in this sync, not listed one by one",
                )
            )
    return out


def _iso_to_ns(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1e9)
    except ValueError:
        return None


def apply_plan(
    fs: View, state: Journal, store: StoreInfo, plan: P.Plan, pulled: Pulled, *, keep_open: bool = False
) -> frozenset[str]:
    """Apply the plan's view and bookkeeping actions. Runs without awaiting: atomic w.r.t. FUSE
    handlers. Returns the busy paths that deferred it (a file open with unflushed writes; with
    `keep_open`, a live pull's, any open file: close-to-open, sync/holds.py): then nothing was
    applied. Empty: applied."""
    if plan.empty:
        return frozenset()
    sid = store.store_id
    busy = fs.dirty_paths(sid) | fs.open_paths(sid) if keep_open else fs.dirty_paths(sid)
    waits = busy & _touched(plan)
    if waits:
        # A file open with unflushed writes: leave the whole store for the next tick rather
        # than override half an edit (the counter is not advanced, so nothing is missed). A live
        # pull held back what touched its open files (sync/holds.py); one opened while it
        # fetched is caught here.
        return frozenset(waits)
    kept = _ViewSteps(fs, state, sid, pulled).run(plan.view)
    _apply_bookkeeping(fs, state, sid, plan.bookkeeping)
    for n in summarise_notices(plan.notices):
        details = n.details
        if n.kept and n.path in kept:
            details = f"{details} (your version is kept at {kept[n.path]})"
        fs.add_notice(sid, n.kind, n.path, details)
        log.warning("%s %s %s %s", store.slug, n.kind, n.path, details)
    return frozenset()


def _touched(plan: P.Plan) -> set[str]:
    """Every path a view action of the plan names."""
    return {
        p
        for a in plan.view
        for p in (getattr(a, "path", None), getattr(a, "old_path", None), getattr(a, "new_path", None))
        if p
    }


class _ViewSteps:
    """The plan's view actions, in order, on one store's view."""

    def __init__(self, fs: View, state: Journal, sid: str, pulled: Pulled):
        self.fs, self.state, self.sid, self.pulled = fs, state, sid, pulled
        self.kept: dict[str, str] = {}  # path -> where the agent's version was kept
        # A run of streamed content (a first download's whole store) is placed in one go.
        self.placing: list[tuple[str, str | None, str, int, int | None]] = []

    # The view's directories and files, read when an action needs them (each is a walk of the
    # store's view: a pull of one memory of 2,000 needs neither).
    @functools.cached_property
    def dirs(self) -> set[str]:
        return self.fs.dir_paths(self.sid)

    @functools.cached_property
    def files(self) -> Mapping[str, LocalFile]:
        return self.fs.local_view(self.sid)

    def run(self, actions: Iterable[P.ViewAction]) -> dict[str, str]:
        """Apply `actions`; returns the kept copies by path."""
        for a in actions:
            if isinstance(a, P.Materialise) and self._placeable(a):
                mtime_ns = _iso_to_ns(self.pulled.take_mtime(a.memory_id))
                self.placing.append((a.path, a.memory_id, a.sha, a.size, mtime_ns))
                continue
            self._place()  # in order: what follows may depend on it
            self._one(a)
        self._place()
        return self.kept

    def _placeable(self, a: P.Materialise) -> bool:
        """Content stored (and hashed) as the snapshot streamed, at a path no directory holds."""
        return a.sha in self.pulled.streamed and a.sha not in self.pulled.contents and a.path not in self.dirs

    def _place(self) -> None:
        if self.placing:
            self.fs.apply_stored_many(self.sid, list(self.placing))
            self.placing.clear()

    def _one(self, a: P.ViewAction) -> None:
        fs, sid = self.fs, self.sid
        if isinstance(a, P.KeepLocal):
            self.kept[a.path] = str(self.state.keep_copy(sid, a.path, self.state.get_blob(a.sha)))
        elif isinstance(a, P.Materialise):
            self._clear_empty_dir(a.path)
            self._materialise(a)
        elif isinstance(a, P.MoveLocal):
            self._clear_empty_dir(a.new_path)
            fs.move_path(sid, a.old_path, a.new_path)
        elif isinstance(a, P.RemoveLocal):
            fs.remove_path(sid, a.path)
        elif isinstance(a, P.PlaceCopy):  # the agent's content (its blob is the view's): a new file
            self._clear_empty_dir(a.path)
            fs.apply_stored(sid, a.path, None, a.sha, a.size, None)

    def _materialise(self, a: P.Materialise) -> None:
        mtime_ns = _iso_to_ns(self.pulled.take_mtime(a.memory_id))
        data = self.pulled.contents.get(a.sha)
        if data is None and a.sha in self.pulled.streamed:  # stored (and hashed) as the snapshot streamed
            self.fs.apply_stored(self.sid, a.path, a.memory_id, a.sha, a.size, mtime_ns)
            return
        if data is None:
            data = self.state.get_blob(a.sha)
        self.fs.apply_remote(self.sid, a.path, a.memory_id, a.sha, data, mtime_ns)  # stores the blob itself

    def _clear_empty_dir(self, path: str) -> None:
        # Directories are local only (the store has none): an empty one may stand where the
        # store now puts a file. One holding files is a clash the plan has already skipped.
        if (
            self.fs.local_file(self.sid, path) is None
            and path in self.dirs
            and not any(p.startswith(path + "/") for p in self.files)
        ):
            self.fs.remove_path(self.sid, path)
            self.dirs.discard(path)


def _apply_bookkeeping(fs: View, state: Journal, sid: str, actions: Iterable[P.BookAction]) -> None:
    bases: list[tuple[str, str, str, int]] = []  # a run of SetBase: one statement
    for book in actions:
        if isinstance(book, P.SetBase):
            b = book.entry
            bases.append((b.memory_id, b.path, b.sha, b.size))
            continue
        if bases:
            state.set_baselines(sid, bases)
            bases = []
        _book(fs, state, sid, book)
    if bases:
        state.set_baselines(sid, bases)


def _book(fs: View, st: Journal, sid: str, a: P.BookAction) -> None:
    if isinstance(a, P.SetBase):
        b = a.entry
        st.set_baseline(sid, b.memory_id, b.path, b.sha, b.size)
    elif isinstance(a, P.DropBase):
        st.drop_baseline(sid, a.memory_id)
    elif isinstance(a, P.SetLocalMemoryId):
        fs.set_memory_id(sid, a.path, a.memory_id)
    elif isinstance(a, P.Skip):
        st.set_skipped(sid, a.memory_id, a.path, a.sha, a.size, a.reason)
    elif isinstance(a, P.Unskip):
        st.clear_skipped(sid, a.memory_id)
    elif isinstance(a, P.ClearRefused):
        st.clear_refused(sid, a.path)
    elif isinstance(a, P.ClearHeld):
        st.clear_delete_held(sid, a.memory_id)
