"""One store's pull (SEMANTICS.md#d-tick): read what moved on the store, plan with the content
the plan needs at hand, apply the plan to the view and the baseline in one transaction.

`StorePull` holds what every store's pull shares: the reader (remote.py), the journal, the view,
the engine's options, and which stores were last found clean (nothing staged: the view is the
baseline) at which generation. The engine (engine.py) runs one per store and tick, concurrently;
each one's apply step is synchronous, so every store's view still changes atomically.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime

from memfs.records import BaseEntry, StoreInfo
from memfs.sync import plan as P
from memfs.sync.apply import apply_plan, maybe_staged, plan_narrowed, plan_pull
from memfs.sync.holds import NOTHING_HELD, Held, hold_open, staged_paths
from memfs.sync.merging import merge_wanted, missing_content
from memfs.sync.narrow import leaves_view_as_base
from memfs.sync.options import EngineOptions
from memfs.sync.ports import Journal, View
from memfs.sync.remote import Baseline, Pulled, StoreReader, in_path_order, worth_a_snapshot
from memfs.sync.report import StoreSync, TickReport

log = logging.getLogger("memfs.sync")


class StorePull:
    def __init__(self, reader: StoreReader, state: Journal, fs: View, options: EngineOptions):
        self.reader = reader
        self.state = state
        self.fs = fs
        self.options = options
        self.clean: dict[str, int] = {}  # store id -> state generation at which nothing was staged
        self._staged_at: dict[str, int] = {}  # store id -> state generation at which something was
        # store id -> what its last live pull held back for open files, and the store's counter then
        self.held: dict[str, tuple[Held, int | None]] = {}
        self._soon: set[str] = set()  # stores whose deferred live pull is looked at again at once
        # store id -> the open files that made its last live pull's apply wait (opened while it
        # fetched, or a quiet pull's, which holds nothing back), and the store's counter then
        self.waited: dict[str, tuple[Held, int | None]] = {}
        self._staged: dict[str, tuple[int, set[str]]] = {}  # store id -> (generation, `staged_paths`)

    def clean_at(self, sid: str) -> int | None:
        """The generation at which `sid` was last found clean (None: not since it changed)."""
        return self.clean.get(sid)

    async def pull(
        self,
        store: StoreInfo,
        counters: dict[str, int] | None,
        report: TickReport,
        *,
        has_counter: bool | None,
        turns: tuple[str | None, str | None] = (None, None),
        tally: StoreSync | None = None,
        read: bool = True,
        keep_open: bool = False,
        hold_staged: bool = False,
    ) -> list[tuple[P.PushAction, ...]]:
        """One store's pull: read what moved, fetch what the plan needs, apply; returns the push
        stages the plan left (none for a read-only store, or when the apply was deferred).
        `counters`: the stores' counters (None: no counter, SEMANTICS.md#d-no-counter); `turns`:
        the safety net's (the store whose feed is read over the wide window, the store listed
        whole); `keep_open`: a live pull's close-to-open (sync/holds.py): what moved at a file
        some process has open waits until it is closed, and with `hold_staged` (a busy mount) so
        does what moved at a staged path (its conflict is settled between commands); `tally`:
        where the store's merges and conflicts are counted (`memfs status`); `read` False: plan on
        the store as last read, asking it nothing (a write-through's first try)."""
        sid = store.store_id
        applied = self.state.store_counter(sid)
        remote_counter = counters.get(sid) if counters is not None else None
        moved = read and (counters is None or applied is None or remote_counter != applied)
        generation = self.state.generation(sid)
        if not moved and self.clean.get(sid) == generation:
            return []  # idle: nothing on either side changed since this store was last found clean
        baseline = self.reader.baseline(sid)
        base = baseline.entries
        if not moved and not maybe_staged(self.fs, sid, base):
            self.clean[sid] = generation
            return []
        pulled = Pulled()  # what this pull reads beside the list (a failed pull's is dropped with it)
        new_counter = applied
        if moved:
            remote, order, new_counter = await self.reader.read(
                store,
                applied,
                base,
                pulled,
                has_counter=has_counter,
                sizes=baseline.sizes,
                expect=baseline.remote,
                net=sid == turns[1],
                wide=self.reader.feed.wide if sid == turns[0] else None,
            )
            if new_counter is None:
                new_counter = remote_counter
            if counters is None and (remote is baseline.remote or remote == baseline.remote):
                self._feed_read(sid, pulled)  # nothing of the store to apply: the feed is read up to here
                # No counter (SEMANTICS.md#d-no-counter): an idle store reads as its baseline (nothing new in
                # its version feed, or a listing equal to it). Then nothing moved remotely, and the
                # idle test below applies as with a counter:
                # planning 8 x 2,000 unchanged files each tick took seconds on this thread.
                moved = False
                if self.clean.get(sid) == generation:
                    return []
                if not maybe_staged(self.fs, sid, base):
                    self.clean[sid] = generation
                    return []
            if remote is baseline.remote:  # the reader's cached dict (an unchanged listing): ours to change
                remote = dict(remote)
        else:
            # Nothing moved remotely: the store is as the baseline saw it (the reader's cached
            # dict, read at this generation; copied, as the fetch below may change it).
            remote = dict(baseline.remote)
            order = in_path_order(remote)
        clean = moved and self._is_clean(sid, generation, base)
        held = NOTHING_HELD
        holds = keep_open and moved and (clean or hold_staged)  # else apply_plan waits for the close
        now = remote  # the store as it is (what a held change would meet, pushed now)
        if holds:
            remote, order, held = self._hold_open(sid, remote, order, baseline, staged=not clean)
        # A clean store's pull plans the memories the store changed only (sync/narrow.py).
        narrow = baseline if clean else None
        # No await between the plan made last and its apply (see `_plan_with_content`).
        plan, new_counter, narrowed = await self._plan_with_content(
            store, base, remote, order, moved, pulled, new_counter, narrow, tally, snapshot=not held.memories
        )
        with self.state.transaction():  # one commit per store and tick: all of the plan or none of it
            deferred = apply_plan(self.fs, self.state, store, plan, pulled, keep_open=keep_open)
        if deferred:
            self._deferred(sid, soon=holds, waits=deferred if keep_open else None, counter=remote_counter)
            # A write-through's first try (`read` False) is itself planned on the store as last applied.
            pushes = read and store.access == "read_write"
            return (
                await self._push_unpulled(store, report, has_counter, tally, baseline.remote, now)
                if pushes
                else []
            )
        self._applied(sid, read=read)
        _tell(plan, report, tally)
        if narrowed and not plan.push_stages and leaves_view_as_base(plan):
            # The view was the baseline and the plan made both the store's: clean still, and the
            # cached baseline moved as the journal's did (no read of the whole store next time).
            self.reader.advance(sid, plan.bookkeeping)
            self.clean[sid] = self.state.generation(sid)
        if held.memories:
            # Not all of the store is in the view: its counter (and feed position) stay, so the
            # next pull reads the held changes again, once their files are closed.
            self.held[sid] = (held, remote_counter)
        else:
            self.held.pop(sid, None)
            self._feed_read(sid, pulled)
            if new_counter is not None:
                self.state.set_store_counter(sid, new_counter)
        if not moved and plan.empty:  # e.g. only held deletes or refused files differ: nothing to do
            self.clean[sid] = generation
        return _unheld(plan.push_stages, held, now) if store.access == "read_write" else []

    async def _push_unpulled(
        self,
        store: StoreInfo,
        report: TickReport,
        has_counter: bool | None,
        tally: StoreSync | None,
        applied: Mapping[str, P.RemoteEntry],
        now: Mapping[str, P.RemoteEntry],
    ) -> list[tuple[P.PushAction, ...]]:
        """The push stages of a pull whose apply waited for an open file (one being written, or a
        live pull's, one opened while it fetched): what is staged still goes out, planned on the
        store as last applied (`applied`, as a write-through's first try), less what would meet a
        change the store made meanwhile (`now`), which the pull settles once that file is closed.
        Else every staged change of the store would wait for that file's close: a writer or a
        reader may hold it for hours."""
        stages = await self.pull(store, None, report, has_counter=has_counter, tally=tally, read=False)
        changed = {m for m, e in now.items() if applied.get(m) != e} | (applied.keys() - now.keys())
        return _unheld(tuple(stages), Held(frozenset(changed), frozenset()), now)

    def _applied(self, sid: str, *, read: bool) -> None:
        """A pull of the store as it is (`read`) was applied: what the last one waited for is in
        the view. Not a plan on the store as last applied (`_push_unpulled`'s, right after a pull
        that waited, which must keep what that pull waits for)."""
        if read:
            self._soon.discard(sid)
            self.waited.pop(sid, None)

    def _deferred(self, sid: str, *, soon: bool, waits: frozenset[str] | None, counter: int | None) -> None:
        """The apply waited: nothing of this pull is in the view. `soon`: a live pull of a clean
        store, whose plan touched a file opened while the content was fetched; the next look
        (0.1 s) holds that file back. Every other time only: a plan that still touches an open
        file (a snapshot replaced what was held) waits a second like any deferred pull. `waits`:
        a live pull's, the open files it met (`waits_for_close`), with the store's `counter`."""
        self.held.pop(sid, None)
        if waits is not None:
            self.waited[sid] = (Held(frozenset(), waits), counter)
        if soon and sid not in self._soon:
            self._soon.add(sid)
        else:
            self._soon.discard(sid)

    def _hold_open(
        self,
        sid: str,
        remote: dict[str, P.RemoteEntry],
        order: list[str],
        baseline: Baseline,
        *,
        staged: bool,
    ) -> tuple[dict[str, P.RemoteEntry], list[str], Held]:
        """The store to plan against when the files open now keep their content, and with
        `staged` the staged ones keep theirs too (sync/holds.py)."""
        busy = self.fs.open_paths(sid) | self.fs.dirty_paths(sid)
        if staged:
            busy |= self.staged_paths(sid)
        if not busy:
            return remote, order, NOTHING_HELD
        kept, held = hold_open(remote, baseline.remote, busy, lambda path: self.fs.local_file(sid, path))
        if not held.memories:
            return remote, order, held
        log.debug(
            "pull %s: %d change(s) wait for %s to be closed", sid, len(held.memories), sorted(held.paths)
        )
        return kept, in_path_order(kept), held

    def pending_open(self, sid: str) -> bool:
        """The last live pull of `sid` left changes for open files (held back, or its apply
        deferred by a file opened meanwhile): the next look decides, not a second's back-off."""
        return sid in self.held or sid in self._soon

    def waits_for_close(self, sid: str, seen: int | None, *, settle: bool = False) -> bool:
        """The last live pull held changes back for open files (`_hold_open`), all of them are
        still open, and the store has not moved since (`seen`: the newest counter the watch
        saw): another pull now would hold the same back. `settle`: the pull would settle the
        staged changes, holding nothing back (a quiet mount's): it waits while any of those
        files is open, as its whole apply would; so it does while a file whose opening made the
        last pull's apply wait (`waited`) is open: pulled again and again, its staged changes
        would go out only once that file was closed (a reader may hold it for the whole session)."""
        got = self.held.get(sid)
        if got is None and settle:
            got = self.waited.get(sid)
        if got is None:
            return False
        held, counter = got
        if seen is not None and counter is not None and seen > counter:
            return False
        still = self.fs.open_paths(sid)  # (from the handles: the few open files, no walk)
        if settle:
            return bool(held.paths & (still | self.fs.dirty_paths(sid)))
        if held.paths <= still:
            return True
        still |= self.fs.dirty_paths(sid)
        return held.paths <= still or held.paths <= still | self.staged_paths(sid)

    def staged_paths(self, sid: str) -> set[str]:
        """The paths `sid`'s staged changes stand on (holds.py `staged_paths`): one walk of its
        view per state generation (every change to the view or the baseline moves it)."""
        generation = self.state.generation(sid)
        got = self._staged.get(sid)
        if got is None or got[0] != generation:
            got = self._staged[sid] = (
                generation,
                staged_paths(self.fs.local_view(sid), self.reader.baseline(sid).entries),
            )
        return got[1]

    def is_clean(self, sid: str) -> bool:
        """Nothing staged in the store (its view is its baseline): a live pull may run while the
        mount is busy (SEMANTICS.md#d-when). Found once per state generation, either way."""
        generation = self.state.generation(sid)
        if self.clean.get(sid) == generation:
            return True
        if self._staged_at.get(sid) == generation:
            return False
        if self._is_clean(sid, generation, self.reader.baseline(sid).entries):
            return True
        self._staged_at[sid] = generation
        return False

    def _is_clean(self, sid: str, generation: int, base: Mapping[str, BaseEntry]) -> bool:
        """Nothing staged: the view is the baseline (found so at this generation, or now)."""
        if self.clean.get(sid) == generation:
            return True
        if maybe_staged(self.fs, sid, base):
            return False
        self.clean[sid] = generation
        return True

    async def _plan_with_content(
        self,
        store: StoreInfo,
        base: Mapping[str, BaseEntry],
        remote: dict[str, P.RemoteEntry],
        order: list[str],
        moved: bool,
        pulled: Pulled,
        new_counter: int | None,
        narrow: Baseline | None = None,
        tally: StoreSync | None = None,
        *,
        snapshot: bool = True,
    ) -> tuple[P.Plan, int | None, bool]:
        """`pull`'s plan, with the content it needs at hand: (the plan, the counter to
        record, which a snapshot replaces, whether the plan is a narrowed one). `narrow`: the
        baseline of a clean store, whose plan may be made on the memories the store changed
        only (sync/narrow.py); `tally`: its merges in a row the store superseded (plan.MERGE_TRIES).
        `snapshot` False: a pull that holds changes back (holds.py) fetches what its plan needs, as
        a snapshot is the whole store, the held changes included."""
        sid = store.store_id
        # Fetch what the plan needs, then plan again on the view as it is *now*, and apply with no
        # await in between: an edit made while we fetched is never overwritten unseen. The plan is
        # a pure function of its inputs (plan_pull): when the fetch changed no remote entry and
        # the state's generation did not move (no write to the files, baseline, refused, skipped
        # or held deletes), planning again would give this plan again, so it is kept (a hosted
        # one-edit tick planned its 2,000-file store twice). Unflushed writes do not move the
        # generation: the plan does not depend on them, and apply_plan defers over a dirty path.
        plan: P.Plan | None = None
        snapped = narrowed = False
        merges: dict[P.MergeKey, P.MergeResult] = {}  # SEMANTICS.md#d-merge: asked for by the plan
        when = datetime.now(UTC)
        for _round in range(4):
            plan = None
            # (still clean: a close while content was fetched moves the generation)
            if narrow is not None and not snapped and self.clean.get(sid) == self.state.generation(sid):
                plan = plan_narrowed(
                    self.fs,
                    self.state,
                    store,
                    base,
                    narrow.remote,
                    narrow.sizes,
                    remote,
                    deletions=self.options.deletions,
                    max_files=self.options.max_files,
                    max_bytes=self.options.max_bytes,
                )
            narrowed = plan is not None
            if plan is None:
                plan = plan_pull(
                    self.fs,
                    self.state,
                    store,
                    base,
                    remote,
                    order,
                    remote_changed=moved,
                    deletions=self.options.deletions,
                    max_files=self.options.max_files,
                    max_bytes=self.options.max_bytes,
                    on_conflict=self.options.on_conflict,
                    merges=merges,
                    copy_who=self.options.conflict_who,
                    copy_when=when,
                    merge_tries=dict(tally.merge_tries) if tally is not None else None,  # (as of now)
                )
            planned_at = self.state.generation(sid)
            missing = {
                a.sha: a.memory_id
                for a in plan.view
                if isinstance(a, P.Materialise)
                and not pulled.has_content(a.sha)
                and not self.state.has_blob(a.sha)
            }
            merged = await merge_wanted(self.state, pulled, plan.merge_wanted)
            if merged.keys() - merges.keys():
                merges.update(merged)  # a merge made now: plan again with it
                continue
            missing |= missing_content(self.state, pulled, plan.merge_wanted)
            if not missing:
                break
            if moved and snapshot and not snapped and worth_a_snapshot(missing, remote):
                snapped = True
                snap = await self.reader.snapshot(store, pulled)
                if snap is not None:  # the store as it is now, content included: plan again on it
                    remote, order, new_counter = snap
                    continue
            changed = await self.reader.fetch(store, missing, pulled)
            if not changed and self.state.generation(sid) == planned_at and not plan.merge_wanted:
                break  # the same inputs: the plan made now would be this one, its content is here
            for m in changed:  # the memory moved on since it was listed: use what we fetched
                remote[m["id"]] = P.RemoteEntry(
                    m["id"], m["path"], m["content_sha256"], m["content_size_bytes"]
                )
            order = in_path_order(remote)
        assert plan is not None  # the loop ran at least once
        return plan, new_counter, narrowed

    def _feed_read(self, sid: str, pulled: Pulled) -> None:
        """Record where the store's version feed stands, once what it said is in the view."""
        if pulled.feed is not None and pulled.feed != self.state.feed_position(sid):
            self.state.set_feed_position(sid, pulled.feed)
        pulled.feed = None


def _unheld(
    stages: tuple[tuple[P.PushAction, ...], ...], held: Held, now: Mapping[str, P.RemoteEntry]
) -> list[tuple[P.PushAction, ...]]:
    """The push stages less what would meet a held change (`now`: the store as read): a staged
    memory the store changed meanwhile (its precondition, the baseline's sha, would meet a 409 at
    every busy pull: the hosted API has no counter to remember it by) and a create on the path of
    one; both are settled by the pull between commands."""
    if not held.memories:
        return list(stages)
    taken = {now[m].path for m in held.memories if m in now}
    out = []
    for stage in stages:
        kept = tuple(
            a
            for a in stage
            if not (isinstance(a, (P.PushUpdate, P.PushDelete)) and a.memory_id in held.memories)
            and not (isinstance(a, P.PushCreate) and a.path in taken)
        )
        if kept:
            out.append(kept)
    return out


def _tell(plan: P.Plan, report: TickReport, tally: StoreSync | None) -> None:
    """What an applied plan did, into the tick's report and the store's tally (`memfs status`)."""
    report.pulled += sum(1 for a in plan.view if isinstance(a, (P.Materialise, P.MoveLocal, P.RemoveLocal)))
    report.notices += plan.notices
    if tally is not None:
        tally.count_conflicts(plan)
