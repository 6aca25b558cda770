"""One store's push (SEMANTICS.md#d-tick): the plan's stages in order (holds and deletes, rename
waves, creates), each stage concurrently and bounded; as batch writes where the service has them
(a memfs service), else one request per change (the hosted API). Every answer is booked as it
comes: a landed change moves the baseline, a refusal is remembered until the file changes, and
someone else's change (404/409) waits for the next pull, where the store wins, and is not sent
again before it: the same request would only meet the same answer. A write answered 400 may mean
the store was archived (SEMANTICS.md#d-archived): the store is read once to tell, and an archived
store is pushed to no more (its staged changes stay staged, with a kept copy each).

The engine decides *when* a store pushes and what a failed push means for the next tick; this
module only sends and books.
"""

from __future__ import annotations

import logging
from typing import Any

from memfs.batching import batch_chunks
from memfs.client.errors import ApiError
from memfs.protocol import WriteReason
from memfs.records import StoreInfo
from memfs.sync import plan as P
from memfs.sync.bounded import gather
from memfs.sync.ports import Journal, StoreApi, View
from memfs.sync.report import StoreSync, TickReport

log = logging.getLogger("memfs.sync")

# Batch writes of one stage in flight at once: the service writes one store's batches one after
# the other anyway (one transaction each), so more would only wait there, against the timeout.
BATCH_CONCURRENCY = 4

Sent = P.PushDelete | P.PushUpdate | P.PushCreate


def write_reason(a: P.PushAction) -> WriteReason | None:
    """Why the mount makes this write, for the service to count (protocol.WRITE_REASON_HEADER)."""
    if isinstance(a, P.PushUpdate) and a.merge:
        return "merge"
    if isinstance(a, P.PushCreate) and a.copy:
        return "conflict-copy"
    return None


def batch_op(st: Journal, a: Sent) -> dict[str, Any]:
    """A push action as one operation of a batch write: the body of its single request."""
    if isinstance(a, P.PushCreate):
        return {"type": "create", "path": a.path, "content": st.get_blob(a.sha).decode("utf-8")}
    if isinstance(a, P.PushUpdate):
        op: dict[str, Any] = {
            "type": "update",
            "memory_id": a.memory_id,
            "precondition": {"type": "content_sha256", "content_sha256": a.expected_sha},
        }
        if a.new_sha:
            op["content"] = st.get_blob(a.new_sha).decode("utf-8")
        if a.new_path is not None:
            op["path"] = a.new_path
        return op
    op = {"type": "delete", "memory_id": a.memory_id}
    if a.expected_sha:
        op["expected_content_sha256"] = a.expected_sha
    return op


class Pusher:
    """Sends a store's push stages and books each answer in the journal and the view."""

    def __init__(self, client: StoreApi, state: Journal, fs: View):
        self.client = client
        self.state = state
        self.fs = fs
        self.has_batch: bool | None = None  # the batch-write extension; learned on the first push
        # store id -> (the counter applied when they were answered, the changes answered 404/409):
        # someone else's change, settled by the next pull. Until a pull applies a new counter the
        # plan, standing on the same baseline, asks for them again (a busy live mount's next wave
        # after progress); sent again they would meet the same answer, so they wait for that pull.
        self._answered: dict[str, tuple[int, set[Sent]]] = {}
        # store id -> its `archived_at`, learned when a write was refused: pushed to no more.
        self.archived: dict[str, str] = {}
        # store id -> the writes of the push under way answered 400, booked once the store says
        # whether it was archived (then they stay staged) or not (then they are refused).
        self._refusals: dict[str, list[tuple[P.PushUpdate | P.PushCreate, ApiError]]] = {}

    async def push_store(
        self,
        store: StoreInfo,
        stages: list[tuple[P.PushAction, ...]],
        report: TickReport,
        tally: StoreSync,
        *,
        batches: bool,
    ) -> None:
        """Stages in order, each concurrently; `batches`: the service may have batch writes (it
        has the counter). Raises ApiError/Unreachable when the push failed (what did not land
        stays staged)."""

        async def one(a: P.PushAction) -> None:
            await self._push_one(store, a, report, tally)

        sid = store.store_id
        if sid in self.archived:
            return  # it takes no write (SEMANTICS.md#d-archived): what is staged stays staged
        self._refusals[sid] = []
        try:
            for stage in stages:
                stage = self._not_answered(store, stage)
                left = (
                    await self._push_batched(store, stage, report, tally)
                    if batches and self.has_batch is not False
                    else list(stage)
                )
                # Requests in flight are bounded by the store (its slots, shared by all stores); this only caps
                # how many of one push stage's changes wait for a slot at once.
                await gather(left, one, self.client.concurrency)
                if self._refusals[sid] and await self._archived_now(store, stages):
                    return
        finally:
            self._refusals.pop(sid, None)

    async def _archived_now(self, store: StoreInfo, stages: list[tuple[P.PushAction, ...]]) -> bool:
        """After a stage whose writes were answered 400: was the store archived? One read of the
        store object (its `archived_at`), only when a write was refused: a refused change is not
        sent again until it changes, so this costs nothing in the normal case. A failed read
        fails the push (the refused changes stay staged; the next tick asks again)."""
        sid = store.store_id
        answer = await self.client.get_store(sid)
        refusals, self._refusals[sid] = self._refusals[sid], []
        at = answer.get("archived_at")
        if not at:
            for a, exc in refusals:
                self._refused(store, a, exc)
            return False
        self.archived[sid] = str(at)
        self.fs.store_archived(sid)
        kept = 0
        for stage in stages:  # what is staged, kept as plain files too: the store will never take it
            for act in stage:
                if isinstance(act, (P.PushCreate, P.PushUpdate)):
                    path, sha = (
                        (act.local_path, act.local_sha)
                        if isinstance(act, P.PushUpdate)
                        else (act.path, act.sha)
                    )
                    if not path.startswith(P.TEMP_PREFIX):
                        self.state.keep_copy(sid, path, self.state.get_blob(sha))
                        kept += 1
        self.fs.add_notice(
            sid,
            "store-archived",
            "/",
            f"the store was archived at {at}: it takes no new or changed memory, so this folder is "
            f"read-only from now on; {kept} change(s) not on the store stay staged (`memfs status` "
            f"names them), a copy of each in the state dir's kept/{sid}/",
        )
        log.warning(
            "%s: the store was archived at %s; read-only from now on, %d change(s) kept", store.slug, at, kept
        )
        return True

    def _not_answered(self, store: StoreInfo, stage: tuple[P.PushAction, ...]) -> tuple[P.PushAction, ...]:
        """`stage` less the changes answered 404/409 since the last pull applied (see `_answered`)."""
        sid = store.store_id
        counter, answered = self._answered.get(sid, (None, set()))
        if counter is None or counter != self.state.store_counter(sid):
            self._answered.pop(sid, None)  # a pull applied since: the plan stands on what it read
            return stage
        waiting = [a for a in stage if a in answered]
        if not waiting:
            return stage
        log.debug("%s: %d change(s) answered 404/409 wait for the next pull", store.slug, len(waiting))
        return tuple(a for a in stage if a not in answered)

    def _answered_conflict(self, store: StoreInfo, a: Sent) -> None:
        """Remember `a` was answered 404/409 at the applied counter. A store with no counter (the
        hosted API) lists on every tick, and a listing settles the conflict: nothing to remember."""
        sid = store.store_id
        counter = self.state.store_counter(sid)
        if counter is None:
            return
        if self._answered.get(sid, (None, set()))[0] != counter:
            self._answered[sid] = (counter, set())
        self._answered[sid][1].add(a)

    async def _push_batched(
        self, store: StoreInfo, stage: tuple[P.PushAction, ...], report: TickReport, tally: StoreSync
    ) -> list[P.PushAction]:
        """A stage's changes as batch writes (independent items, so its batches may overlap);
        each item's answer is booked as its single request's would be. Returns what is left to
        send one by one: holds (nothing to send), the writes with a reason (a merge, a conflict
        copy: a request header says so, and a batch has one for all its items; they are few), and
        everything when the service has no batch."""
        sid, st = store.store_id, self.state
        sent: list[Sent] = []
        left: list[P.PushAction] = []
        for a in stage:
            if isinstance(a, (P.PushDelete, P.PushUpdate, P.PushCreate)) and write_reason(a) is None:
                sent.append(a)
            else:
                left.append(a)
        if not sent:
            return left
        ops = [batch_op(st, a) for a in sent]
        unsent: list[list[int]] = []
        failures: list[BaseException] = []

        async def send(chunk: list[int]) -> None:
            try:
                results = await self.client.write_batch(sid, [ops[i] for i in chunk])
            except ApiError as exc:
                if exc.status != 404:  # a 404 names the store: each item is answered with it
                    raise
                results = [
                    {
                        "type": "error",
                        "status": exc.status,
                        "error": {"type": exc.type, "message": exc.message},
                    }
                ] * len(chunk)
            if results is None:
                self.has_batch = False
                unsent.append(chunk)
                return
            self.has_batch = True
            for i, r in zip(chunk, results, strict=True):
                try:
                    if r.get("type") == "error":
                        err = r.get("error") or {}
                        answer = ApiError(
                            int(r.get("status", 0)),
                            str(err.get("type", "error")),
                            str(err.get("message", "")),
                            r,
                        )
                        self._push_failed(store, sent[i], answer, report, tally)
                    else:
                        self._pushed(store, sent[i], r, report, tally)
                except Exception as failure:  # book the rest of the batch first; then fail the push
                    failures.append(failure)

        await gather(batch_chunks(ops), send, BATCH_CONCURRENCY)
        if failures:
            raise failures[0]
        return left + [sent[i] for chunk in unsent for i in chunk]

    async def _push_one(
        self, store: StoreInfo, a: P.PushAction, report: TickReport, tally: StoreSync
    ) -> None:
        sid, st, c = store.store_id, self.state, self.client
        if isinstance(a, P.HoldDelete):
            st.add_delete_held(sid, a.memory_id)
            self.fs.add_notice(
                sid, "delete-held", a.path, f"deleted here, kept on the store (--sync-deletions {a.reason})"
            )
            log.warning("%s: %s deleted locally; not deleted on the store (%s)", store.slug, a.path, a.reason)
            return
        try:
            m: dict[str, Any] | None = None
            if isinstance(a, P.PushDelete):
                await c.delete_memory(sid, a.memory_id, expected_sha=a.expected_sha)
            elif isinstance(a, P.PushUpdate):
                content = st.get_blob(a.new_sha).decode("utf-8") if a.new_sha else None
                m = await c.update_memory(
                    sid,
                    a.memory_id,
                    expected_sha=a.expected_sha,
                    content=content,
                    path=a.new_path,
                    reason=write_reason(a),
                )
            else:
                content = st.get_blob(a.sha).decode("utf-8")
                m = await c.create_memory(sid, a.path, content, reason=write_reason(a))
        except ApiError as exc:
            self._push_failed(store, a, exc, report, tally)
            return
        self._pushed(store, a, m, report, tally)

    def _pushed(
        self, store: StoreInfo, a: Sent, m: dict[str, Any] | None, report: TickReport, tally: StoreSync
    ) -> None:
        """Book a push the store took (`m`: the memory it answered; None for a delete)."""
        sid, st = store.store_id, self.state
        if isinstance(a, P.PushDelete):
            st.drop_baseline(sid, a.memory_id)
        else:
            assert m is not None
            st.set_baseline(sid, m["id"], m["path"], m["content_sha256"], m["content_size_bytes"])
            tally.merge_tries.pop(m["id"], None)  # landed: the merges in a row end (plan.MERGE_TRIES)
            if isinstance(a, P.PushCreate):
                local = self.fs.local_file(sid, a.path)  # not local_view(): O(n) per create
                if local is not None and local.memory_id is None:
                    self.fs.set_memory_id(sid, a.path, m["id"])
        report.pushed += 1
        tally.pushed += 1

    def _push_failed(
        self, store: StoreInfo, a: Sent, exc: ApiError, report: TickReport, tally: StoreSync
    ) -> None:
        """Book a push the store answered with an error: refused (not retried until the file
        changes), someone else's change (the next tick settles it), or raise: the push failed."""
        sid = store.store_id
        if isinstance(a, P.PushDelete) and exc.status == 404:  # already gone: what was asked
            self._pushed(store, a, None, report, tally)
            return
        if exc.refused:
            if isinstance(a, P.PushDelete):
                # A delete carries no content to refuse: nothing to remember against a file (there
                # is none). It stays staged and the next tick asks again.
                log.warning("%s: delete of %s refused: %s", store.slug, a.path, exc.message)
                return
            if exc.status == 400 and sid in self._refusals:  # archived? `_archived_now` books it
                self._refusals[sid].append((a, exc))
                return
            self._refused(store, a, exc)
        elif exc.status in (404, 409):
            # Someone else changed the store: no retry; the next tick's listing settles it.
            log.info("%s: %s answered %s; the next tick settles it", store.slug, type(a).__name__, exc.type)
            self._answered_conflict(store, a)
            report.superseded += 1
            if isinstance(a, P.PushUpdate) and a.merge and exc.status == 409:  # see plan.MERGE_TRIES
                tally.merge_tries[a.memory_id] = tally.merge_tries.get(a.memory_id, 0) + 1
        else:
            raise exc

    def _refused(self, store: StoreInfo, a: P.PushUpdate | P.PushCreate, exc: ApiError) -> None:
        """The store will not take this content: remembered until the file changes."""
        path, sha = (a.local_path, a.local_sha) if isinstance(a, P.PushUpdate) else (a.path, a.sha)
        self.state.set_refused(store.store_id, path, sha, exc.message)
        self.fs.add_notice(store.store_id, "upload-refused", path, f"the store refused it: {exc.message}")
        log.warning("%s: upload of %s refused: %s", store.slug, path, exc.message)
