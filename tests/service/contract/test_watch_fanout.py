"""The watch's fan-out and the counter fast path's batch, in-process on SQLite and PostgreSQL.

What a write to a store watched by hundreds needs (scripts/loadtest, docs/PERFORMANCE.md's
service section): the fast-path reads of one event-loop step answered by one statement, each
request still checked for its own credential (`storage.counters_batch`, `CounterPath._batched`),
and a held watch answered from the counter its change source reported, with no read
(`WatchHub.publish`). Real storage underneath; no timing is asserted.
"""

from __future__ import annotations

import threading

import anyio
import pytest

from memfs.service.auth import hash_token
from memfs.service.counter_path import MAX_STATEMENTS_OUT, CounterPath
from memfs.service.metrics import Metrics
from memfs.service.storage import Actor, NotFound, ResourceSpec
from memfs.service.watch import WatchHub

pytestmark = pytest.mark.timeout(60)
A = Actor("api_actor", "apikey_test")


def _world(storage):
    """Stores a, b, c (a written twice); token t1's session attaches a and b, t2's only c, t3's
    session (attaching a) is archived."""
    a, b, c = (storage.create_store(n, "", {}).id for n in "abc")
    for i in range(2):
        storage.create_memory(a, f"/m{i}", "x", A, max_memories=100)
    sessions = {}
    for token, stores in (("t1", [a, b]), ("t2", [c]), ("t3", [a])):
        specs = [ResourceSpec(s, "read_write", None) for s in stores]
        sessions[token] = storage.create_session(specs, token_hash=hash_token(token), title=None, metadata={})
    storage.archive_session(sessions["t3"].id)
    return a, b, c


def test_counters_batch_reads_every_store_and_every_tokens_attachments(storage):
    a, b, c = _world(storage)
    tokens = [hash_token(t) for t in ("t1", "t2", "t3", "nobody")]
    counters, attached = storage.counters_batch(tokens, [a, b, c, "memstore_missing"])
    assert counters == {a: 2, b: 0, c: 0}  # a missing store is simply absent
    assert attached == {hash_token("t1"): {a, b}, hash_token("t2"): {c}}  # archived, unknown: nothing
    assert storage.counters_batch([], [b]) == ({b: 0}, {})


class _CountingStorage:
    """The real storage, counting the batched reads that reach it."""

    def __init__(self, storage):
        self._storage = storage
        self.batches: list[tuple[list[str], list[str]]] = []
        self.hold: threading.Event | None = None  # set: the first MAX_STATEMENTS_OUT wait for it

    def __getattr__(self, name):
        return getattr(self._storage, name)

    def counters_batch(self, tokens, ids, **kw):
        self.batches.append((list(tokens), list(ids)))
        if self.hold is not None and len(self.batches) <= MAX_STATEMENTS_OUT:
            assert self.hold.wait(30)
        return self._storage.counters_batch(tokens, ids, **kw)


def _batching_path(storage) -> tuple[CounterPath, _CountingStorage]:
    counting = _CountingStorage(storage)
    path = CounterPath(counting, "admin-key", Metrics())
    # No read on the loop, no async connections: every read goes through the batch on a worker
    # thread, as PostgreSQL's does under trio (the app in process).
    path.inline_read = None
    path.async_reader = None
    return path, counting


def test_reads_of_one_loop_step_are_one_statement_each_checked_for_its_own_credential(storage):
    a, b, c = _world(storage)
    path, counting = _batching_path(storage)
    asks = {
        "admin": (None, [a, b]),
        "t1": (hash_token("t1"), [a]),
        "t1 not attached": (hash_token("t1"), [a, c]),
        "t2": (hash_token("t2"), [c]),
        "archived": (hash_token("t3"), [a]),
        "unknown": (hash_token("nobody"), [c]),
        "missing store": (None, [a, "memstore_missing"]),
    }
    answers: dict[str, dict[str, int] | None] = {}

    async def main() -> None:
        async def ask(name: str) -> None:
            answers[name] = await path._read(*asks[name])

        async with anyio.create_task_group() as tg:
            for name in asks:
                tg.start_soon(ask, name)

    anyio.run(main)
    assert answers == {
        "admin": {a: 2, b: 0},
        "t1": {a: 2},
        "t1 not attached": None,
        "t2": {c: 0},
        "archived": None,
        "unknown": None,
        "missing store": None,  # None: the full path answers these, with its error
    }
    assert len(counting.batches) == 1  # one statement for all seven
    # and a read after that batch is a new statement: it sees what was committed since
    storage.create_memory(c, "/later", "x", A, max_memories=100)
    assert anyio.run(path._read, hash_token("t2"), [c]) == {c: 1}
    assert len(counting.batches) == 2


def test_reads_arriving_while_the_statements_are_out_go_out_together_after_them(storage):
    """With MAX_STATEMENTS_OUT batches at the database, the reads that arrive meanwhile — over
    many loop steps — wait in one open batch and go out as one statement when one comes back:
    the batches grow with the load instead of the database's queue. Each still gets its own
    answer, read after it arrived."""
    a, b, c = _world(storage)
    path, counting = _batching_path(storage)
    counting.hold = threading.Event()
    later = {
        "admin": (None, [c]),
        "t1": (hash_token("t1"), [a, b]),
        "t1 not attached": (hash_token("t1"), [c]),
        "t2": (hash_token("t2"), [c]),
        "archived": (hash_token("t3"), [a]),
    }
    answers: dict[str, dict[str, int] | None] = {}

    async def main() -> None:
        async def ask(name: str, token_hash, ids) -> None:
            answers[name] = await path._read(token_hash, ids)

        async with anyio.create_task_group() as tg:
            try:
                for i in range(MAX_STATEMENTS_OUT):  # each alone in its loop step: one statement each
                    tg.start_soon(ask, f"first {i}", None, [a])
                    while len(counting.batches) <= i:
                        await anyio.sleep(0.01)
                for name, (token_hash, ids) in later.items():  # each in a later loop step
                    tg.start_soon(ask, name, token_hash, ids)
                    await anyio.sleep(0.02)
                assert len(counting.batches) == MAX_STATEMENTS_OUT and not answers  # they all wait
                storage.create_memory(c, "/meanwhile", "x", A, max_memories=100)
            finally:
                counting.hold.set()

    anyio.run(main)
    assert len(counting.batches) == MAX_STATEMENTS_OUT + 1  # the five later reads: one statement
    assert sorted(counting.batches[-1][1]) == sorted([a, b, c])
    assert answers == {
        **{f"first {i}": {a: 2} for i in range(MAX_STATEMENTS_OUT)},
        "admin": {c: 1},  # the write made while it waited: read after it arrived
        "t1": {a: 2, b: 0},
        "t1 not attached": None,
        "t2": {c: 1},
        "archived": None,
    }


def test_postgresql_async_reader_one_prepared_statement_for_every_batch(storage, backend_kind):
    """The fast path's reads on asyncio (PostgreSQL): the same answers as `storage.counters_batch`
    whatever the batch's size, ids that a `text[]` literal must quote taken as data, and one
    prepared statement per shape (admin only, or with tokens) on each connection, not one per
    batch size."""
    if backend_kind != "postgresql":
        pytest.skip("the async reader is PostgreSQL's")
    a, b, c = _world(storage)
    tokens = [hash_token(t) for t in ("t1", "t2", "t3", "nobody")]
    odd = ['memstore_"q"', "memstore_\\", "memstore_a,b", "memstore_{}", "memstore_ sp", "NULL"]
    before_the_write = storage.counters_batch(tokens, [a, b, c, *odd])
    reader = storage.backend.async_counter_reader()
    seen: list[object] = []

    async def main() -> None:
        assert reader.available()
        try:
            for ids in ([a], [a, b], [a, b, c, *odd]):
                seen.append(await reader.counters_batch([], ids))
                seen.append(await reader.counters_batch(tokens, ids))
            storage.create_memory(b, "/later", "x", A, max_memories=100)
            seen.append(await reader.counters_batch(tokens[:1], [b]))  # read anew: the write shows
            cur = await reader._get()
            try:
                await cur.execute("SELECT count(*) FROM pg_prepared_statements")
                seen.append((await cur.fetchone())[0])
            finally:
                await reader._put(cur, True)
        finally:
            await reader.aclose()

    anyio.run(main, backend="asyncio")
    t1, t2 = hash_token("t1"), hash_token("t2")
    assert seen == [
        ({a: 2}, {}),
        ({a: 2}, {t1: {a}}),
        ({a: 2, b: 0}, {}),
        ({a: 2, b: 0}, {t1: {a, b}}),
        ({a: 2, b: 0, c: 0}, {}),
        ({a: 2, b: 0, c: 0}, {t1: {a, b}, t2: {c}}),
        ({b: 1}, {t1: {b}}),
        2,  # the two statements, prepared once each on the one connection used
    ]
    assert seen[5] == before_the_write  # as the storage's own statement


def test_a_held_watch_is_answered_from_the_reported_counter_without_a_read(storage):
    a, b, _ = _world(storage)
    hub = WatchHub(storage)
    reads: list[list[str]] = []

    async def counting_read(ids):
        reads.append(list(ids))
        return storage.get_counters(ids)

    hub.fast_read = counting_read
    answers = []

    async def main() -> None:
        async def hold() -> None:
            answers.append(await hub.wait({a: 2, b: 0}, 30))

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(hold)
            while len(hub._by_store.get(a, ())) < 3:  # all three registered and read
                await anyio.sleep(0.01)
            await anyio.sleep(0.05)
            hub.publish(a, 2)  # what they read already (a late notification): not news
            hub.publish(a, 1)  # an older commit's: not news either
            assert not answers and len(reads) == 3
            hub.publish(b, 5)

    anyio.run(main)
    assert answers == [(True, {a: 2, b: 5})] * 3
    assert len(reads) == 3  # the three first reads; the wake-up read nothing


def test_a_report_only_a_read_can_tell_reads_again(storage):
    """A deleted store (a report without a counter) and a reconnect (publish_all) are re-read:
    the deleted store's watch then raises what the route answers (404)."""
    a, b, _ = _world(storage)
    hub = WatchHub(storage)
    outcome: list[object] = []

    async def main() -> None:
        async def hold(known) -> None:
            try:
                outcome.append(await hub.wait(known, 30))
            except NotFound as e:
                outcome.append(e)

        async with anyio.create_task_group() as tg:
            tg.start_soon(hold, {b: 0})
            while not hub._by_store.get(b):
                await anyio.sleep(0.01)
            await anyio.sleep(0.05)
            hub.publish_all()  # nothing moved: re-read, "unchanged"
        assert outcome == [(False, {b: 0})]
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold, {a: 2})
            while not hub._by_store.get(a):
                await anyio.sleep(0.01)
            await anyio.sleep(0.05)
            storage.delete_store(a)
            hub.publish(a, None)

    anyio.run(main)
    assert isinstance(outcome[1], NotFound)


def test_a_store_id_holding_nul_is_left_to_the_full_path_alone_and_its_batch_is_answered(storage):
    """No store id holds a NUL, and PostgreSQL cannot even be asked about one (a text parameter
    cannot hold it: the statement fails). A read naming one must not take the reads of its loop
    step down with it (they all went to the full path, one slow request each): it alone is left
    to the full path, the others are answered by the one statement, which never names it."""
    a, b, c = _world(storage)
    path, counting = _batching_path(storage)
    asks = {
        "admin": (None, [a, b]),
        "t1": (hash_token("t1"), [a]),
        "nul": (None, [a, "memstore_x\x00y"]),
        "nul for t2": (hash_token("t2"), ["\x00"]),
        "t2": (hash_token("t2"), [c]),
    }
    answers: dict[str, dict[str, int] | None] = {}

    async def main() -> None:
        async def ask(name: str) -> None:
            answers[name] = await path._read(*asks[name])

        async with anyio.create_task_group() as tg:
            for name in asks:
                tg.start_soon(ask, name)

    anyio.run(main)
    assert answers == {"admin": {a: 2, b: 0}, "t1": {a: 2}, "nul": None, "nul for t2": None, "t2": {c: 0}}
    assert len(counting.batches) == 1
    assert not any("\x00" in sid for sid in counting.batches[0][1])
    assert anyio.run(path.watched_counters, [b, "x\x00"]) is None  # the watch hub's reads too
    assert anyio.run(path.watched_counters, [b]) == {b: 0}
