"""Bad-input matrix (docs/DESIGN.md#stress): one table per half.

Mount: every name, size, content, file-type and permission case of docs/SEMANTICS.md#d-fs through a real mount,
with the errno expected per row; after each row the whole view (files, contents, directories, the
read_only store) and the staged count are what they were, and at the end one sync shows the store
never saw any of it. Service: every malformed request of docs/SEMANTICS.md#d-api that tests/service/test_bad_input.py
does not already cover, with the status (and error type) expected per row; after each row the
store's memories and counter are unchanged.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from memfs.client.work_secret import sessions_token_from_secret
from tests.stress.conftest import RW, rig_world, walk
from tests.support.world import StoreSpec

pytestmark = pytest.mark.timeout(120)

RO = "stress-handbook"
LIMIT = 102_400
SEED = {"/keep.md": "keep\n", "/dir/deep.md": "deep\n", "/edit.md": "edit me\n"}
MAX_FILES = 12
MAX_BYTES = 5 * LIMIT


@dataclass
class Row:
    name: str
    action: Callable[[Any], Any]  # gets the rig context, raises OSError
    errno_: int | tuple[int, ...] | None  # None: must succeed; a tuple: any of these
    setup: Callable[[Any], None] | None = None
    cleanup: Callable[[Any], None] | None = None


def W(path, data=b"x", flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
    def act(c):
        fd = os.open(path(c) if callable(path) else c.rw / path, flags, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    return act


def mkfiles(n, prefix="fill"):
    def go(c):
        for i in range(n):
            (c.rw / f"{prefix}{i}.md").write_text("x")

    return go


def rmfiles(prefix="fill"):
    def go(c):
        for p in c.rw.glob(f"{prefix}*"):
            p.unlink()

    return go


def big_files(n):
    def go(c):
        for i in range(n):
            (c.rw / f"big{i}.md").write_bytes(b"b" * LIMIT)

    return go


def deep_dirs(c):
    d = c.rw
    for i in range(4):
        d = d / (chr(ord("a") + i) * 250)
        d.mkdir()


def rm_deep(c):
    import shutil

    shutil.rmtree(c.rw / ("a" * 250))


def sock_node(c):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(c.rw / "sock"))
    finally:
        s.close()


LONG = "x" * 256
BAD_NAMES = {
    "not UTF-8": b"bad-\xff.md",
    "not NFC": "cafe\u0301.md",
    "control char SOH": "ctl\x01.md",
    "newline": "line\nbreak.md",
    "DEL": "del\x7f.md",
    "zero-width space (format)": "zw\u200bsp.md",
    "BOM (format)": "\ufeffbom.md",
    "right-to-left override (format)": "rlo\u202e.md",
    "U+2028": "ls\u2028.md",
    "U+2029": "ps\u2029.md",
    "backslash": "back\\slash.md",
}


def _enc(c, name):
    return (os.fsencode(c.rw) + b"/" + name) if isinstance(name, bytes) else c.rw / name


def mount_rows() -> list[Row]:
    rows: list[Row] = []
    for label, name in BAD_NAMES.items():
        rows += [
            Row(
                f"create {label}",
                lambda c, n=name: os.close(os.open(_enc(c, n), os.O_CREAT | os.O_WRONLY)),
                errno.EINVAL,
            ),
            Row(f"mkdir {label}", lambda c, n=name: os.mkdir(_enc(c, n)), errno.EINVAL),
            Row(
                f"rename onto {label}",
                lambda c, n=name: os.rename(c.rw / "keep.md", _enc(c, n)),
                errno.EINVAL,
            ),
            Row(f"stat {label}", lambda c, n=name: os.stat(_enc(c, n)), errno.ENOENT),
        ]
    rows += [
        # names and paths that are too long
        Row("create 256-byte name", lambda c: open(c.rw / LONG, "w").close(), errno.ENAMETOOLONG),
        Row(
            "create 256-byte name of 2-byte chars",
            lambda c: open(c.rw / ("é" * 128), "w").close(),
            errno.ENAMETOOLONG,
        ),
        Row("mkdir 256-byte name", lambda c: os.mkdir(c.rw / LONG), errno.ENAMETOOLONG),
        Row(
            "rename onto 256-byte name",
            lambda c: os.rename(c.rw / "keep.md", c.rw / LONG),
            errno.ENAMETOOLONG,
        ),
        Row("stat 256-byte name", lambda c: os.stat(c.rw / LONG), errno.ENAMETOOLONG),
        Row(
            "255-byte name is fine",
            lambda c: open(c.rw / ("y" * 255), "w").close(),
            None,
            cleanup=lambda c: (c.rw / ("y" * 255)).unlink(),
        ),
        Row(
            "memory path over 1,024 bytes",
            lambda c: open(c.rw / "/".join(ch * 250 for ch in "abcd") / ("e" * 30), "w").close(),
            errno.ENAMETOOLONG,
            setup=deep_dirs,
            cleanup=rm_deep,
        ),
        Row(
            "rename a file to a path over 1,024 bytes",
            lambda c: os.rename(c.rw / "keep.md", c.rw / "/".join(ch * 250 for ch in "abcd") / ("e" * 30)),
            errno.ENAMETOOLONG,
            setup=deep_dirs,
            cleanup=rm_deep,
        ),
        Row(
            "21st path segment",
            lambda c: os.mkdir(c.rw.joinpath(*[f"s{i}" for i in range(21)])),
            errno.ENAMETOOLONG,
            setup=lambda c: os.makedirs(c.rw.joinpath(*[f"s{i}" for i in range(20)])),
            cleanup=lambda c: __import__("shutil").rmtree(c.rw / "s0"),
        ),
        # sizes and store limits
        Row("write crossing 102,400 bytes", W("edit.md", b"z" * (LIMIT + 1), os.O_WRONLY), errno.EFBIG),
        Row(
            "append crossing 102,400 bytes",
            W("edit.md", b"z" * LIMIT, os.O_WRONLY | os.O_APPEND),
            errno.EFBIG,
        ),
        Row("pwrite at 102,400", lambda c: _pwrite(c.rw / "edit.md", LIMIT, b"z"), errno.EFBIG),
        Row("truncate to 102,401", lambda c: os.truncate(c.rw / "edit.md", LIMIT + 1), errno.EFBIG),
        Row(
            "exactly 102,400 bytes is fine",
            W("max.md", b"m" * LIMIT),
            None,
            cleanup=lambda c: (c.rw / "max.md").unlink(),
        ),
        Row(
            f"file {MAX_FILES + 1} over --max-files",
            W("one-too-many.md"),
            errno.ENOSPC,
            setup=mkfiles(MAX_FILES - len(SEED)),
            cleanup=rmfiles(),
        ),
        Row(
            "bytes over --max-bytes",
            W("edit.md", b"b" * LIMIT, os.O_WRONLY),
            errno.ENOSPC,
            setup=big_files(4),
            cleanup=rmfiles("big"),
        ),
        Row(
            "truncate over --max-bytes",
            lambda c: os.truncate(c.rw / "edit.md", LIMIT),
            errno.ENOSPC,
            setup=big_files(4),
            cleanup=rmfiles("big"),
        ),
        # content that is not UTF-8 (kept local only; removed by the row's cleanup)
        Row(
            "close of non-UTF-8 content",
            W("bin.dat", b"\xff\xfe\x00"),
            errno.EILSEQ,
            cleanup=lambda c: (c.rw / "bin.dat").unlink(),
        ),
        # a failed fsync makes its handle a failed writer: the new file is gone at its close
        Row(
            "fsync of non-UTF-8 content",
            lambda c: _fsync_write(c.rw / "bin2.dat", b"\xc3"),
            errno.EILSEQ,
            cleanup=lambda c: _assert_gone(c.rw / "bin2.dat"),
        ),
        # file types
        Row("symlink", lambda c: os.symlink("keep.md", c.rw / "link"), errno.EPERM),
        Row("hard link", lambda c: os.link(c.rw / "keep.md", c.rw / "hard"), errno.EPERM),
        Row("fifo", lambda c: os.mkfifo(c.rw / "fifo"), errno.EPERM),
        Row("unix socket", sock_node, errno.EPERM),
        Row(
            "character device",
            lambda c: os.mknod(c.rw / "dev", stat.S_IFCHR | 0o600, os.makedev(1, 3)),
            errno.EPERM,
        ),
        Row("setxattr", lambda c: os.setxattr(c.rw / "keep.md", "user.x", b"1"), errno.ENOTSUP),
        Row("removexattr", lambda c: os.removexattr(c.rw / "keep.md", "user.x"), errno.ENOTSUP),
        # no xattrs: ENODATA from the handler, or ENOTSUP once the kernel answers itself (fuse_ops ENOSYS)
        Row("getxattr", lambda c: os.getxattr(c.rw / "keep.md", "user.x"), (errno.ENODATA, errno.ENOTSUP)),
        Row("chown to another user", lambda c: os.chown(c.rw / "keep.md", 12345, 12345), errno.EPERM),
        Row(
            "chown to the owner is fine", lambda c: os.chown(c.rw / "keep.md", os.getuid(), os.getgid()), None
        ),
        Row(
            "chmod is accepted (local only)",
            lambda c: os.chmod(c.rw / "keep.md", 0o600),
            None,
            cleanup=lambda c: os.chmod(c.rw / "keep.md", 0o644),
        ),
        Row("utime is accepted (local only)", lambda c: os.utime(c.rw / "keep.md", (1, 1)), None),
        # read_only store and root: EROFS for every mutation
        *[
            Row(f"read_only: {n}", a, errno.EROFS)
            for n, a in [
                ("create", lambda c: open(c.ro / "new.md", "w").close()),
                ("write", lambda c: open(c.ro / "keep.md", "a").close()),
                ("truncate", lambda c: os.truncate(c.ro / "keep.md", 0)),
                ("unlink", lambda c: os.unlink(c.ro / "keep.md")),
                ("rename", lambda c: os.rename(c.ro / "keep.md", c.ro / "k2.md")),
                ("mkdir", lambda c: os.mkdir(c.ro / "d")),
                ("rmdir", lambda c: os.rmdir(c.ro / "dir")),
                ("symlink", lambda c: os.symlink("x", c.ro / "l")),
                ("mkfifo", lambda c: os.mkfifo(c.ro / "f")),
                ("setxattr", lambda c: os.setxattr(c.ro / "keep.md", "user.x", b"1")),
                ("chmod", lambda c: os.chmod(c.ro / "keep.md", 0o777)),
                ("rename into it from read_write", lambda c: os.rename(c.rw / "keep.md", c.ro / "moved.md")),
                ("create at the root", lambda c: open(c.root / "new.md", "w").close()),
                ("mkdir at the root", lambda c: os.mkdir(c.root / "d")),
                ("rmdir a store", lambda c: os.rmdir(c.ro)),
                ("rename a store", lambda c: os.rename(c.rw, c.root / "renamed")),
            ]
        ],
        # reserved files in a store root
        *[
            Row(f"reserved {f}: {n}", a, e)
            for f in (".anthropic-memory-store", ".sync-notices.log")
            for n, a, e in [
                ("unlink", lambda c, f=f: os.unlink(c.rw / f), errno.EPERM),
                ("rename", lambda c, f=f: os.rename(c.rw / f, c.rw / "x"), errno.EPERM),
                ("rename onto", lambda c, f=f: os.rename(c.rw / "keep.md", c.rw / f), errno.EPERM),
                ("open for writing", lambda c, f=f: open(c.rw / f, "a").close(), errno.EACCES),
                ("truncate", lambda c, f=f: os.truncate(c.rw / f, 0), errno.EPERM),
                ("chmod", lambda c, f=f: os.chmod(c.rw / f, 0o644), errno.EPERM),
                ("mkdir over", lambda c, f=f: os.mkdir(c.rw / f), errno.EEXIST),
            ]
        ],
    ]
    return rows


def _pwrite(path, off, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, off)
    finally:
        os.close(fd)


def _assert_gone(path) -> None:
    assert not path.exists(), f"{path.name}: a failed writer's new file is still there after its close"


def _fsync_write(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


class Ctx:
    def __init__(self, root):
        self.root = root
        self.rw = root / RW
        self.ro = root / RO


def view(c) -> tuple:
    dirs = sorted(os.path.relpath(d, c.root) for d, _, _ in os.walk(c.root))
    return walk(c.rw), walk(c.ro), dirs


def test_mount_bad_input_matrix(tmp_path, stats):
    rig = rig_world(
        tmp_path, (StoreSpec("Stress Notes", seed=SEED), StoreSpec("Stress Handbook", "read_only", SEED))
    )
    try:
        box = rig.sandbox("bad")
        box.mount("--max-files", str(MAX_FILES), "--max-bytes", str(MAX_BYTES))
        c = Ctx(box.root)
        assert box.sync()["ok"]
        staged0 = [s["staged"] for s in box.status()["stores"]]
        notices0 = len(box.notices(RW))
        failures = []
        eilseq = 0
        for row in mount_rows():
            if row.setup:
                row.setup(c)
            before = view(c)
            try:
                row.action(c)
                got = None
            except OSError as e:
                got = e.errno
            after = view(c)
            if row.errno_ == errno.EILSEQ and got == errno.EILSEQ:
                eilseq += 1
                # the content stays (local only): that file, and nothing else, changed
                after = ({p: b for p, b in after[0].items() if not p.endswith(".dat")}, after[1], after[2])
            if isinstance(row.errno_, tuple) and got in row.errno_:
                got = row.errno_
            if got != row.errno_:
                failures.append(
                    f"{row.name}: got {errno.errorcode.get(got, got)}, "
                    f"want {errno.errorcode.get(row.errno_, row.errno_)}"
                )
            elif row.errno_ is not None and after != before:
                failures.append(f"{row.name}: the view changed")
            if row.cleanup:
                row.cleanup(c)
            stats["steps"] += 1
        assert not failures, "\n".join(failures)
        # the read_only modes are what docs/SEMANTICS.md#d-fs says, the marker is intact
        assert stat.S_IMODE(os.stat(c.ro / "keep.md").st_mode) == 0o444
        assert stat.S_IMODE(os.stat(c.ro / "dir").st_mode) == 0o555
        assert (c.rw / ".anthropic-memory-store").read_text() == f"version 1\n{rig.rw}"
        assert [s["staged"] for s in box.status()["stores"]] == staged0
        assert box.sync()["ok"]
        assert rig.api.contents(rig.rw) == SEED and rig.api.contents(rig.ro) == SEED
        # the close case keeps its file local (upload-refused); the fsync case is a failed writer
        notices = box.notices(RW)[notices0:]
        refused = [n for n in notices if " upload-refused " in n]
        failed = [n for n in notices if " write-failed " in n and "/bin2.dat" in n]
        assert eilseq == 2 and len(refused) == 1 and len(failed) == 1, notices
    finally:
        rig.close()


# -- the service ------------------------------------------------------------------------------------
MB = {"anthropic-beta": "agent-memory-2026-07-22"}
SB = {"anthropic-beta": "managed-agents-2026-04-01"}


def service_rows(ids: dict[str, str]) -> list[tuple]:
    """(name, credential, method, url, json body | None, headers, status, error type)."""
    s = f"/v1/memory_stores/{ids['rw']}"
    ro = f"/v1/memory_stores/{ids['ro']}"
    m = f"{s}/memories/{ids['keep']}"
    bad = "0" * 64
    rows = [
        ("no credential", None, "GET", s, None, MB, 401, "authentication_error"),
        ("wrong key", "wrong", "GET", s, None, MB, 401, "authentication_error"),
        ("wrong bearer", "Bearer nope", "GET", s, None, MB, 401, "authentication_error"),
        (
            "unknown beta value",
            "admin",
            "GET",
            s,
            None,
            {"anthropic-beta": "other-2020-01-01"},
            400,
            "invalid_request_error",
        ),
        (
            "session token, store not attached",
            "token",
            "GET",
            f"/v1/memory_stores/{ids['other']}",
            None,
            MB,
            404,
            "not_found_error",
        ),
        (
            "session token, counters of a store not attached",
            "token",
            "GET",
            f"/v1/memory_store_counters?ids={ids['rw']},{ids['other']}",
            None,
            MB,
            404,
            "not_found_error",
        ),
        (
            "session token, write through read_only",
            "token",
            "POST",
            f"{ro}/memories",
            {"path": "/x.md", "content": "x"},
            MB,
            403,
            "permission_error",
        ),
        (
            "session token, delete through read_only",
            "token",
            "DELETE",
            f"{ro}/memories/{ids['ro_keep']}",
            None,
            MB,
            403,
            "permission_error",
        ),
        (
            "session token, another session",
            "token",
            "GET",
            f"/v1/sessions/{ids['other_session']}",
            None,
            SB,
            404,
            "not_found_error",
        ),
        (
            "unknown store",
            "admin",
            "GET",
            "/v1/memory_stores/memstore_nope",
            None,
            MB,
            404,
            "not_found_error",
        ),
        ("unknown memory", "admin", "GET", f"{s}/memories/mem_nope", None, MB, 404, "not_found_error"),
        (
            "unknown version",
            "admin",
            "GET",
            f"{s}/memory_versions/memver_nope",
            None,
            MB,
            404,
            "not_found_error",
        ),
    ]
    for label, path in [
        ("no leading slash", "a.md"),
        ("over 1,024 bytes", "/" + "/".join(["p" * 200] * 6)),
        ("21 segments", "/" + "/".join("s" * 21)),
        ("empty segment", "/a//b.md"),
        ("trailing slash", "/a/"),
        ("'.' segment", "/./a.md"),
        ("control char", "/a\x01.md"),
        ("format char", "/a\u200b.md"),
        ("U+2028", "/a\u2028.md"),
        ("U+2029", "/a\u2029.md"),
        ("backslash", "/a\\b.md"),
        ("not NFC", "/cafe\u0301.md"),
        ("empty", ""),
        ("root", "/"),
    ]:
        rows.append(
            (
                f"create: path {label}",
                "admin",
                "POST",
                f"{s}/memories",
                {"path": path, "content": "x"},
                MB,
                400,
                "invalid_request_error",
            )
        )
        rows.append(
            (f"rename: path {label}", "admin", "POST", m, {"path": path}, MB, 400, "invalid_request_error")
        )
    rows += [
        (
            "content over 102,400 bytes",
            "admin",
            "POST",
            f"{s}/memories",
            {"path": "/big.md", "content": "x" * (LIMIT + 1)},
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "update content over 102,400 bytes",
            "admin",
            "POST",
            m,
            {"content": "é" * (LIMIT // 2 + 1)},
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "create on an occupied path",
            "admin",
            "POST",
            f"{s}/memories",
            {"path": "/keep.md", "content": "x"},
            MB,
            409,
            "memory_path_conflict_error",
        ),
        (
            "create below a file",
            "admin",
            "POST",
            f"{s}/memories",
            {"path": "/keep.md/x", "content": "x"},
            MB,
            409,
            "memory_path_conflict_error",
        ),
        (
            "create above a file",
            "admin",
            "POST",
            f"{s}/memories",
            {"path": "/dir", "content": "x"},
            MB,
            409,
            "memory_path_conflict_error",
        ),
        (
            "rename onto an occupied path",
            "admin",
            "POST",
            m,
            {"path": "/edit.md"},
            MB,
            409,
            "memory_path_conflict_error",
        ),
        (
            "precondition mismatch",
            "admin",
            "POST",
            m,
            {"content": "new", "precondition": {"type": "content_sha256", "content_sha256": bad}},
            MB,
            409,
            "memory_precondition_failed_error",
        ),
        (
            "precondition of an unknown type",
            "admin",
            "POST",
            m,
            {"content": "new", "precondition": {"type": "etag", "content_sha256": bad}},
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "delete with a wrong expected sha",
            "admin",
            "DELETE",
            f"{m}?expected_content_sha256={bad}",
            None,
            MB,
            409,
            "memory_precondition_failed_error",
        ),
        ("list: depth 2", "admin", "GET", f"{s}/memories?depth=2", None, MB, 400, "invalid_request_error"),
        (
            "list: path_prefix without trailing slash",
            "admin",
            "GET",
            f"{s}/memories?path_prefix=/dir",
            None,
            MB,
            400,
            "invalid_request_error",
        ),
        ("list: limit 0", "admin", "GET", f"{s}/memories?limit=0", None, MB, 400, "invalid_request_error"),
        (
            "list: limit 101",
            "admin",
            "GET",
            f"{s}/memories?limit=101",
            None,
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "list: view other",
            "admin",
            "GET",
            f"{s}/memories?view=huge",
            None,
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "changes since the future",
            "admin",
            "GET",
            f"{s}/changes?since=999999",
            None,
            MB,
            400,
            "invalid_request_error",
        ),
        ("changes since -1", "admin", "GET", f"{s}/changes?since=-1", None, MB, 400, "invalid_request_error"),
        ("changes without since", "admin", "GET", f"{s}/changes", None, MB, 400, "invalid_request_error"),
        (
            "write to an archived store",
            "admin",
            "POST",
            f"/v1/memory_stores/{ids['archived']}/memories",
            {"path": "/x.md", "content": "x"},
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "store name empty",
            "admin",
            "POST",
            "/v1/memory_stores",
            {"name": ""},
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "store name 256 chars",
            "admin",
            "POST",
            "/v1/memory_stores",
            {"name": "n" * 256},
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "store name control char",
            "admin",
            "POST",
            "/v1/memory_stores",
            {"name": "a\x07b"},
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "store description 1,025 chars",
            "admin",
            "POST",
            "/v1/memory_stores",
            {"name": "n", "description": "d" * 1025},
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "store metadata 17 pairs",
            "admin",
            "POST",
            "/v1/memory_stores",
            {"name": "n", "metadata": {f"k{i}": "v" for i in range(17)}},
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "store metadata key 65 chars",
            "admin",
            "POST",
            "/v1/memory_stores",
            {"name": "n", "metadata": {"k" * 65: "v"}},
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "store metadata value 513 chars",
            "admin",
            "POST",
            "/v1/memory_stores",
            {"name": "n", "metadata": {"k": "v" * 513}},
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "list stores: limit 0",
            "admin",
            "GET",
            "/v1/memory_stores?limit=0",
            None,
            MB,
            400,
            "invalid_request_error",
        ),
        (
            "session: nine stores",
            "admin",
            "POST",
            "/v1/sessions",
            {
                "resources": [{"type": "memory_store", "memory_store_id": ids["rw"], "access": "read_only"}]
                * 9
            },
            SB,
            400,
            "invalid_request_error",
        ),
        (
            "session: archived store",
            "admin",
            "POST",
            "/v1/sessions",
            {
                "resources": [
                    {"type": "memory_store", "memory_store_id": ids["archived"], "access": "read_write"}
                ]
            },
            SB,
            400,
            "invalid_request_error",
        ),
        (
            "session: bad access",
            "admin",
            "POST",
            "/v1/sessions",
            {"resources": [{"type": "memory_store", "memory_store_id": ids["rw"], "access": "admin"}]},
            SB,
            400,
            "invalid_request_error",
        ),
        (
            "session: unknown store",
            "admin",
            "POST",
            "/v1/sessions",
            {
                "resources": [
                    {"type": "memory_store", "memory_store_id": "memstore_nope", "access": "read_write"}
                ]
            },
            SB,
            404,
            "not_found_error",
        ),
        (
            "session created with a session token",
            "token",
            "POST",
            "/v1/sessions",
            {"resources": []},
            SB,
            403,
            "permission_error",
        ),
    ]
    return rows


def test_service_bad_input_matrix(tmp_path, stats):
    rig = rig_world(
        tmp_path, (StoreSpec("Stress Notes", seed=SEED), StoreSpec("Stress Handbook", "read_only"))
    )
    try:
        api = rig.api
        api.create(rig.ro, "/keep.md", "ro\n")
        other = api.create_store("Other")
        archived = api.create_store("Archived")
        api._ok(api.http.post(f"/v1/memory_stores/{archived}/archive", headers=MB))
        other_session = api.create_session([(other, "read_write")])
        ids = {
            "rw": rig.rw,
            "ro": rig.ro,
            "other": other,
            "archived": archived,
            "other_session": other_session["id"],
            "keep": api.memories(rig.rw)["/keep.md"]["id"],
            "ro_keep": api.memories(rig.ro)["/keep.md"]["id"],
        }
        token = sessions_token_from_secret(rig.session["work_secret"])

        def snapshot():
            out = {}
            for sid in (rig.rw, rig.ro):
                out[sid] = (
                    api.memories(sid),
                    api._ok(api.http.get(f"/v1/memory_stores/{sid}/counter", headers=MB)),
                )
            stores = api._ok(
                api.http.get(
                    "/v1/memory_stores", params={"limit": 100, "include_archived": "true"}, headers=MB
                )
            )
            out["stores"] = sorted(s["id"] for s in stores["data"])
            return out

        failures = []
        with httpx.Client(base_url=rig.service.base_url, timeout=30) as http:
            before = snapshot()  # nothing any row does may change it
            for name, cred, method, url, body, headers, status, etype in service_rows(ids):
                h = dict(headers)
                if cred == "admin":
                    h["x-api-key"] = rig.service.admin_key
                elif cred == "token":
                    h["authorization"] = f"Bearer {token}"
                elif cred is not None and cred.startswith("Bearer "):
                    h["authorization"] = cred
                elif cred is not None:
                    h["x-api-key"] = cred
                r = http.request(method, url, json=body, headers=h)
                got_type = (
                    r.json().get("error", {}).get("type")
                    if r.headers.get("content-type", "").startswith("application/json")
                    else None
                )
                if (r.status_code, got_type) != (status, etype):
                    failures.append(
                        f"{name}: got {r.status_code} {got_type}, want {status} {etype}: {r.text[:200]}"
                    )
                elif r.headers.get("request-id") is None:
                    failures.append(f"{name}: no request-id header")
                if snapshot() != before:
                    failures.append(f"{name}: something else changed")
                stats["steps"] += 1
        assert not failures, "\n".join(failures)
        assert "Traceback" not in rig.service.stderr()
    finally:
        rig.close()
