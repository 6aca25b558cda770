"""The state dir: lock, tables, blobs, kept copies, crash safety."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from memfs.mount.blobs import EMPTY_SHA
from memfs.mount.state import State, StateError, StateLocked
from memfs.mount.statedb import SCHEMA_VERSION

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def st(tmp_path):
    s = State(tmp_path / "state")
    yield s
    s.close()


def test_layout_and_wal(st):
    assert (st.path / "kept").is_dir() and st.db_path.exists()
    assert not (st.path / "blobs").exists()  # content lives in state.db (schema 2)
    db = sqlite3.connect(st.db_path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {
        "meta",
        "stores",
        "baseline",
        "files",
        "dirs",
        "refused",
        "skipped",
        "deletes_held",
        "notices",
    } <= tables
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(
        SCHEMA_VERSION
    )
    db.close()


def test_lock_refuses_a_second_owner(tmp_path):
    a = State(tmp_path / "s")
    a.lock("/mnt/memory")
    owner = json.loads((tmp_path / "s" / "lock").read_text())
    assert owner["pid"] == os.getpid() and owner["root"] == "/mnt/memory" and owner["started_at"]
    b = State(tmp_path / "s")
    with pytest.raises(StateLocked) as exc:
        b.lock("/elsewhere")
    assert exc.value.pid == os.getpid() and exc.value.root == "/mnt/memory"
    assert str(os.getpid()) in str(exc.value) and "/mnt/memory" in str(exc.value)
    # another process is refused too
    code = textwrap.dedent(f"""
        import sys
        from memfs.mount.state import State, StateLocked
        try:
            State({str(tmp_path / "s")!r}).lock("/x")
        except StateLocked as e:
            print("locked", e.pid); sys.exit(0)
        sys.exit(1)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["locked", str(os.getpid())]
    a.close()  # releases
    b.lock("/elsewhere")
    b.close()


def test_the_lock_is_tightened_on_every_start_and_never_through_a_link(tmp_path):
    """A lock left 0644 by an earlier version (or chmod'ed since) is 0600 after the next start;
    a lock that is a symlink is refused, and what it points to is left alone."""
    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    (d / "lock").write_text("{}")
    os.chmod(d / "lock", 0o644)
    a = State(d)
    a.lock("/mnt/memory")
    assert oct(os.stat(d / "lock").st_mode & 0o777) == "0o600"
    a.close()
    os.chmod(d / "lock", 0o664)  # widened between two starts
    a = State(d)
    a.lock("/mnt/memory")
    assert oct(os.stat(d / "lock").st_mode & 0o777) == "0o600"
    a.close()
    elsewhere = tmp_path / "not-the-lock"
    elsewhere.write_text("keep")
    os.chmod(elsewhere, 0o644)
    (d / "lock").unlink()
    (d / "lock").symlink_to(elsewhere)
    b = State(d)
    with pytest.raises(OSError):
        b.lock("/mnt/memory")
    b.close()
    assert oct(os.stat(elsewhere).st_mode & 0o777) == "0o644" and elsewhere.read_text() == "keep"


def test_lock_is_released_when_the_owner_dies(tmp_path):
    code = f"from memfs.mount.state import State; import time; State({str(tmp_path / 's')!r}).lock('/r'); print('ok', flush=True); time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ok"
        with pytest.raises(StateLocked):
            State(tmp_path / "s").lock("/r2")
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        s = State(tmp_path / "s")
        s.lock("/r2")
        s.close()
    finally:
        p.kill()
        p.wait()


def test_newer_schema_is_refused(tmp_path):
    s = State(tmp_path / "s")
    s.set_meta("schema_version", str(SCHEMA_VERSION + 1))
    s.close()
    with pytest.raises(StateError, match="newer"):
        State(tmp_path / "s")


def test_blobs(st, tmp_path):
    data = b"hello blob"
    sha = st.put_blob(data)
    assert sha == hashlib.sha256(data).hexdigest()
    db = sqlite3.connect(st.db_path)
    assert db.execute("SELECT data FROM blobs WHERE sha=?", (sha,)).fetchone()[0] == data
    db.close()
    assert st.has_blob(sha) and st.get_blob(sha) == data
    assert st.put_blob(data) == sha  # idempotent
    assert not st.has_blob("0" * 64)
    with pytest.raises(FileNotFoundError):
        st.get_blob("0" * 64)
    # a fresh State (empty cache) reads from disk
    s2 = State(st.path)
    assert s2.get_blob(sha) == data
    s2.close()


def test_a_rolled_back_blob_is_inserted_again(st):
    """The cache may hold content whose insert was rolled back: put_blob must not trust it."""
    with pytest.raises(RuntimeError), st.transaction():
        sha = st.put_blob(b"rolled back")
        raise RuntimeError
    assert not st.has_blob(sha)
    assert st.put_blob(b"rolled back") == sha and st.has_blob(sha)


def test_schema_1_blob_files_move_into_the_database(tmp_path):
    """A state dir from schema 1 kept content as blobs/<sha[:2]>/<sha> files: opening it imports
    them (one transaction) and removes the directory, interrupted tmp files included."""
    s = State(tmp_path / "s")
    s.close()
    db = sqlite3.connect(tmp_path / "s" / "state.db")
    db.execute("DROP TABLE blobs")  # what schema 1 did not have (2: blobs, 3: feed)
    db.execute("DROP TABLE feed")
    db.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    db.commit()
    db.close()
    datas = [b"one", b"two" * 1000]
    for data in datas:
        sha = hashlib.sha256(data).hexdigest()
        (tmp_path / "s" / "blobs" / sha[:2]).mkdir(parents=True, exist_ok=True)
        (tmp_path / "s" / "blobs" / sha[:2] / sha).write_bytes(data)
    (tmp_path / "s" / "blobs" / sha[:2] / ".tmp-1-2-3").write_bytes(b"half")
    s = State(tmp_path / "s")
    assert [s.get_blob(hashlib.sha256(d).hexdigest()) for d in datas] == datas
    assert not (tmp_path / "s" / "blobs").exists()
    assert s.get_meta("schema_version") == str(SCHEMA_VERSION)
    s.close()


def test_blob_cache_is_bounded(tmp_path):
    s = State(tmp_path / "s", cache_bytes=1000)
    shas = [s.put_blob(bytes([i]) * 300) for i in range(10)]
    assert s._cache.currsize <= 1000
    assert all(s.get_blob(h) == bytes([i]) * 300 for i, h in enumerate(shas))
    big = s.put_blob(b"x" * 5000)  # larger than the cache: stored, not cached
    assert s.get_blob(big) == b"x" * 5000
    s.close()


def test_gc_blobs_keeps_referenced(st):
    keep_f = st.put_blob(b"file")
    keep_b = st.put_blob(b"base")
    keep_x = st.put_blob(b"extra")
    gone = st.put_blob(b"garbage")
    st.upsert_file("s", "/f", None, keep_f, 4, 1)
    st.set_baseline("s", "mem_1", "/b", keep_b, 4)
    assert st.gc_blobs(keep={keep_x}) == 1
    assert (
        st.has_blob(keep_f)
        and st.has_blob(keep_b)
        and st.has_blob(keep_x)
        and st.has_blob(EMPTY_SHA) is not None
    )
    assert not st.has_blob(gone)


def test_keep_copy(st):
    p1 = st.keep_copy("memstore_1", "/notes/a.md", b"lost content")
    p2 = st.keep_copy("memstore_1", "/notes/a.md", b"lost again")
    assert p1 != p2 and p1.read_bytes() == b"lost content" and p2.read_bytes() == b"lost again"
    assert p1.is_relative_to(st.path / "kept" / "memstore_1") and p1.name == "a.md"
    assert p1.parent.parent.name == "notes" or p1.parent.name == "notes"


def test_files_dirs_and_rename_prefix(st):
    st.upsert_file("s", "/a/x.md", "m1", "sha1", 1, 10)
    st.upsert_file("s", "/a/sub/y.md", None, "sha2", 2, 20, 0o600, 1)
    st.upsert_file("s", "/ab/z.md", None, "sha3", 3, 30)  # same prefix, different segment
    st.upsert_file("t", "/a/x.md", "m9", "sha9", 9, 90)  # other store
    st.upsert_dir("s", "/a", 1)
    st.upsert_dir("s", "/a/sub", 1)
    st.upsert_dir("s", "/a/emptydir", 1)
    st.rename_prefix("s", "/a", "/b/c")
    assert set(st.load_files("s")) == {"/b/c/x.md", "/b/c/sub/y.md", "/ab/z.md"}
    assert set(st.load_dirs("s")) == {"/b/c", "/b/c/sub", "/b/c/emptydir"}
    assert set(st.load_files("t")) == {"/a/x.md"}
    row = st.load_files("s")["/b/c/sub/y.md"]
    assert (row.memory_id, row.sha, row.size, row.mtime_ns, row.mode, row.bad_utf8) == (
        None,
        "sha2",
        2,
        20,
        0o600,
        True,
    )
    st.set_file_memory_id("s", "/b/c/sub/y.md", "m2")
    assert st.load_files("s")["/b/c/sub/y.md"].memory_id == "m2"
    st.delete_file("s", "/b/c/x.md")
    st.delete_dir("s", "/b/c/emptydir")
    assert "/b/c/x.md" not in st.load_files("s") and "/b/c/emptydir" not in st.load_dirs("s")


def test_transaction_rolls_back(st):
    with pytest.raises(RuntimeError):
        with st.transaction():
            st.upsert_file("s", "/a", None, "x", 1, 1)
            raise RuntimeError
    assert st.load_files("s") == {}


def test_stores_baseline_and_side_tables(st):
    st.set_store("s1", "Work", "work", "read_write")
    st.set_store("s2", "Hand", "hand", "read_only")
    st.update_store("s1", counter=7, last_sync_at="t", last_result="ok", last_error=None)
    st.set_store("s1", "Work 2", "work-2", "read_write")  # keeps counter
    rows = {r.store_id: r for r in st.stores()}
    assert (
        rows["s1"].counter == 7 and rows["s1"].info.name == "Work 2" and rows["s2"].info.access == "read_only"
    )
    assert st.store("nope") is None
    with pytest.raises(ValueError):
        st.set_store("s3", "x", "x", "write")
    with pytest.raises(KeyError):
        st.update_store("nope", counter=1)
    st.set_baseline("s1", "m1", "/a", "sha", 3)
    st.set_baseline("s1", "m2", "/a", "sha2", 4)  # another memory now at /a replaces the row
    assert {p: r.memory_id for p, r in st.baseline("s1").items()} == {"/a": "m2"}
    st.set_baseline("s1", "m2", "/b", "sha2", 4)  # rename
    assert set(st.baseline("s1")) == {"/b"}
    st.drop_baseline("s1", "m2")
    assert st.baseline("s1") == {}
    st.set_refused("s1", "/r", "sha", "413")
    assert st.refused("s1")["/r"].reason == "413"
    st.clear_refused("s1", "/r")
    st.set_skipped("s1", "m5", "/x\\y", "sha", 3, "backslash")
    assert st.skipped("s1")["m5"].path == "/x\\y"
    st.clear_skipped("s1", "m5")
    st.add_delete_held("s1", "m6")
    st.add_delete_held("s1", "m6")
    assert st.deletes_held("s1") == {"m6"}
    st.clear_delete_held("s1", "m6")
    assert st.refused("s1") == {} and st.skipped("s1") == {} and st.deletes_held("s1") == set()


def test_notices_keep_last_100_per_store(st):
    for i in range(130):
        st.add_notice("s", f"line {i}")
    st.add_notice("t", "other")
    lines = st.notices("s")
    assert len(lines) == 100 and lines[0] == "line 30" and lines[-1] == "line 129"
    assert st.notices("t") == ["other"]


CHILD = textwrap.dedent("""
    import os, sys, time
    from memfs.mount.filesystem import Filesystem
    from memfs.records import StoreInfo
    from memfs.mount.state import State
    st = State(sys.argv[1]); st.lock("/x")
    fs = Filesystem(st, [StoreInfo("s", "s", "s", "read_write")])
    store = fs.lookup(1, b"s").ino
    i = 0
    while True:
        reply, attr = fs.create(store, f"f{i}".encode(), 0o644, os.O_WRONLY)
        fs.write(reply.fh, 0, f"content {i}\\n".encode() * 50)
        fs.flush(reply.fh)   # close() returned here
        fs.release(reply.fh)
        print(i, flush=True)
        i += 1
""")


def test_sigkill_after_close_loses_nothing(tmp_path):
    d = tmp_path / "state"
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(d)], stdout=subprocess.PIPE, text=True)
    try:
        last = -1
        deadline = time.monotonic() + 20
        while last < 200 and time.monotonic() < deadline:
            last = int(p.stdout.readline())
        os.kill(p.pid, signal.SIGKILL)  # right after a close returned
        p.wait(10)
    finally:
        p.kill()
        p.wait()
    assert last >= 200
    st = State(d)
    st.lock("/y")  # the dead owner's lock is gone
    rows = st.load_files("s")
    for i in range(last + 1):
        row = rows[f"/f{i}"]
        assert st.get_blob(row.sha) == f"content {i}\n".encode() * 50
    st.close()


def test_counter_accessors(st):
    st.set_store("s", "S", "s", "read_write")
    assert st.store_counter("s") is None and st.store_counter("unknown") is None
    st.set_store_counter("s", 12)
    assert st.store_counter("s") == 12


def test_commits_leave_the_wal_to_checkpoint(st):
    """No commit checkpoints (autocheckpoint is off: a first download's commit would pay for it);
    checkpoint() copies the WAL into the database from a connection of its own."""
    datas = [os.urandom(20_000) for _ in range(50)]
    before = st.db_path.stat().st_size
    with st.transaction():
        for d in datas:
            st.put_blob(d)
    assert st.db_path.stat().st_size == before  # still all in the WAL
    st.checkpoint()
    assert st.db_path.stat().st_size >= before + 50 * 20_000
    assert [st.get_blob(hashlib.sha256(d).hexdigest()) for d in datas] == datas


def test_state_and_filesystem_have_the_shapes_the_engine_needs(st):
    """State is the engine's Journal and Filesystem its View (memfs/sync/ports.py): every member
    of the ports exists, with the parameters the port names."""
    import inspect

    from memfs.mount.filesystem import Filesystem
    from memfs.sync.ports import Journal, View

    fs = Filesystem(st, [])
    for port, impl in ((Journal, st), (View, fs)):
        for name, member in vars(port).items():
            if name.startswith("_") or not callable(member):
                continue
            got = getattr(impl, name, None)
            assert callable(got), f"{type(impl).__name__} has no {name} ({port.__name__})"
            want = [p for p in inspect.signature(member).parameters if p != "self"]
            assert list(inspect.signature(got).parameters)[: len(want)] == want, name


def test_batched_rows_are_the_single_rows(st, tmp_path):
    """A first download's batched writes (set_baselines, upsert_files/dirs, put_blobs) leave the
    same rows as their one-row forms, replacements included."""
    single = State(tmp_path / "single")
    try:
        base = [("m1", "/a", "sha1", 1), ("m2", "/b", "sha2", 2), ("m3", "/a", "sha3", 3)]
        files = [("/d/x", "m1", "sha1", 1, 10, 0o644, 0), ("/d/x", "m2", "sha2", 2, 20, 0o600, 0)]
        dirs = [("/d", 5, 0o755), ("/e", 6, 0o700)]
        for s in (st, single):
            s.set_baseline("s", "m9", "/b", "old", 9)  # another memory at /b: replaced
        st.set_baselines("s", base)
        st.upsert_files("s", files)
        st.upsert_dirs("s", dirs)
        st.put_blobs([(hashlib.sha256(b"x").hexdigest(), b"x")])
        for e in base:
            single.set_baseline("s", *e)
        for f in files:
            single.upsert_file("s", *f)
        for d in dirs:
            single.upsert_dir("s", *d)
        assert st.baseline("s") == single.baseline("s")
        assert set(st.baseline("s")) == {"/a", "/b"}
        assert st.load_files("s") == single.load_files("s")
        assert st.load_dirs("s") == single.load_dirs("s")
        assert st.get_blob(hashlib.sha256(b"x").hexdigest()) == b"x"
    finally:
        single.close()
