"""Concurrent writes committed together (SQLite's group commit), each still atomic on its own.

On SQLite, writers that queue while another one writes share its transaction, each inside its
own savepoint (sqlite_backend.py). These tests force such a group deterministically: writer A
holds the writer connection until writers B and C are queued behind it. What must hold on every
backend: a request's failure undoes its own writes and nobody else's, the counter never skips or
repeats; on SQLite also: one commit for the group, and no writer returns before its write is
committed (visible to a connection of its own).
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from memfs.service.sqlite_backend import WriteGroupFailed

pytestmark = pytest.mark.timeout(60)


class Boom(Exception):
    pass


def _wait_queued(backend, n: int) -> None:
    """Until n writers wait behind the one writing (SQLite); PostgreSQL has no such queue to see,
    so there the writers get a moment to block on the store's lock (the test holds either way)."""
    if not hasattr(backend, "_queued"):
        time.sleep(0.3)
        return
    for _ in range(2000):
        if backend._queued >= n:
            return
        time.sleep(0.005)
    raise AssertionError(f"{n} writers never queued")


def _committed_counter(backend, sid: str) -> int:
    """The store's counter as a connection of its own sees it: committed state only."""
    if hasattr(backend, "path"):
        conn = sqlite3.connect(backend.path)
        try:
            row = conn.execute(
                "SELECT value FROM store_kv WHERE store_id = ? AND key = 'counter'", (sid,)
            ).fetchone()
        finally:
            conn.close()
        return int(row[0]) if row else 0
    with backend.read() as tx:
        return tx.counter(sid)


def _group(backend, sid: str, bodies: dict[str, object]) -> dict[str, object]:
    """Run each body in its own write(), A first and holding the writer until the others queued.

    A body gets the tx and returns what the writer reports, or raises. The result per name: the
    value, or the exception. `seen` holds, per name, the committed counter right after its
    write() returned (before any other check ran)."""
    results: dict[str, object] = {}
    seen: dict[str, int] = {}
    a_inside, release_a = threading.Event(), threading.Event()

    def run(name: str, body) -> None:
        try:
            with backend.write(sid) as tx:
                if name == "A":
                    a_inside.set()
                    assert release_a.wait(30)
                value = body(tx)
            seen[name] = _committed_counter(backend, sid)
            results[name] = value
        except Exception as e:
            results[name] = e

    names = list(bodies)
    threads = {n: threading.Thread(target=run, args=(n, bodies[n])) for n in names}
    threads["A"].start()
    assert a_inside.wait(30)
    for n in names[1:]:
        threads[n].start()
    _wait_queued(backend, len(names) - 1)
    release_a.set()
    for t in threads.values():
        t.join(30)
        assert not t.is_alive()
    results["seen"] = seen
    return results


def test_a_failing_request_undoes_its_writes_alone(storage, backend):
    sid = storage.create_store("g", "", {}).id

    def bump(tx):
        return tx.bump(sid)

    def bump_then_fail(tx):
        tx.bump(sid)
        tx.bump(sid)
        raise Boom("B fails after writing")

    r = _group(backend, sid, {"A": bump, "B": bump_then_fail, "C": bump})
    assert isinstance(r["B"], Boom)  # its own error, not another's
    assert sorted([r["A"], r["C"]]) == [1, 2]  # no value skipped for B's undone bumps
    assert storage.get_counters([sid])[sid] == 2


def test_no_writer_returns_before_its_group_is_committed(storage, backend):
    sid = storage.create_store("g", "", {}).id
    commits = getattr(backend, "commits", None)

    def bump(tx):
        return tx.bump(sid)

    r = _group(backend, sid, {"A": bump, "B": bump, "C": bump, "D": bump})
    values = [r[n] for n in "ABCD"]
    assert sorted(values) == [1, 2, 3, 4]
    for n in "ABCD":  # what a writer was told is already what any other connection reads
        assert r["seen"][n] >= r[n]
    if commits is not None:  # SQLite: the four shared one commit
        assert backend.commits == commits + 1


def test_rules_through_a_group_each_request_its_own_answer(storage, backend):
    """Real requests of the rules in one group: a create, a create at the path it takes (409, its
    answer resting on the first's uncommitted write), a create that succeeds, an update whose
    precondition fails. Every answer is what the requests alone, in that order, would get."""
    from memfs.service.rules import sha256_hex
    from memfs.service.storage import Actor, PathConflict, PreconditionFailed, VersionFilter

    actor = Actor("api_actor", "apikey_test")
    sid = storage.create_store("g", "", {}).id
    m = storage.create_memory(sid, "/m", "old", actor, max_memories=100)

    results: dict[str, object] = {}
    a_inside, release_a = threading.Event(), threading.Event()

    def run(name, fn):
        try:
            results[name] = fn()
        except Exception as e:
            results[name] = e

    def hold_then_create():
        with backend.write(sid) as tx:
            a_inside.set()
            assert release_a.wait(30)
            tx.bump(sid)  # A's own write in the group: counter 2
        return "held"

    calls = {
        "A": hold_then_create,
        "B": lambda: storage.create_memory(sid, "/x", "1", actor, max_memories=100),
        "C": lambda: storage.update_memory(
            sid, m.id, content="new", path=None, expected_sha256=sha256_hex("not this"), actor=actor
        ),
        "D": lambda: storage.create_memory(sid, "/y", "2", actor, max_memories=100),
    }
    threads = {n: threading.Thread(target=run, args=(n, f)) for n, f in calls.items()}
    threads["A"].start()
    assert a_inside.wait(30)
    for n in "BCD":
        threads[n].start()
    _wait_queued(backend, 3)
    # one more create at /x, queued after B: whichever of the two runs first wins, the other is a 409
    t_e = threading.Thread(
        target=run, args=("E", lambda: storage.create_memory(sid, "/x", "3", actor, max_memories=100))
    )
    t_e.start()
    _wait_queued(backend, 4)
    release_a.set()
    for t in [*threads.values(), t_e]:
        t.join(30)
    assert isinstance(results["C"], PreconditionFailed)
    xs = [results["B"], results["E"]]
    won = [x for x in xs if not isinstance(x, Exception)]
    lost = [x for x in xs if isinstance(x, Exception)]
    assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], PathConflict)
    assert lost[0].conflicting_memory_id == won[0].id
    assert storage.get_memory(sid, m.id).content == "old"
    assert storage.get_memory(sid, won[0].id).path == "/x"
    assert storage.get_memory(sid, results["D"].id).path == "/y"
    # create /m (1), A's bump (2), the winning /x and /y (3, 4): nothing skipped, nothing repeated
    assert storage.get_counters([sid])[sid] == 4
    versions = storage.list_versions(sid, filters=VersionFilter(), limit=100, after=None, with_content=False)
    assert len(versions.items) == 3  # A's bare bump wrote no version


class _FailingCommit:
    """The writer connection, except that COMMIT fails (a disk error cannot be had here)."""

    def __init__(self, conn):
        self._conn = conn

    def execute(self, sql, *args):
        if sql == "COMMIT":
            raise sqlite3.OperationalError("disk I/O error (simulated)")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_a_failed_group_commit_fails_every_member_and_keeps_nothing(storage, backend, backend_kind):
    if backend_kind != "sqlite":
        pytest.skip("group commit is SQLite's")
    sid = storage.create_store("g", "", {}).id
    with backend.write(sid) as tx:  # the writer connection exists from here on
        tx.bump(sid)
    real = backend._writer
    backend._writer = _FailingCommit(real)
    try:

        def bump(tx):
            return tx.bump(sid)

        def fail(tx):
            tx.bump(sid)
            raise Boom("its own failure")

        r = _group(backend, sid, {"A": bump, "B": fail, "C": bump})
    finally:
        if backend._writer is not None:
            backend._writer = real
    for n in "ABC":  # nobody was told their write landed; the failing one learns the group failed
        assert isinstance(r[n], WriteGroupFailed), r[n]
    assert isinstance(r["B"].__cause__, Boom)
    assert _committed_counter(backend, sid) == 1
    with backend.write(sid) as tx:  # and writing goes on
        assert tx.bump(sid) == 2
    assert _committed_counter(backend, sid) == 2
