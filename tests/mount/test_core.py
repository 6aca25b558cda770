"""The filesystem core without a kernel: SEMANTICS.md#d-reserved, #d-fs row by row, plus the sync-facing API."""

from __future__ import annotations

import errno
import hashlib
import os
import stat

import pytest

from memfs.limits import MARKER_NAME, MAX_CONTENT_BYTES, NOTICES_NAME
from memfs.mount.replies import RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT_INO
from memfs.mount.state import State
from memfs.records import StoreInfo
from tests.mount.conftest import RO, RW, Harness, errno_of

pytestmark = pytest.mark.timeout(30)

W = "/work-notes"
R = "/team-handbook"


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _lookups(fs, ino: int) -> int:
    """How many lookups of `ino` the kernel holds, as the filesystem counts them (0: freed)."""
    node = fs.tree.nodes.get(ino)
    return node.lookups if node else 0


def seed_ro(h: Harness, files: dict[str, bytes]) -> None:
    for i, (p, c) in enumerate(files.items()):
        h.fs.apply_remote(RO.store_id, p, f"mem_ro{i}", sha(c), c, 1_600_000_000_000_000_000)


# ---- layout, root, reserved files ---------------------------------------------------------


def test_root_lists_one_directory_per_store_and_is_read_only(h):
    assert sorted(h.listdir("/")) == ["team-handbook", "work-notes"]
    root = h.fs.getattr(ROOT_INO)
    assert stat.S_ISDIR(root.mode) and stat.S_IMODE(root.mode) == 0o555
    assert stat.S_IMODE(h.fs.getattr(h.ino(W)).mode) == 0o755
    assert stat.S_IMODE(h.fs.getattr(h.ino(R)).mode) == 0o555
    assert (h.fs.getattr(h.ino(W)).uid, h.fs.getattr(h.ino(W)).gid) == (1234, 5678)
    assert errno_of(h.fs.mkdir, ROOT_INO, b"x", 0o755) == errno.EROFS
    assert errno_of(h.fs.create, ROOT_INO, b"x", 0o644, os.O_WRONLY) == errno.EROFS
    assert errno_of(h.fs.rmdir, ROOT_INO, b"work-notes") == errno.EROFS
    assert errno_of(h.fs.rename, ROOT_INO, b"work-notes", ROOT_INO, b"other") == errno.EROFS
    assert errno_of(h.fs.unlink, ROOT_INO, b"work-notes") == errno.EROFS
    assert errno_of(h.fs.setattr, ROOT_INO, mode=0o777) == errno.EROFS
    assert errno_of(h.fs.setattr, h.ino(W), mode=0o700) == errno.EROFS  # the store dir is part of the root
    assert errno_of(h.fs.symlink, ROOT_INO, b"l", b"x") == errno.EROFS
    assert errno_of(h.fs.mknod, ROOT_INO, b"f", stat.S_IFIFO | 0o644, 0) == errno.EROFS


def test_reserved_files_content_and_protection(h):
    for s in (W, R):
        names = h.listdir(s)
        assert names[:2] == [MARKER_NAME, NOTICES_NAME]
    marker = h.read_file(f"{W}/{MARKER_NAME}")
    assert marker == b"version 1\nmemstore_rw"
    assert h.read_file(f"{R}/{MARKER_NAME}") == b"version 1\nmemstore_ro"
    a = h.fs.getattr(h.ino(f"{W}/{MARKER_NAME}"))
    assert stat.S_IMODE(a.mode) == 0o444 and a.size == len(marker)
    assert stat.S_IMODE(h.fs.getattr(h.ino(f"{W}/{NOTICES_NAME}")).mode) == 0o444
    assert h.read_file(f"{W}/{NOTICES_NAME}") == b""
    store = h.ino(W)
    for name in (MARKER_NAME, NOTICES_NAME):
        ino = h.ino(f"{W}/{name}")
        assert errno_of(h.fs.unlink, store, name.encode()) == errno.EPERM
        assert errno_of(h.fs.rename, store, name.encode(), store, b"x") == errno.EPERM
        assert errno_of(h.fs.open, ino, os.O_WRONLY) == errno.EACCES
        assert errno_of(h.fs.open, ino, os.O_RDWR) == errno.EACCES
        assert errno_of(h.fs.setattr, ino, size=0) == errno.EPERM
        assert errno_of(h.fs.create, store, name.encode(), 0o644, os.O_WRONLY) == errno.EPERM
        assert errno_of(h.fs.mkdir, store, name.encode(), 0o755) == errno.EPERM
        h.write_file(f"{W}/tmp", b"x")
        assert errno_of(h.fs.rename, store, b"tmp", store, name.encode()) == errno.EPERM
    # Reserved names are only reserved in the store root.
    h.mkdir(f"{W}/sub")
    h.write_file(f"{W}/sub/{MARKER_NAME}", b"fine")
    assert h.read_file(f"{W}/sub/{MARKER_NAME}") == b"fine"
    h.assert_staged()
    # Never staged: the files table holds no reserved path.
    assert not any(
        p.rsplit("/", 1)[-1] in (MARKER_NAME, NOTICES_NAME) and p.count("/") == 1
        for p in h.fs.local_view(RW.store_id)
    )


# ---- create/write/read and staging ----------------------------------------------------------


def test_create_write_flush_stages_and_survives_reopen(h):
    ino = h.write_file(f"{W}/a.md", b"hello\n")
    h.mkdir(f"{W}/d")
    h.write_file(f"{W}/d/b.md", b"bee")
    assert h.read_file(f"{W}/a.md") == b"hello\n"
    a = h.fs.getattr(ino)
    assert stat.S_ISREG(a.mode) and a.size == 6 and a.nlink == 1
    view = h.fs.local_view(RW.store_id)
    assert view["/a.md"].sha == sha(b"hello\n") and view["/a.md"].memory_id is None
    assert [h.fs.local_file(RW.store_id, p) for p in ("/a.md", "/d/b.md", "/d", "/nope")] == [
        view["/a.md"],
        view["/d/b.md"],
        None,
        None,
    ]
    h.assert_staged()
    h2 = h.reopen()
    try:
        assert h2.read_file(f"{W}/a.md") == b"hello\n"
        assert h2.read_file(f"{W}/d/b.md") == b"bee"
        assert sorted(h2.listdir(W))[2:] == ["a.md", "d"] or set(h2.listdir(W)) >= {"a.md", "d"}
    finally:
        h2.close()


def test_dirty_buffer_visible_to_readers_not_committed_until_flush(h):
    h.write_file(f"{W}/f.md", b"old")
    ino = h.ino(f"{W}/f.md")
    w = h.fs.open(ino, os.O_RDWR).fh
    r = h.fs.open(ino, os.O_RDONLY).fh
    h.fs.write(w, 3, b" and new")
    assert h.fs.read(r, 0, 100) == b"old and new"
    assert h.fs.getattr(ino).size == 11
    assert h.fs.dirty_paths(RW.store_id) == {"/f.md"}
    assert h.fs.local_view(RW.store_id)["/f.md"].sha == sha(b"old")
    h.fs.flush(r)  # a reader's close does not stage the writer's half-written state
    assert h.fs.local_view(RW.store_id)["/f.md"].sha == sha(b"old")
    h.assert_staged()
    h.fs.flush(w)
    assert h.fs.dirty_paths(RW.store_id) == set()
    assert h.fs.local_view(RW.store_id)["/f.md"].sha == sha(b"old and new")
    h.assert_staged()
    h.fs.release(r)
    h.fs.release(w)


def test_write_at_offset_past_end_fills_zeros(h):
    ino = h.write_file(f"{W}/f", b"ab")
    fh = h.fs.open(ino, os.O_WRONLY).fh
    h.fs.write(fh, 5, b"z")
    h.fs.flush(fh)
    h.fs.release(fh)
    assert h.read_file(f"{W}/f") == b"ab\0\0\0z"


def test_open_trunc_stages_only_at_close(h):
    h.write_file(f"{W}/f", b"original")
    fh = h.fs.open(h.ino(f"{W}/f"), os.O_WRONLY | os.O_TRUNC).fh
    assert h.fs.getattr(h.ino(f"{W}/f")).size == 0
    assert h.fs.local_view(RW.store_id)["/f"].sha == sha(b"original")
    h.fs.write(fh, 0, b"new")
    h.fs.flush(fh)
    h.fs.release(fh)
    assert h.fs.local_view(RW.store_id)["/f"].sha == sha(b"new")
    h.assert_staged()


def test_create_is_staged_at_once_and_dirty_until_close(h):
    reply, attr = h.fs.create(h.ino(W), b"new.md", 0o644, os.O_WRONLY)
    assert "/new.md" not in h.fs.local_view(RW.store_id)  # staged, but unborn until its close
    assert "/new.md" in h.fs.dirty_paths(RW.store_id)
    h.assert_staged()
    h.fs.write(reply.fh, 0, b"x")
    h.fs.flush(reply.fh)
    h.fs.release(reply.fh)
    assert h.fs.dirty_paths(RW.store_id) == set()
    h.assert_staged()


def test_truncate_by_setattr_stages_at_once(h):
    ino = h.write_file(f"{W}/f", b"0123456789")
    h.fs.setattr(ino, size=4)
    assert h.read_file(f"{W}/f") == b"0123"
    h.assert_staged()
    h.fs.setattr(ino, size=6)
    assert h.read_file(f"{W}/f") == b"0123\0\0"
    h.assert_staged()
    assert errno_of(h.fs.setattr, h.ino(f"{W}"), size=0) == errno.EROFS  # store dir
    d = h.mkdir(f"{W}/d")
    assert errno_of(h.fs.setattr, d, size=0) == errno.EISDIR


def test_chmod_utimes_local_chown_eperm(h):
    ino = h.write_file(f"{W}/f", b"x")
    before = h.fs.local_view(RW.store_id)["/f"]
    a = h.fs.setattr(ino, mode=stat.S_IFREG | 0o600, atime_ns=5, mtime_ns=7)
    assert stat.S_IMODE(a.mode) == 0o600 and a.mtime_ns == 7 and a.atime_ns == 5
    assert h.fs.local_view(RW.store_id)["/f"] == before  # nothing to push
    assert errno_of(h.fs.setattr, ino, uid=0) == errno.EPERM
    assert errno_of(h.fs.setattr, ino, gid=0) == errno.EPERM
    h.fs.setattr(ino, uid=1234, gid=5678)  # chown to the owner it already has is a no-op


def test_mtime_is_local_write_time(h):
    ino = h.write_file(f"{W}/f", b"x")
    t0 = h.fs.getattr(ino).mtime_ns
    h.write_file(f"{W}/f", b"y")
    assert h.fs.getattr(ino).mtime_ns > t0
    fresh = State(h.state_dir)
    assert fresh.load_files(RW.store_id)["/f"].mtime_ns == h.fs.getattr(ino).mtime_ns
    fresh.close()


# ---- errnos of the table in SEMANTICS.md#d-fs ---------------------------------------------------------------


def test_special_files_and_xattrs(h):
    ino = h.write_file(f"{W}/f", b"x")
    store = h.ino(W)
    assert errno_of(h.fs.symlink, store, b"l", b"f") == errno.EPERM
    assert errno_of(h.fs.link, ino, store, b"hard") == errno.EPERM
    for kind in (stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFCHR, stat.S_IFBLK):
        assert errno_of(h.fs.mknod, store, b"n", kind | 0o644, 0) == errno.EPERM
    assert errno_of(h.fs.setxattr, ino, b"user.x", b"1") == errno.ENOTSUP
    assert errno_of(h.fs.removexattr, ino, b"user.x") == errno.ENOTSUP
    assert errno_of(h.fs.getxattr, ino, b"user.x") == errno.ENODATA
    assert h.fs.listxattr(ino) == []
    assert "n" not in h.listdir(W) and "l" not in h.listdir(W)


@pytest.mark.parametrize(
    "name,err",
    [
        (b"\xff\xfe.md", errno.EINVAL),  # not UTF-8
        ("cafe\u0301.md".encode(), errno.EINVAL),  # not NFC
        (b"a\x01b", errno.EINVAL),  # control
        (b"a\nb", errno.EINVAL),
        ("a\u200bb".encode(), errno.EINVAL),  # format (zero-width space)
        ("a\u202eb".encode(), errno.EINVAL),  # format (RLO)
        ("a\u2028b".encode(), errno.EINVAL),
        ("a\u2029b".encode(), errno.EINVAL),
        (b"a\\b", errno.EINVAL),
        (b"x" * 256, errno.ENAMETOOLONG),
        ("é".encode() * 128, errno.ENAMETOOLONG),  # 256 bytes, 128 chars
    ],
)
def test_bad_names(h, name, err):
    store = h.ino(W)
    assert errno_of(h.fs.create, store, name, 0o644, os.O_WRONLY) == err
    assert errno_of(h.fs.mkdir, store, name, 0o755) == err
    h.write_file(f"{W}/ok", b"x")
    assert errno_of(h.fs.rename, store, b"ok", store, name) == err
    assert set(h.listdir(W)) == {MARKER_NAME, NOTICES_NAME, "ok"}
    h.assert_staged()


def test_good_names(h):
    for name in ("x" * 255, "é" * 127, "café.md", "with space", "日本語.txt", ".hidden"):
        h.write_file(f"{W}/{name}", b"ok")
    h.assert_staged()


def test_lookup_of_too_long_name(h):
    assert errno_of(h.fs.lookup, h.ino(W), b"x" * 256) == errno.ENAMETOOLONG
    assert errno_of(h.fs.lookup, h.ino(W), b"\xff") == errno.ENOENT


def test_memory_path_over_1024_bytes(h):
    path = W
    for i in range(4):
        path += "/" + chr(ord("a") + i) * 250
        h.mkdir(path)
    # memory path so far: 4 * 251 = 1004 bytes; "/" + 19 more bytes reaches 1024.
    h.write_file(path + "/" + "f" * 19, b"ok")
    assert errno_of(h.write_file, path + "/" + "f" * 20, b"no") == errno.ENAMETOOLONG
    assert errno_of(h.mkdir, path + "/" + "g" * 20) == errno.ENAMETOOLONG
    h.assert_staged()


def test_path_deeper_than_20_segments_is_enametoolong(h):
    path = W
    for i in range(19):
        path += f"/d{i}"
        h.mkdir(path)
    h.write_file(path + "/file20", b"ok")  # 20 segments
    assert errno_of(h.write_file, path + "/d19/x", b"") == errno.ENOENT
    h.mkdir(path + "/d19")  # 20 segments: allowed (it just cannot hold files)
    assert errno_of(h.write_file, path + "/d19/x21", b"no") == errno.ENAMETOOLONG
    assert errno_of(h.mkdir, path + "/d19/x21") == errno.ENAMETOOLONG


def test_rename_that_pushes_a_descendant_too_deep_is_refused(h):
    h.mkdir(f"{W}/a")
    h.write_file(f"{W}/a/f", b"x")
    path = W
    for i in range(19):
        path += f"/d{i}"
        h.mkdir(path)
    # /d0/../d18/a/f would have 21 segments
    assert errno_of(h.rename, f"{W}/a", path + "/a") == errno.ENAMETOOLONG
    assert (
        errno_of(h.rename, f"{W}/a", f"{W}/d0/d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11/d12/d13/d14/d15/d16/d17/a")
        is None
    )


def test_efbig(h):
    ino = h.write_file(f"{W}/big", b"x" * MAX_CONTENT_BYTES)
    assert h.fs.getattr(ino).size == 102_400
    fh = h.fs.open(ino, os.O_WRONLY).fh
    assert errno_of(h.fs.write, fh, MAX_CONTENT_BYTES, b"y") == errno.EFBIG
    assert errno_of(h.fs.write, fh, MAX_CONTENT_BYTES - 10, b"y" * 11) == errno.EFBIG
    assert errno_of(h.fs.flush, fh) == errno.EFBIG  # a failed writer (see the tests below)
    h.fs.release(fh)
    fh = h.fs.open(ino, os.O_WRONLY).fh
    h.fs.write(fh, MAX_CONTENT_BYTES - 10, b"y" * 10)  # not crossing: fine
    h.fs.flush(fh)
    h.fs.release(fh)
    assert h.read_file(f"{W}/big").endswith(b"x" + b"y" * 10)
    assert errno_of(h.fs.setattr, ino, size=MAX_CONTENT_BYTES + 1) == errno.EFBIG
    assert h.fs.getattr(ino).size == 102_400
    assert errno_of(h.write_file, f"{W}/big2", b"z" * (MAX_CONTENT_BYTES + 1)) == errno.EFBIG
    h.assert_staged()


def test_enospc_at_the_2001st_file(h):
    store = h.ino(W)
    for i in range(2000):
        reply, _ = h.fs.create(store, f"f{i:04}".encode(), 0o644, os.O_WRONLY)
        h.fs.flush(reply.fh)
        h.fs.release(reply.fh)
    assert errno_of(h.fs.create, store, b"one-more", 0o644, os.O_WRONLY) == errno.ENOSPC
    # Existing files stay editable; a delete frees a slot.
    h.write_file(f"{W}/f0000", b"edit")
    h.unlink(f"{W}/f0001")
    h.write_file(f"{W}/one-more", b"now it fits")
    assert h.fs.totals(RW.store_id)[0] == 2000
    h.assert_staged()


def test_enospc_past_max_bytes(tmp_path):
    h = Harness(tmp_path / "s", max_bytes=1000, max_files=5)
    try:
        h.write_file(f"{W}/a", b"a" * 600)
        fh = h.fs.create(h.ino(W), b"b", 0o644, os.O_WRONLY)[0].fh
        h.fs.write(fh, 0, b"b" * 400)  # exactly 1000
        h.fs.flush(fh)
        h.fs.release(fh)
        fh = h.fs.open(h.ino(f"{W}/b"), os.O_WRONLY).fh
        assert errno_of(h.fs.write, fh, 400, b"b") == errno.ENOSPC
        assert errno_of(h.fs.flush, fh) == errno.ENOSPC
        h.fs.release(fh)
        assert h.read_file(f"{W}/b") == b"b" * 400
        assert errno_of(h.fs.setattr, h.ino(f"{W}/a"), size=601) == errno.ENOSPC
        h.fs.setattr(h.ino(f"{W}/a"), size=100)  # shrinking is always allowed
        h.write_file(f"{W}/a", b"c" * 600)  # O_TRUNC frees before the write
        for n in ("c", "d", "e"):
            h.write_file(f"{W}/{n}", b"")
        assert errno_of(h.write_file, f"{W}/f", b"") == errno.ENOSPC  # max_files=5
        h.assert_staged()
    finally:
        h.close()


def test_eilseq_on_close_and_fsync_file_stays_local_one_notice(h):
    ino = h.write_file(f"{W}/ok", b"fine")
    fh = h.fs.open(ino, os.O_WRONLY).fh
    h.fs.write(fh, 0, b"\xff\xfe")
    assert errno_of(h.fs.flush, fh) == errno.EILSEQ
    h.fs.release(fh)
    lf = h.fs.local_view(RW.store_id)["/ok"]
    assert lf.bad_utf8 and lf.sha == sha(b"\xff\xfene")
    assert h.read_file(f"{W}/ok") == b"\xff\xfene"
    notices = h.fs.notices(RW.store_id)
    assert len(notices) == 1 and " upload-refused /ok " in notices[0]
    h.assert_staged()
    # The same content again: EILSEQ again, no second notice.
    fh = h.fs.open(ino, os.O_WRONLY).fh
    h.fs.write(fh, 0, b"\xff\xfe")
    assert errno_of(h.fs.flush, fh) == errno.EILSEQ
    h.fs.release(fh)
    assert len(h.fs.notices(RW.store_id)) == 1
    # At fsync it fails the handle instead (test_eilseq_at_fsync_fails_the_handle): stays as it was.
    fh = h.fs.open(ino, os.O_WRONLY).fh
    h.fs.write(fh, 0, b"\xfe")
    assert errno_of(h.fs.fsync, fh, False) == errno.EILSEQ
    assert errno_of(h.fs.flush, fh) == errno.EILSEQ
    h.fs.release(fh)
    assert h.read_file(f"{W}/ok") == b"\xff\xfene"
    assert [n.split()[1] for n in h.fs.notices(RW.store_id)] == ["upload-refused", "write-failed"]
    # Fixed content clears the flag.
    h.write_file(f"{W}/ok", b"fixed")
    assert not h.fs.local_view(RW.store_id)["/ok"].bad_utf8
    h.assert_staged()
    h2 = h.reopen()
    try:
        assert not h2.fs.local_view(RW.store_id)["/ok"].bad_utf8
    finally:
        h2.close()


def test_bad_utf8_flag_survives_restart(h):
    assert errno_of(h.write_file, f"{W}/bin", b"\x80") == errno.EILSEQ
    h2 = h.reopen()
    try:
        assert h2.fs.local_view(RW.store_id)["/bin"].bad_utf8
    finally:
        h2.close()


# ---- read_only stores ----------------------------------------------------------------------


def test_read_only_store_every_mutation_is_erofs(h):
    seed_ro(h, {"/doc.md": b"read me", "/sub/x.md": b"x"})
    f = h.ino(f"{R}/doc.md")
    assert stat.S_IMODE(h.fs.getattr(f).mode) == 0o444
    assert stat.S_IMODE(h.fs.getattr(h.ino(f"{R}/sub")).mode) == 0o555
    assert h.read_file(f"{R}/doc.md") == b"read me"
    store, sub = h.ino(R), h.ino(f"{R}/sub")
    before = State(h.state_dir).load_files(RO.store_id)
    checks = [
        (h.fs.create, store, b"new", 0o644, os.O_WRONLY),
        (h.fs.mkdir, store, b"d", 0o755),
        (h.fs.unlink, store, b"doc.md"),
        (h.fs.rmdir, store, b"sub"),
        (h.fs.rename, store, b"doc.md", store, b"moved"),
        (h.fs.rename, store, b"doc.md", sub, b"doc.md"),
        (h.fs.open, f, os.O_WRONLY),
        (h.fs.open, f, os.O_RDWR),
        (h.fs.open, f, os.O_RDONLY | os.O_TRUNC),
        (h.fs.symlink, store, b"l", b"doc.md"),
        (h.fs.link, f, store, b"l"),
        (h.fs.mknod, store, b"p", stat.S_IFIFO | 0o644, 0),
        (h.fs.setxattr, f, b"user.a", b"1"),
        (h.fs.unlink, store, MARKER_NAME.encode()),
    ]
    for fn, *args in checks:
        assert errno_of(fn, *args) == errno.EROFS, (fn.__name__, args)
    for kw in ({"size": 0}, {"mode": 0o644}, {"mtime_ns": 1}, {"uid": 0}):
        assert errno_of(h.fs.setattr, f, **kw) == errno.EROFS, kw
    assert State(h.state_dir).load_files(RO.store_id) == before
    assert h.read_file(f"{R}/doc.md") == b"read me"
    # Cross-store rename into a read_only store: EROFS too.
    h.write_file(f"{W}/w", b"w")
    assert errno_of(h.fs.rename, h.ino(W), b"w", store, b"w") == errno.EROFS


def test_cross_store_rename_is_exdev(tmp_path):
    other = StoreInfo("memstore_two", "Two", "two", "read_write")
    h = Harness(tmp_path / "s", stores=(RW, other))
    try:
        h.write_file(f"{W}/a", b"x")
        assert errno_of(h.rename, f"{W}/a", "/two/a") == errno.EXDEV
    finally:
        h.close()


# ---- rename ----------------------------------------------------------------------------------


def test_rename_file_keeps_inode_and_memory_id(h):
    h.fs.apply_remote(RW.store_id, "/a.md", "mem_a", sha(b"A"), b"A", 1)
    ino = h.ino(f"{W}/a.md")
    h.mkdir(f"{W}/d")
    h.rename(f"{W}/a.md", f"{W}/d/b.md")
    assert h.ino(f"{W}/d/b.md") == ino
    assert h.fs.local_view(RW.store_id) == {"/d/b.md": h.fs.local_view(RW.store_id)["/d/b.md"]}
    assert h.fs.local_view(RW.store_id)["/d/b.md"].memory_id == "mem_a"
    assert errno_of(h.fs.lookup, h.ino(W), b"a.md") == errno.ENOENT
    h.assert_staged()


def test_an_append_goes_to_the_end_the_mount_knows_not_the_kernels_stale_offset(h):
    """`echo line >> log.md` opens with O_APPEND; the kernel sends the offset of the size it last
    saw. A pull that grew the file meanwhile (another sandbox's line) must not be overwritten by
    the append: it lands after it. Two sandboxes' appends lost each other's lines that way."""
    h.fs.apply_remote(RW.store_id, "/log.md", "mem_l", sha(b"a\n"), b"a\n", 1)
    stale = len(b"a\n")  # the size the kernel knew when the shell opened the file
    fh = h.fs.open(h.ino(f"{W}/log.md"), os.O_WRONLY | os.O_APPEND).fh
    h.fs.apply_remote(RW.store_id, "/log.md", "mem_l", sha(b"a\ntheirs\n"), b"a\ntheirs\n", 2)
    h.fs.write(fh, stale, b"mine\n")
    h.fs.flush(fh)
    h.fs.release(fh)
    assert h.read_file(f"{W}/log.md") == b"a\ntheirs\nmine\n"
    # without O_APPEND the offset is the writer's own, as pwrite(2) says
    fh = h.fs.open(h.ino(f"{W}/log.md"), os.O_WRONLY).fh
    h.fs.write(fh, 0, b"A")
    h.fs.flush(fh)
    h.fs.release(fh)
    assert h.read_file(f"{W}/log.md") == b"A\ntheirs\nmine\n"


def test_editor_save_inherits_memory_id(h):
    h.fs.apply_remote(RW.store_id, "/notes.md", "mem_n", sha(b"v1"), b"v1", 1)
    h.write_file(f"{W}/.notes.md.swp", b"v2")
    h.rename(f"{W}/.notes.md.swp", f"{W}/notes.md")
    view = h.fs.local_view(RW.store_id)
    assert set(view) == {"/notes.md"}
    assert view["/notes.md"].memory_id == "mem_n" and view["/notes.md"].sha == sha(b"v2")
    h.assert_staged()


def test_rename_over_file_when_both_have_ids_drops_the_overwritten_id(h):
    h.fs.apply_remote(RW.store_id, "/a", "mem_a", sha(b"A"), b"A", 1)
    h.fs.apply_remote(RW.store_id, "/b", "mem_b", sha(b"B"), b"B", 1)
    h.rename(f"{W}/a", f"{W}/b")
    view = h.fs.local_view(RW.store_id)
    assert set(view) == {"/b"} and view["/b"].memory_id == "mem_a" and view["/b"].sha == sha(b"A")
    h.assert_staged()


def test_rename_flags(h):
    h.write_file(f"{W}/a", b"a")
    h.write_file(f"{W}/b", b"b")
    assert errno_of(h.rename, f"{W}/a", f"{W}/b", RENAME_NOREPLACE) == errno.EEXIST
    assert errno_of(h.rename, f"{W}/a", f"{W}/b", RENAME_EXCHANGE) == errno.EINVAL
    h.rename(f"{W}/a", f"{W}/c", RENAME_NOREPLACE)
    assert h.read_file(f"{W}/c") == b"a"
    h.rename(f"{W}/c", f"{W}/c")  # to itself: no-op
    assert h.read_file(f"{W}/c") == b"a"
    h.assert_staged()


def test_rename_directory_moves_subtree(h):
    h.mkdir(f"{W}/src")
    h.mkdir(f"{W}/src/inner")
    h.mkdir(f"{W}/src/empty")
    h.fs.apply_remote(RW.store_id, "/src/inner/f.md", "mem_f", sha(b"F"), b"F", 1)
    h.write_file(f"{W}/src/g.md", b"G")
    inos = {p: h.ino(f"{W}{p}") for p in ("/src", "/src/inner", "/src/inner/f.md", "/src/g.md")}
    h.mkdir(f"{W}/dst")
    h.rename(f"{W}/src", f"{W}/dst/moved")
    for p, ino in inos.items():
        assert h.ino(f"{W}/dst/moved{p[4:]}") == ino
    view = h.fs.local_view(RW.store_id)
    assert set(view) == {"/dst/moved/inner/f.md", "/dst/moved/g.md"}
    assert view["/dst/moved/inner/f.md"].memory_id == "mem_f"
    assert h.fs.dir_paths(RW.store_id) == {"/dst", "/dst/moved", "/dst/moved/inner", "/dst/moved/empty"}
    h.assert_staged()
    # over an empty directory: replaces it; over a non-empty one: ENOTEMPTY
    h.mkdir(f"{W}/e")
    h.rename(f"{W}/dst/moved", f"{W}/e")
    assert set(h.fs.local_view(RW.store_id)) == {"/e/inner/f.md", "/e/g.md"}
    h.mkdir(f"{W}/x")
    assert errno_of(h.rename, f"{W}/x", f"{W}/e") == errno.ENOTEMPTY
    assert errno_of(h.rename, f"{W}/e", f"{W}/e/inner/deeper") == errno.EINVAL
    assert errno_of(h.rename, f"{W}/x", f"{W}/e/g.md") == errno.ENOTDIR
    assert errno_of(h.rename, f"{W}/e/g.md", f"{W}/x") == errno.EISDIR
    assert errno_of(h.rename, f"{W}/nope", f"{W}/y") == errno.ENOENT
    h.assert_staged()
    h2 = h.reopen()
    try:
        assert h2.read_file(f"{W}/e/inner/f.md") == b"F"
        assert h2.fs.dir_paths(RW.store_id) == h.fs.dir_paths(RW.store_id)
    finally:
        h2.close()


def test_rename_of_dirty_file_stages_buffer_under_new_name(h):
    ino = h.write_file(f"{W}/a", b"v1")
    fh = h.fs.open(ino, os.O_WRONLY).fh
    h.fs.write(fh, 0, b"v2")
    h.rename(f"{W}/a", f"{W}/b")
    assert h.fs.local_view(RW.store_id)["/b"].sha == sha(b"v1")
    h.fs.flush(fh)
    h.fs.release(fh)
    assert h.fs.local_view(RW.store_id)["/b"].sha == sha(b"v2")
    h.assert_staged()


# ---- unlink, rmdir, lookup counts --------------------------------------------------------------


def test_unlink_while_open_keeps_data_until_release(h):
    ino = h.write_file(f"{W}/f", b"still here")
    h.fs.lookup(h.ino(W), b"f")
    fh = h.fs.open(ino, os.O_RDWR).fh
    h.unlink(f"{W}/f")
    assert "/f" not in h.fs.local_view(RW.store_id)
    h.assert_staged()
    h.state.gc_blobs()  # the blob may go: the open file keeps its own copy
    h.state._cache.clear()
    assert h.fs.read(fh, 0, 100) == b"still here"
    h.fs.write(fh, 0, b"STILL")
    h.fs.flush(fh)  # nothing to stage: no path
    assert h.fs.read(fh, 0, 100) == b"STILL here"
    assert h.fs.getattr(ino).nlink == 0
    h.fs.release(fh)
    assert ino in h.fs.tree.nodes  # the kernel still knows it
    h.fs.forget([(ino, _lookups(h.fs, ino))])
    assert ino not in h.fs.tree.nodes
    assert "/f" not in h.fs.local_view(RW.store_id)
    h.assert_staged()


def test_lookup_counts_and_forget(h):
    ino = h.write_file(f"{W}/f", b"x")  # create counted 1
    h.fs.lookup(h.ino(W), b"f")
    h.fs.lookup(h.ino(W), b"f")
    assert _lookups(h.fs, ino) == 3
    h.fs.forget([(ino, 3)])
    assert ino in h.fs.tree.nodes  # still linked: stays
    assert h.fs.getattr(ino).size == 1
    h.fs.lookup(h.ino(W), b"f")
    h.unlink(f"{W}/f")
    assert ino in h.fs.tree.nodes
    h.fs.forget([(ino, 1)])
    assert ino not in h.fs.tree.nodes
    assert errno_of(h.fs.getattr, ino) == errno.ENOENT
    # A new file at the same path gets a new inode number.
    assert h.write_file(f"{W}/f", b"y") != ino


def test_dot_and_dotdot_lookup(h):
    d = h.mkdir(f"{W}/d")
    assert h.fs.lookup(d, b".").ino == d
    assert h.fs.lookup(d, b"..").ino == h.ino(W)
    assert h.fs.lookup(h.ino(W), b"..").ino == ROOT_INO


def test_rmdir(h):
    h.mkdir(f"{W}/d")
    h.write_file(f"{W}/d/f", b"x")
    assert errno_of(h.rmdir, f"{W}/d") == errno.ENOTEMPTY
    assert errno_of(h.rmdir, f"{W}/d/f") == errno.ENOTDIR
    assert errno_of(h.unlink, f"{W}/d") == errno.EISDIR
    assert errno_of(h.fs.rmdir, h.ino(W), NOTICES_NAME.encode()) == errno.EPERM
    h.unlink(f"{W}/d/f")
    h.rmdir(f"{W}/d")
    assert errno_of(h.ino, f"{W}/d") == errno.ENOENT
    h.assert_staged()


def test_mkdir_existing_and_create_existing(h):
    h.mkdir(f"{W}/d")
    assert errno_of(h.mkdir, f"{W}/d") == errno.EEXIST
    h.write_file(f"{W}/f", b"x")
    assert errno_of(h.fs.create, h.ino(W), b"f", 0o644, os.O_WRONLY | os.O_CREAT | os.O_EXCL) == errno.EEXIST
    assert errno_of(h.fs.create, h.ino(W), b"d", 0o644, os.O_WRONLY) == errno.EEXIST


# ---- readdir ----------------------------------------------------------------------------------


def test_readdir_cursors_stable_under_concurrent_changes(h):
    for i in range(40):
        h.write_file(f"{W}/f{i:02}", b"")
    dino = h.ino(W)
    fh = h.fs.opendir(dino)
    first = []
    it = h.fs.readdir(fh, 0)
    for entry in it:
        first.append(entry)
        if len(first) == 15:
            break
    names_seen = [e.name.decode() for e in first]
    assert names_seen[:4] == [".", "..", MARKER_NAME, NOTICES_NAME]
    cursor = first[-1].cursor
    # concurrent changes: delete read and unread entries, create new ones, rename one
    h.unlink(f"{W}/f00")  # already returned
    h.unlink(f"{W}/f30")  # not yet returned
    h.write_file(f"{W}/new1", b"")
    h.rename(f"{W}/f20", f"{W}/f20-renamed")
    rest = [e.name.decode() for e in h.fs.readdir(fh, cursor)]
    everything = names_seen + rest
    assert len(everything) == len(set(everything)), "an entry came twice"
    unchanged = {f"f{i:02}" for i in range(40)} - {"f00", "f30", "f20"}
    assert unchanged <= set(everything), unchanged - set(everything)
    assert "f30" not in rest
    # cursors strictly increase
    cursors = [e.cursor for e in first] + [e.cursor for e in h.fs.readdir(fh, cursor)]
    assert cursors == sorted(cursors) and len(set(cursors)) == len(cursors)
    h.fs.releasedir(fh)
    # a fresh listing shows the current state
    assert set(h.listdir(W)) == {MARKER_NAME, NOTICES_NAME, "new1", "f20-renamed"} | (unchanged)


def test_readdir_lookup_counting_is_the_adapters_choice(h):
    ino = h.write_file(f"{W}/f", b"")
    base = _lookups(h.fs, ino)
    w = h.ino(W)  # (a lookup: taken once, before the counts are read)
    dir_base = _lookups(h.fs, w)
    fh = h.fs.opendir(w)
    entries = list(h.fs.readdir(fh, 0))
    assert _lookups(h.fs, ino) == base  # readdir itself does not count
    for e in entries:
        h.fs.count_lookup(e)  # what the adapter does for each accepted entry
    assert _lookups(h.fs, ino) == base + 1
    assert any(e.is_dot for e in entries)  # "." and ".." were handed out, and counted as nothing
    assert _lookups(h.fs, w) == dir_base
    h.fs.releasedir(fh)


def test_readdir_of_a_file_or_unknown_handle(h):
    ino = h.write_file(f"{W}/f", b"")
    assert errno_of(h.fs.opendir, ino) == errno.ENOTDIR
    assert errno_of(h.fs.readdir, 9999, 0) == errno.EBADF


# ---- stop_writes, statfs, startup ------------------------------------------------------------


def test_stop_writes(h):
    ino = h.write_file(f"{W}/f", b"x")
    fh = h.fs.open(ino, os.O_WRONLY).fh
    h.fs.write(fh, 0, b"y")
    h.fs.stop_writes()
    assert h.fs.frozen
    assert errno_of(h.fs.write, fh, 0, b"z") == errno.EROFS
    assert errno_of(h.fs.open, ino, os.O_WRONLY) == errno.EROFS
    assert errno_of(h.fs.create, h.ino(W), b"g", 0o644, os.O_WRONLY) == errno.EROFS
    assert errno_of(h.fs.mkdir, h.ino(W), b"d", 0o755) == errno.EROFS
    assert errno_of(h.fs.unlink, h.ino(W), b"f") == errno.EROFS
    assert errno_of(h.fs.rename, h.ino(W), b"f", h.ino(W), b"g") == errno.EROFS
    assert errno_of(h.fs.setattr, ino, size=0) == errno.EROFS
    # what was written before is not lost: the close stages it
    h.fs.flush(fh)
    h.fs.release(fh)
    assert h.fs.local_view(RW.store_id)["/f"].sha == sha(b"y")
    assert h.read_file(f"{W}/f") == b"y"
    # the sync-facing API still works (final sync)
    h.fs.apply_remote(RW.store_id, "/r", "mem_r", sha(b"r"), b"r", 1)
    h.assert_staged()


def test_statfs(h):
    h.write_file(f"{W}/f", b"x" * 5000)
    s = h.fs.statfs()
    assert s.namemax == 255 and s.bsize == 4096
    assert s.bfree < s.blocks and s.ffree == s.files - 1


def test_startup_builds_implied_directories(tmp_path):
    st = State(tmp_path / "s")
    blob = st.put_blob(b"deep")
    st.upsert_file(RW.store_id, "/a/b/c.md", "mem_c", blob, 4, 123)
    st.upsert_dir(RW.store_id, "/empty", 5)
    st.upsert_file(RW.store_id, f"/{MARKER_NAME}", None, blob, 4, 1)  # reserved: not shown
    st.close()
    h = Harness(tmp_path / "s")
    try:
        assert h.read_file(f"{W}/a/b/c.md") == b"deep"
        assert h.fs.getattr(h.ino(f"{W}/a/b/c.md")).mtime_ns == 123
        assert h.fs.dir_paths(RW.store_id) == {"/a", "/a/b", "/empty"}
        assert h.read_file(f"{W}/{MARKER_NAME}") == b"version 1\nmemstore_rw"
        assert h.fs.local_view(RW.store_id)["/a/b/c.md"].memory_id == "mem_c"
    finally:
        h.close()


def test_inode_numbers_are_unique_and_stable(h):
    a = h.write_file(f"{W}/a", b"")
    b = h.write_file(f"{W}/b", b"")
    d = h.mkdir(f"{W}/d")
    assert len({a, b, d, ROOT_INO, h.ino(W), h.ino(R)}) == 6
    h.rename(f"{W}/a", f"{W}/d/a")
    h.rename(f"{W}/d", f"{W}/e")
    assert h.ino(f"{W}/e/a") == a and h.ino(f"{W}/e") == d


# ---- sync-facing API -----------------------------------------------------------------------------


def test_apply_remote_creates_file_and_parents(h):
    h.fs.invalidations.clear()
    woke = []
    h.fs.on_invalidate = lambda: woke.append(1)
    h.fs.apply_remote(RW.store_id, "/x/y/z.md", "mem_z", sha(b"zed"), b"zed", 1_650_000_000_000_000_000)
    assert h.read_file(f"{W}/x/y/z.md") == b"zed"
    a = h.fs.getattr(h.ino(f"{W}/x/y/z.md"))
    assert a.mtime_ns == 1_650_000_000_000_000_000
    lf = h.fs.local_view(RW.store_id)["/x/y/z.md"]
    assert (lf.memory_id, lf.sha, lf.size, lf.bad_utf8) == ("mem_z", sha(b"zed"), 3, False)
    assert ("entry", h.ino(W), b"x") in h.fs.invalidations
    assert woke
    h.assert_staged()
    with pytest.raises(ValueError):
        h.fs.apply_remote(RW.store_id, "/bad", "mem_b", sha(b"other"), b"content", 1)
    assert errno_of(h.fs.apply_remote, RW.store_id, f"/{NOTICES_NAME}", "m", sha(b""), b"", 1) == errno.EPERM


def test_apply_remote_replaces_keeping_inode_and_drops_dirty_buffer(h):
    ino = h.write_file(f"{W}/f.md", b"local")
    fh = h.fs.open(ino, os.O_RDWR).fh
    h.fs.write(fh, 0, b"LOCAL EDIT")
    h.fs.invalidations.clear()
    h.fs.apply_remote(RW.store_id, "/f.md", "mem_f", sha(b"remote"), b"remote", 42)
    assert h.ino(f"{W}/f.md") == ino
    assert h.fs.read(fh, 0, 100) == b"remote"
    assert h.fs.dirty_paths(RW.store_id) == set()
    assert list(h.fs.invalidations) == [("inode", ino, True)]  # open: attributes only
    h.fs.flush(fh)  # the dropped writes are not staged by the close
    h.fs.release(fh)
    assert h.fs.local_view(RW.store_id)["/f.md"].sha == sha(b"remote")
    assert h.fs.local_view(RW.store_id)["/f.md"].memory_id == "mem_f"
    h.fs.invalidations.clear()
    h.fs.apply_remote(RW.store_id, "/f.md", "mem_f", sha(b"again"), b"again", 43)
    assert list(h.fs.invalidations) == [("inode", ino, False)]
    h.assert_staged()


def test_an_open_while_a_change_is_on_its_way_to_the_kernel_drops_its_pages_and_size(h):
    """SEMANTICS.md#d-kernel-cache: the kernel may keep a file's pages across opens, except while
    the invalidation of a change to it has not reached the kernel (queued, or being sent)."""
    h.fs.apply_remote(RW.store_id, "/f.md", "mem_f", sha(b"one"), b"one", 1)
    ino = h.ino(f"{W}/f.md")
    h.fs.invalidations_done(len(h.fs.invalidations))
    h.fs.invalidations.clear()
    reply = h.fs.open(ino, os.O_RDONLY)
    assert (reply.keep_cache, reply.stale_attr) == (True, False)
    h.fs.release(reply.fh)
    h.fs.apply_remote(RW.store_id, "/f.md", "mem_f", sha(b"two, longer"), b"two, longer", 2)
    other = h.write_file(f"{W}/other.md", b"x")
    sent = len(h.fs.invalidations)
    stale = h.fs.open(ino, os.O_RDONLY)
    assert (stale.keep_cache, stale.stale_attr) == (False, True)
    fresh = h.fs.open(other, os.O_RDONLY)  # no change of its own on the way
    assert (fresh.keep_cache, fresh.stale_attr) == (True, False)
    h.fs.invalidations.clear()  # taken by the adapter, on their way: still stale
    reopened = h.fs.open(ino, os.O_RDONLY)
    assert (reopened.keep_cache, reopened.stale_attr) == (False, True)
    h.fs.invalidations_done(sent)  # reached the kernel
    done = h.fs.open(ino, os.O_RDONLY)
    assert (done.keep_cache, done.stale_attr) == (True, False)
    for r in (stale, fresh, reopened, done):
        h.fs.release(r.fh)


def test_move_path_keeps_inode_and_prunes(h):
    h.fs.apply_remote(RW.store_id, "/old/dir/f.md", "mem_f", sha(b"f"), b"f", 1)
    ino = h.ino(f"{W}/old/dir/f.md")
    h.fs.invalidations.clear()
    h.fs.move_path(RW.store_id, "/old/dir/f.md", "/new/f.md")
    assert h.ino(f"{W}/new/f.md") == ino
    assert h.fs.dir_paths(RW.store_id) == {"/new"}
    inv = list(h.fs.invalidations)
    assert ("entry", h.ino(W), b"old") in inv and ("entry", h.ino(W), b"new") in inv
    assert h.fs.local_view(RW.store_id)["/new/f.md"].memory_id == "mem_f"
    h.assert_staged()
    assert errno_of(h.fs.move_path, RW.store_id, "/missing", "/x") == errno.ENOENT


def test_remove_path_prunes_empty_dirs_only(h):
    h.fs.apply_remote(RW.store_id, "/a/b/c.md", "m1", sha(b"1"), b"1", 1)
    h.fs.apply_remote(RW.store_id, "/a/keep.md", "m2", sha(b"2"), b"2", 1)
    ino = h.ino(f"{W}/a/b/c.md")
    h.fs.invalidations.clear()
    h.fs.remove_path(RW.store_id, "/a/b/c.md")
    assert h.fs.dir_paths(RW.store_id) == {"/a"}
    assert set(h.fs.local_view(RW.store_id)) == {"/a/keep.md"}
    assert ("entry", h.ino(f"{W}/a"), b"b") in h.fs.invalidations
    assert ino not in h.fs.tree.nodes or _lookups(h.fs, ino) > 0
    h.fs.remove_path(RW.store_id, "/a/keep.md")
    assert h.fs.dir_paths(RW.store_id) == set()
    h.fs.remove_path(RW.store_id, "/never")  # absent: no-op
    h.assert_staged()


def test_set_memory_id(h):
    h.write_file(f"{W}/n.md", b"new")
    h.fs.set_memory_id(RW.store_id, "/n.md", "mem_new")
    assert h.fs.local_view(RW.store_id)["/n.md"].memory_id == "mem_new"
    h.assert_staged()


def test_notices_file_shows_last_100_lines(h):
    ino = h.ino(f"{W}/{NOTICES_NAME}")
    m0 = h.fs.getattr(ino).mtime_ns
    h.fs.invalidations.clear()
    line = h.fs.add_notice(RW.store_id, "store-won-conflict", "/a.md", "your copy is in /state/kept/x")
    assert line.endswith(" store-won-conflict /a.md your copy is in /state/kept/x")
    stamp = line.split(" ", 1)[0]
    assert stamp.endswith("Z") and "T" in stamp
    assert h.read_file(f"{W}/{NOTICES_NAME}") == (line + "\n").encode()
    assert h.fs.getattr(ino).mtime_ns > m0 and h.fs.getattr(ino).size == len(line) + 1
    assert ("inode", ino, False) in h.fs.invalidations
    for i in range(120):
        h.fs.add_notice(RW.store_id, "over-limit", f"/f{i}", "")
    lines = h.read_file(f"{W}/{NOTICES_NAME}").decode().splitlines()
    assert len(lines) == 100 and lines[-1].endswith("over-limit /f119")
    assert h.read_file(f"{R}/{NOTICES_NAME}") == b""  # per store
    h2 = h.reopen()
    try:
        assert h2.read_file(f"{W}/{NOTICES_NAME}").decode().splitlines() == lines
    finally:
        h2.close()


def test_wait_invalidated_is_a_barrier_for_the_adapter(h):
    import trio

    async def main():
        assert await h.fs.wait_invalidated(timeout=1)  # nothing mounted: nothing to wait for
        h.fs.on_invalidate = lambda: None  # an adapter is attached
        h.fs.add_notice(RW.store_id, "over-limit", "/x", "")
        assert not await h.fs.wait_invalidated(timeout=0.05)
        async with trio.open_nursery() as n:

            async def drain():
                await trio.sleep(0.05)
                q = h.fs.invalidations
                k = len(q)
                q.clear()
                h.fs.invalidations_done(k)

            n.start_soon(drain)
            assert await h.fs.wait_invalidated(timeout=5)

    trio.run(main)


def test_apply_remote_without_mtime_uses_now(h):
    h.fs.apply_remote(RW.store_id, "/n.md", "mem_n", sha(b"n"), b"n", None)
    assert h.fs.getattr(h.ino(f"{W}/n.md")).mtime_ns >= h.clock.t - 10_000


# ---- the failed-writer rule (SEMANTICS.md "Failed writers") ----------------------
# A handle whose write or truncate failed (EFBIG, ENOSPC; EILSEQ at its fsync) stages nothing,
# ever: at its close the file returns to its last staged state, one `write-failed` notice.

BIG = MAX_CONTENT_BYTES + 47_600  # 150,000 bytes: what the agent's `write` tool was given


def failed_notices(h: Harness) -> list[str]:
    return [n for n in h.fs.notices(RW.store_id) if " write-failed " in n]


def test_oversized_write_through_o_trunc_keeps_the_staged_content(h):
    ino = h.write_file(f"{W}/f", b"original")
    mtime = h.fs.getattr(ino).mtime_ns
    fh = h.fs.open(ino, os.O_WRONLY | os.O_TRUNC).fh
    assert errno_of(h.fs.write, fh, 0, b"x" * BIG) == errno.EFBIG
    assert errno_of(h.fs.flush, fh) == errno.EFBIG  # close() says the content was not kept
    h.fs.release(fh)
    assert h.read_file(f"{W}/f") == b"original"
    a = h.fs.getattr(ino)
    assert (a.size, a.mtime_ns) == (8, mtime)
    assert h.fs.local_view(RW.store_id)["/f"].sha == sha(b"original")
    assert h.fs.totals(RW.store_id) == (1, 8)
    assert h.fs.dirty_paths(RW.store_id) == set()
    [n] = failed_notices(h)
    assert " /f " in n and "EFBIG" in n
    h.assert_staged()


def test_a_good_first_chunk_then_a_failing_one_stages_nothing(h):
    """tar/cp/printf write in chunks: the chunk that crosses the limit fails, the ones before
    it landed in the buffer; none of it may reach the staged state."""
    ino = h.write_file(f"{W}/f", b"old")
    fh = h.fs.open(ino, os.O_WRONLY | os.O_TRUNC).fh
    h.fs.write(fh, 0, b"a" * 100_000)
    assert errno_of(h.fs.write, fh, 100_000, b"a" * 10_240) == errno.EFBIG
    assert errno_of(h.fs.flush, fh) == errno.EFBIG
    h.fs.release(fh)
    assert h.read_file(f"{W}/f") == b"old"
    assert h.fs.totals(RW.store_id) == (1, 3)
    h.assert_staged()


def test_a_file_created_by_a_failed_writer_disappears(h):
    files_before = h.fs.totals(RW.store_id)
    reply, attr = h.fs.create(h.ino(W), b"new.md", 0o644, os.O_WRONLY | os.O_CREAT)
    h.fs.write(reply.fh, 0, b"a" * 100_000)
    assert errno_of(h.fs.write, reply.fh, 100_000, b"a" * 4096) == errno.EFBIG
    assert errno_of(h.fs.flush, reply.fh) == errno.EFBIG
    assert "new.md" not in h.listdir(W)
    assert errno_of(h.fs.lookup, h.ino(W), b"new.md") == errno.ENOENT
    h.fs.release(reply.fh)
    assert "/new.md" not in h.fs.local_view(RW.store_id)
    assert h.fs.totals(RW.store_id) == files_before
    [n] = failed_notices(h)
    assert " /new.md " in n and "removed" in n
    h.assert_staged()
    h2 = h.reopen()
    try:
        assert "/new.md" not in h2.fs.local_view(RW.store_id)
    finally:
        h2.close()


def test_enospc_writer_rolls_back(tmp_path):
    h = Harness(tmp_path / "s", max_bytes=1000)
    try:
        h.write_file(f"{W}/a", b"a" * 600)
        ino = h.write_file(f"{W}/b", b"keep me")
        fh = h.fs.open(ino, os.O_WRONLY | os.O_TRUNC).fh
        h.fs.write(fh, 0, b"b" * 300)
        assert errno_of(h.fs.write, fh, 300, b"b" * 200) == errno.ENOSPC
        assert errno_of(h.fs.flush, fh) == errno.ENOSPC
        h.fs.release(fh)
        assert h.read_file(f"{W}/b") == b"keep me"
        assert h.fs.totals(RW.store_id) == (2, 607)
        h.assert_staged()
    finally:
        h.close()


def test_ftruncate_through_a_handle_is_staged_with_its_close(h):
    ino = h.write_file(f"{W}/f", b"original")
    fh = h.fs.open(ino, os.O_RDWR).fh
    h.fs.setattr(ino, size=0, fh=fh)  # ftruncate(fd, 0)
    assert h.fs.getattr(ino).size == 0
    assert h.fs.local_view(RW.store_id)["/f"].sha == sha(b"original")  # not staged yet
    assert errno_of(h.fs.write, fh, 0, b"x" * BIG) == errno.EFBIG
    assert errno_of(h.fs.flush, fh) == errno.EFBIG
    h.fs.release(fh)
    assert h.read_file(f"{W}/f") == b"original"
    # A good ftruncate + write: staged at close.
    fh = h.fs.open(ino, os.O_RDWR).fh
    h.fs.setattr(ino, size=0, fh=fh)
    h.fs.write(fh, 0, b"new")
    h.fs.flush(fh)
    h.fs.release(fh)
    assert h.read_file(f"{W}/f") == b"new"
    # An ftruncate that fails itself fails the handle too.
    fh = h.fs.open(ino, os.O_RDWR).fh
    h.fs.write(fh, 0, b"NEW")
    assert errno_of(h.fs.setattr, ino, size=BIG, fh=fh) == errno.EFBIG
    assert errno_of(h.fs.flush, fh) == errno.EFBIG
    h.fs.release(fh)
    assert h.read_file(f"{W}/f") == b"new"
    assert len(failed_notices(h)) == 2
    h.assert_staged()


def test_fsync_after_a_failure_stages_nothing_and_release_without_flush_rolls_back(h):
    ino = h.write_file(f"{W}/f", b"original")
    fh = h.fs.open(ino, os.O_WRONLY | os.O_TRUNC).fh
    h.fs.write(fh, 0, b"partial")
    assert errno_of(h.fs.write, fh, 7, b"x" * BIG) == errno.EFBIG
    assert errno_of(h.fs.fsync, fh, False) == errno.EFBIG
    assert h.fs.local_view(RW.store_id)["/f"].sha == sha(b"original")
    h.fs.write(fh, 0, b"later")  # still accepted into the buffer, never staged
    h.fs.release(fh)  # no flush (the kernel does that for a killed process too)
    assert h.read_file(f"{W}/f") == b"original"
    assert len(failed_notices(h)) == 1
    h.assert_staged()


def test_eilseq_at_fsync_fails_the_handle(h):
    ino = h.write_file(f"{W}/f", b"fine")
    fh = h.fs.open(ino, os.O_WRONLY | os.O_TRUNC).fh
    h.fs.write(fh, 0, b"\xffbinary")
    assert errno_of(h.fs.fsync, fh, False) == errno.EILSEQ
    assert errno_of(h.fs.flush, fh) == errno.EILSEQ
    h.fs.release(fh)
    assert h.read_file(f"{W}/f") == b"fine"
    assert not h.fs.local_view(RW.store_id)["/f"].bad_utf8
    # sqlite-style: a new file whose fsync fails is removed at its close.
    reply, _ = h.fs.create(h.ino(W), b"x.db", 0o644, os.O_RDWR | os.O_CREAT)
    h.fs.write(reply.fh, 0, b"SQLite format 3\0\x10\x00\xff")
    assert errno_of(h.fs.fsync, reply.fh, False) == errno.EILSEQ
    assert errno_of(h.fs.flush, reply.fh) == errno.EILSEQ
    h.fs.release(reply.fh)
    assert "x.db" not in h.listdir(W)
    assert [n.split()[1:3] for n in h.fs.notices(RW.store_id)] == [
        ["write-failed", "/f"],
        ["write-failed", "/x.db"],
    ]
    h.assert_staged()


def test_a_second_writers_good_data_survives_the_failed_ones_close(h):
    """Both handles share the file's one buffer (like the page cache): the failed handle stages
    nothing and rolls nothing back while another handle has unstaged writes; that writer's close
    stages the buffer."""
    ino = h.write_file(f"{W}/f", b"base content")
    good = h.fs.open(ino, os.O_WRONLY).fh
    h.fs.write(good, 0, b"GOOD")
    bad = h.fs.open(ino, os.O_WRONLY).fh
    assert errno_of(h.fs.write, bad, 0, b"x" * BIG) == errno.EFBIG
    assert errno_of(h.fs.flush, bad) == errno.EFBIG
    h.fs.release(bad)
    assert h.read_file(f"{W}/f") == b"GOOD content"
    assert h.fs.local_view(RW.store_id)["/f"].sha == sha(b"base content")
    h.fs.flush(good)
    h.fs.release(good)
    assert h.fs.local_view(RW.store_id)["/f"].sha == sha(b"GOOD content")
    [n] = failed_notices(h)
    assert "another writer" in n
    h.assert_staged()
    # A reader (or a writer that wrote nothing) does not stop the rollback.
    reader = h.fs.open(ino, os.O_RDONLY).fh
    bad = h.fs.open(ino, os.O_WRONLY | os.O_TRUNC).fh
    assert errno_of(h.fs.write, bad, 0, b"x" * BIG) == errno.EFBIG
    assert errno_of(h.fs.flush, bad) == errno.EFBIG
    assert h.fs.read(reader, 0, 100) == b"GOOD content"
    h.fs.release(bad)
    h.fs.release(reader)
    h.assert_staged()


def test_failed_writer_on_a_file_unlinked_while_open(h):
    ino = h.write_file(f"{W}/f", b"x")
    fh = h.fs.open(ino, os.O_WRONLY).fh
    h.unlink(f"{W}/f")
    assert errno_of(h.fs.write, fh, 0, b"x" * BIG) == errno.EFBIG
    assert errno_of(h.fs.flush, fh) == errno.EFBIG
    h.fs.release(fh)
    assert failed_notices(h) == []  # nothing of the store was touched: no path to name
    assert "/f" not in h.fs.local_view(RW.store_id)
    h.assert_staged()


# ---- a file created by a writer that has not closed it -----------------------------------


def test_a_new_file_is_not_in_the_sync_view_until_its_writer_closes(h):
    reply, attr = h.fs.create(h.ino(W), b"new.md", 0o644, os.O_WRONLY | os.O_CREAT)
    h.fs.write(reply.fh, 0, b"x")
    assert "new.md" in h.listdir(W)  # visible to the agent at once
    assert "/new.md" not in h.fs.local_view(RW.store_id)  # but nothing to push, not even ""
    assert h.fs.local_file(RW.store_id, "/new.md") is None
    assert "/new.md" in h.fs.dirty_paths(RW.store_id)
    h.assert_staged()
    h.fs.flush(reply.fh)  # also what closing a copy of the fd (dup2, fork + exec) sends
    assert "/new.md" not in h.fs.local_view(RW.store_id)
    assert "/new.md" in h.fs.dirty_paths(RW.store_id)  # a pull must not overwrite it meanwhile
    h2 = h.reopen()  # but a close returned: a restart keeps it
    try:
        assert h2.fs.local_view(RW.store_id)["/new.md"].sha == sha(b"x")
    finally:
        h2.close()
    h.fs.release(reply.fh)  # the creating handle is closed: now the sync sees it
    assert h.fs.local_view(RW.store_id)["/new.md"].sha == sha(b"x")
    h.assert_staged()
    # touch: an empty new file is born at its close, empty.
    reply, _ = h.fs.create(h.ino(W), b"empty.md", 0o644, os.O_WRONLY | os.O_CREAT)
    h.fs.flush(reply.fh)
    h.fs.release(reply.fh)
    assert h.fs.local_view(RW.store_id)["/empty.md"].size == 0
    # fsync is a successful close for this purpose.
    reply, _ = h.fs.create(h.ino(W), b"synced.md", 0o644, os.O_WRONLY | os.O_CREAT)
    h.fs.write(reply.fh, 0, b"s")
    h.fs.fsync(reply.fh, False)
    assert h.fs.local_view(RW.store_id)["/synced.md"].sha == sha(b"s")
    h.fs.release(reply.fh)


def test_a_never_closed_new_file_is_dropped_by_a_restart(h):
    reply, _ = h.fs.create(h.ino(W), b"open.md", 0o644, os.O_WRONLY | os.O_CREAT)
    h.fs.write(reply.fh, 0, b"half")
    h.write_file(f"{W}/closed.md", b"done")
    h2 = h.reopen()  # what a SIGKILLed daemon's successor sees
    try:
        view = h2.fs.local_view(RW.store_id)
        assert "/open.md" not in view and "open.md" not in h2.listdir(W)
        assert view["/closed.md"].sha == sha(b"done")
        h2.assert_staged()
    finally:
        h2.close()
    h.fs.release(reply.fh)


def test_unlink_then_create_by_a_failed_writer_restores_the_file(h):
    """GNU tar x unlinks a file and creates it anew (O_EXCL): a failed extraction must leave
    the memory as it was, with its id, not deleted."""
    h.fs.apply_remote(RW.store_id, "/m.md", "mem_1", sha(b"memory"), b"memory", 1_600_000_000_000_000_000)
    before = h.fs.local_view(RW.store_id)["/m.md"]
    h.unlink(f"{W}/m.md")
    reply, attr = h.fs.create(h.ino(W), b"m.md", 0o644, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    h.fs.write(reply.fh, 0, b"a" * 100_000)
    # While the writer holds it, the sync sees the memory unchanged (nothing to push).
    assert h.fs.local_view(RW.store_id)["/m.md"] == before
    h.assert_staged()
    h2 = h.reopen()  # a crash now keeps the memory too
    try:
        assert h2.fs.local_view(RW.store_id)["/m.md"] == before
    finally:
        h2.close()
    assert errno_of(h.fs.write, reply.fh, 100_000, b"a" * 10_240) == errno.EFBIG
    assert errno_of(h.fs.flush, reply.fh) == errno.EFBIG
    h.fs.release(reply.fh)
    assert h.fs.local_view(RW.store_id)["/m.md"] == before
    assert h.read_file(f"{W}/m.md") == b"memory"
    assert h.fs.getattr(attr.ino).mtime_ns == 1_600_000_000_000_000_000
    [n] = failed_notices(h)
    assert "previous content" in n
    h.assert_staged()
    # The same with a writer that succeeds: the new content, as an update of the same path.
    h.unlink(f"{W}/m.md")
    h.write_file(f"{W}/m.md", b"replaced")
    assert h.fs.local_view(RW.store_id)["/m.md"].sha == sha(b"replaced")


def test_an_unlink_the_sync_has_seen_is_not_undone(h):
    h.fs.apply_remote(RW.store_id, "/m.md", "mem_1", sha(b"memory"), b"memory", 1_600_000_000_000_000_000)
    h.unlink(f"{W}/m.md")
    assert "/m.md" not in h.fs.local_view(RW.store_id)  # a tick saw (and may push) the delete
    reply, _ = h.fs.create(h.ino(W), b"m.md", 0o644, os.O_WRONLY | os.O_CREAT)
    assert "/m.md" not in h.fs.local_view(RW.store_id)
    assert errno_of(h.fs.write, reply.fh, 0, b"a" * BIG) == errno.EFBIG
    assert errno_of(h.fs.flush, reply.fh) == errno.EFBIG
    h.fs.release(reply.fh)
    assert "m.md" not in h.listdir(W)
    h.assert_staged()


def test_a_new_file_renamed_over_a_memory_while_open(h):
    h.fs.apply_remote(RW.store_id, "/m.md", "mem_1", sha(b"memory"), b"memory", 1_600_000_000_000_000_000)
    before = h.fs.local_view(RW.store_id)["/m.md"]
    reply, _ = h.fs.create(h.ino(W), b"tmp", 0o644, os.O_WRONLY | os.O_CREAT)
    h.fs.write(reply.fh, 0, b"a" * 10)
    h.rename(f"{W}/tmp", f"{W}/m.md")
    assert h.fs.local_view(RW.store_id) == {"/m.md": before}
    h.assert_staged()
    assert errno_of(h.fs.write, reply.fh, 10, b"a" * BIG) == errno.EFBIG
    assert errno_of(h.fs.flush, reply.fh) == errno.EFBIG
    h.fs.release(reply.fh)
    assert h.read_file(f"{W}/m.md") == b"memory"
    assert h.fs.local_view(RW.store_id) == {"/m.md": before}
    h.assert_staged()


# ---- modes (SEMANTICS.md#d-fs) ---------------------------------------------------------------------


def test_mode_zero_is_kept(h):
    reply, attr = h.fs.create(h.ino(W), b"f", 0, os.O_WRONLY | os.O_CREAT)  # umask 777; touch f
    assert stat.S_IMODE(attr.mode) == 0
    h.fs.flush(reply.fh)
    h.fs.release(reply.fh)
    assert stat.S_IMODE(h.fs.mkdir(h.ino(W), b"d", 0).mode) == 0
    h2 = h.reopen()
    try:
        assert stat.S_IMODE(h2.fs.getattr(h2.ino(f"{W}/f")).mode) == 0
        assert stat.S_IMODE(h2.fs.getattr(h2.ino(f"{W}/d")).mode) == 0
    finally:
        h2.close()


@pytest.mark.parametrize(
    "mode, new, ok",
    [
        (0o4777, 0o0777, True),  # setuid goes
        (0o2777, 0o0777, True),  # setgid goes when group-exec is set
        (0o6777, 0o0777, True),
        (0o4766, 0o0766, True),
        (0o2767, 0o0767, False),  # setgid without group-exec stays (the kernel keeps it too)
        (0o4777, 0o0700, False),  # anything beyond dropping the bits is a chmod: owner only
        (0o0777, 0o0777, False),
        (0o4777, 0o4777, False),
    ],
)
def test_a_non_owner_may_only_drop_setuid_setgid(h, mode, new, ok):
    from memfs.mount.access import Caller

    ino = h.write_file(f"{W}/f", b"x")
    h.fs.setattr(ino, mode=mode)
    other = Caller(4321, 4321)
    err = errno_of(
        h.fs.permit_setattr,
        ino,
        other,
        size=False,
        mode=True,
        owner=False,
        times=False,
        fh=None,
        new_mode=new,
    )
    assert err == (None if ok else errno.EPERM)
    # Without write permission even that is refused (as for any other non-owner chmod).
    h.fs.setattr(ino, mode=mode & ~0o002)
    err = errno_of(
        h.fs.permit_setattr,
        ino,
        other,
        size=False,
        mode=True,
        owner=False,
        times=False,
        fh=None,
        new_mode=new & ~0o002,
    )
    assert err == errno.EPERM


def test_a_close_before_any_write_keeps_a_new_file_out_of_the_sync(h):
    """bash's `> f`: create, dup2 onto stdout, close the original fd (a FLUSH), then the command
    writes through the dup. The writer is still at work: nothing to push; a restart keeps the
    file (that close returned); a failure later still removes it."""
    reply, _ = h.fs.create(h.ino(W), b"out.md", 0o644, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    h.fs.flush(reply.fh)
    assert "/out.md" not in h.fs.local_view(RW.store_id)
    h2 = h.reopen()
    try:
        assert h2.fs.local_view(RW.store_id)["/out.md"].size == 0
    finally:
        h2.close()
    h.fs.write(reply.fh, 0, b"a" * 100_000)
    assert errno_of(h.fs.write, reply.fh, 100_000, b"a" * 4096) == errno.EFBIG
    assert errno_of(h.fs.flush, reply.fh) == errno.EFBIG
    h.fs.release(reply.fh)
    assert "out.md" not in h.listdir(W)
    h.assert_staged()
    # The same without a failure: born at the release.
    reply, _ = h.fs.create(h.ino(W), b"out.md", 0o644, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    h.fs.flush(reply.fh)
    h.fs.write(reply.fh, 0, b"printed\n")
    h.fs.flush(reply.fh)
    assert "/out.md" not in h.fs.local_view(RW.store_id)
    h.fs.release(reply.fh)
    assert h.fs.local_view(RW.store_id)["/out.md"].sha == sha(b"printed\n")
    h.assert_staged()


def test_a_failure_after_a_durable_flush_still_removes_the_new_file(h):
    """A fork + exec while writing flushes the file (durable), the writer then fails: the file
    its handle created is still removed, and was never in the sync's view."""
    reply, _ = h.fs.create(h.ino(W), b"n.md", 0o644, os.O_WRONLY | os.O_CREAT)
    h.fs.write(reply.fh, 0, b"part")
    h.fs.flush(reply.fh)
    assert "/n.md" not in h.fs.local_view(RW.store_id)
    assert errno_of(h.fs.write, reply.fh, 4, b"a" * BIG) == errno.EFBIG
    h.fs.release(reply.fh)
    assert "n.md" not in h.listdir(W)
    h.assert_staged()
    h2 = h.reopen()
    try:
        assert "/n.md" not in h2.fs.local_view(RW.store_id)
    finally:
        h2.close()


def test_a_second_writer_of_a_new_file_whose_creator_failed_brings_it_to_the_sync(h):
    reply, attr = h.fs.create(h.ino(W), b"n.md", 0o644, os.O_WRONLY | os.O_CREAT)
    other = h.fs.open(attr.ino, os.O_WRONLY).fh
    h.fs.write(other, 0, b"good")
    assert errno_of(h.fs.write, reply.fh, 0, b"a" * BIG) == errno.EFBIG
    assert errno_of(h.fs.flush, reply.fh) == errno.EFBIG
    h.fs.release(reply.fh)
    assert "/n.md" not in h.fs.local_view(RW.store_id)
    h.fs.flush(other)
    h.fs.release(other)
    assert h.fs.local_view(RW.store_id)["/n.md"].sha == sha(b"good")
    h.assert_staged()


def test_the_sync_notices_a_new_file_when_its_writer_closes_it(h):
    """The engine skips a store whose state generation did not move: the birth must move it."""
    reply, _ = h.fs.create(h.ino(W), b"n.md", 0o644, os.O_WRONLY | os.O_CREAT)
    h.fs.write(reply.fh, 0, b"x")
    h.fs.flush(reply.fh)
    gen = h.state.generation(RW.store_id)
    h.fs.release(reply.fh)
    assert h.state.generation(RW.store_id) > gen


def test_a_process_whose_write_failed_loses_its_other_new_open_files(h):
    """sqlite3: the database file is created (and left empty), the journal's fsync fails:
    neither may reach the store. Another process's new file, and files that already existed,
    are not touched."""
    store = h.ino(W)
    h.write_file(f"{W}/old.md", b"old")
    db, _ = h.fs.create(store, b"x.db", 0o644, os.O_RDWR | os.O_CREAT, pid=7)
    journal, _ = h.fs.create(store, b"x.db-journal", 0o644, os.O_RDWR | os.O_CREAT, pid=7)
    old = h.fs.open(h.ino(f"{W}/old.md"), os.O_WRONLY, pid=7).fh
    h.fs.write(old, 0, b"OLD")
    other, _ = h.fs.create(store, b"other.md", 0o644, os.O_WRONLY | os.O_CREAT, pid=8)
    h.fs.write(other.fh, 0, b"fine")
    h.fs.write(journal.fh, 0, b"\xd9\xd5\x05\xf9 journal")
    assert errno_of(h.fs.fsync, journal.fh, False) == errno.EILSEQ
    h.fs.release(journal.fh)
    assert errno_of(h.fs.flush, db.fh) == errno.EILSEQ
    h.fs.release(db.fh)
    for fh in (old, other.fh):
        h.fs.flush(fh)
        h.fs.release(fh)
    assert sorted(h.fs.local_view(RW.store_id)) == ["/old.md", "/other.md"]
    assert h.read_file(f"{W}/old.md") == b"OLD"
    notes = failed_notices(h)
    assert len(notes) == 2 and "x.db-journal" in notes[1] and " /x.db " in notes[1]
    h.assert_staged()


def test_renaming_a_new_file_after_a_close_keeps_what_that_close_staged(h):
    reply, _ = h.fs.create(h.ino(W), b"tmp", 0o644, os.O_WRONLY | os.O_CREAT)
    h.fs.write(reply.fh, 0, b"closed once")
    h.fs.flush(reply.fh)  # a copy of the fd was closed; the writer goes on
    h.rename(f"{W}/tmp", f"{W}/kept.md")
    h2 = h.reopen()
    try:
        assert h2.read_file(f"{W}/kept.md") == b"closed once"
    finally:
        h2.close()
    h.fs.release(reply.fh)
    assert h.fs.local_view(RW.store_id)["/kept.md"].sha == sha(b"closed once")
    h.assert_staged()
