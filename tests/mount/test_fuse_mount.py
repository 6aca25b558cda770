"""Real mounts (devmount in a subprocess) driven by real shell tools."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from memfs.mount.state import State
from tests.support.mounts import PYTHON, DevMount, User, mounted_at, open_dir, sh

# No skip without FUSE: scripts/test installs fuse3 and refuses to run without /dev/fuse, so a
# missing FUSE is a loud failure here, never a quietly skipped suite.
pytestmark = [pytest.mark.timeout(90)]

RW_ID, RO_ID = "memstore_rw", "memstore_ro"
RW = f"{RW_ID}:notes:read_write"
RO = f"{RO_ID}:handbook:read_only"
MARKER, NOTICES = ".anthropic-memory-store", ".sync-notices.log"
EXCLUDE = f"-x {MARKER} -x {NOTICES}"


def seed(state_dir, store_id: str, files: dict[str, tuple[str | None, bytes]]) -> None:
    st = State(state_dir)
    for path, (memory_id, data) in files.items():
        st.upsert_file(store_id, path, memory_id, st.put_blob(data), len(data), 1_700_000_000_000_000_000)
    st.close()


def staged(state_dir, store_id: str) -> tuple[dict[str, tuple[str | None, bytes]], set[str]]:
    st = State(state_dir)
    try:
        files = {p: (r.memory_id, st.get_blob(r.sha)) for p, r in st.load_files(store_id).items()}
        return files, set(st.load_dirs(store_id))
    finally:
        st.close()


AGENT = User(1000, 1000)  # owns the files of an `--uid 1000 --gid 1000 --allow-other` mount
AGENT_MOUNT = ("--uid", "1000", "--gid", "1000", "--allow-other")


@pytest.fixture
def mount(devmounts, tmp_path):
    """mount(**kw) -> a started DevMount over tmp_path/state with a rw and a ro store.

    `agent=True` mounts for the AGENT user (owner, allow_other) in a directory every user can
    reach."""
    made: list[Path] = []

    def start(*, stores=(RW, RO), extra=(), state=None, name="root", agent=False):
        if agent:
            made.append(open_dir("memfs-agent-"))
            root, extra = made[-1] / name, (*AGENT_MOUNT, *extra)
        else:
            root = tmp_path / name
        m = DevMount(root, state or tmp_path / "state", stores, extra=extra)
        devmounts.append(m)
        return m.start()

    yield start
    for m in devmounts:
        m.close()  # unmount before removing the directories the mounts live in
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


SESSION = r"""
set -e
echo "hello world" > a.md
echo "second line" >> a.md
printf 'alpha\nbeta\ngamma\n' > b.md
sed -i 's/beta/BETA/' b.md
mkdir -p dir1/sub/deep
cp a.md dir1/sub/deep/c.md
printf 'x\n' > dir1/x.md
cp -r dir1 dir2
mv a.md renamed.md
mv dir2 dir3
mv dir3/x.md dir3/sub/x-moved.md
mkdir -p gone/x && echo bye > gone/x/f && rm -r gone
truncate -s 5 b.md
truncate -s 30 renamed.md
printf 'v1' > edit.md; printf 'v2 saved' > .edit.md.tmp; mv .edit.md.tmp edit.md
"$PY" -c "
f = open('off.md', 'wb'); f.write(b'0123456789'); f.seek(20); f.write(b'end'); f.close()
g = open('off.md', 'r+b'); g.seek(3); g.write(b'XYZ'); g.close()
h = open('off.md', 'ab'); h.write(b'+tail'); h.close()
"
rm dir1/sub/deep/c.md
touch empty.md
mkdir emptydir
for i in $(seq 1 30); do echo "line $i of file $i" > "dir1/f$i.txt"; done
cat renamed.md b.md > /dev/null
ls -la > /dev/null
"""


def test_shell_session_matches_a_plain_directory(mount, tmp_path):
    m = mount()
    store = m.path("notes")
    plain = tmp_path / "plain"
    plain.mkdir()
    sh(SESSION, cwd=plain, check=True)
    sh(SESSION, cwd=store, check=True)
    out = sh(f"diff -r {EXCLUDE} {plain} {store}")
    assert out.returncode == 0, out.stdout + out.stderr
    listing = f"find . -not -name {MARKER} -not -name {NOTICES} | sort"
    assert sh(listing, cwd=store).stdout == sh(listing, cwd=plain).stdout
    assert sh("grep -rn line . | sort", cwd=store).stdout == sh("grep -rn line . | sort", cwd=plain).stdout
    grep_l = "grep -rl 'second line' . | sort"
    assert (
        sh(grep_l, cwd=store).stdout == sh(grep_l, cwd=plain).stdout == "./dir3/sub/deep/c.md\n./renamed.md\n"
    )
    ls = sh("ls -la", cwd=store, check=True).stdout
    assert MARKER in ls and NOTICES in ls and "renamed.md" in ls
    assert sh("stat -c %s off.md", cwd=store).stdout.strip() == "28"
    assert m.stop() == 0
    assert not mounted_at(m.root)
    # Staged state == the plain directory, byte for byte.
    files, dirs = staged(m.state_dir, RW_ID)
    expect_files = {"/" + str(p.relative_to(plain)): p.read_bytes() for p in plain.rglob("*") if p.is_file()}
    expect_dirs = {"/" + str(p.relative_to(plain)) for p in plain.rglob("*") if p.is_dir()}
    assert {p: c for p, (_, c) in files.items()} == expect_files
    assert dirs == expect_dirs
    # and a remount shows the same tree
    m2 = mount(name="root2")
    out = sh(f"diff -r {EXCLUDE} {plain} {m2.path('notes')}")
    assert out.returncode == 0, out.stdout + out.stderr


def test_editor_saves_keep_the_memory_id(mount, tmp_path):
    seed(
        tmp_path / "state",
        RW_ID,
        {"/doc.md": ("mem_doc", b"version one\n"), "/vim.md": ("mem_vim", b"old text\n")},
    )
    m = mount()
    store = m.path("notes")
    ino = os.stat(store / "doc.md").st_ino
    sh("""set -e; printf 'version two\\n' > .doc.md.new; mv .doc.md.new doc.md""", cwd=store, check=True)
    assert (store / "doc.md").read_bytes() == b"version two\n"
    assert os.stat(store / "doc.md").st_ino != ino  # the new file's inode, as on any disk
    if shutil.which("vim"):
        # vim's default save (writebackup) writes a temp and renames it over
        sh(
            "vim -n -E -s -u NONE -c 'set writebackup nobackup' -c '%s/old/new/' -c 'wq' vim.md",
            cwd=store,
            check=True,
            timeout=30,
        )
        assert (store / "vim.md").read_bytes() == b"new text\n"
    assert m.stop() == 0
    files, _ = staged(m.state_dir, RW_ID)
    assert files["/doc.md"] == ("mem_doc", b"version two\n")
    if shutil.which("vim"):
        assert files["/vim.md"] == ("mem_vim", b"new text\n")
    assert set(files) == {"/doc.md", "/vim.md"}  # no temp name reached the staged view


def test_rename_keeps_inode_and_unlink_while_open(mount):
    m = mount()
    store = m.path("notes")
    sh("mkdir -p d1/d2 && echo data > d1/d2/f.md", cwd=store, check=True)
    ino_f, ino_d = os.stat(store / "d1/d2/f.md").st_ino, os.stat(store / "d1").st_ino
    sh("mv d1 moved && mv moved/d2/f.md moved/g.md", cwd=store, check=True)
    assert os.stat(store / "moved").st_ino == ino_d and os.stat(store / "moved/g.md").st_ino == ino_f
    code = f"""
import os
fd = os.open({str(store / "open.md")!r}, os.O_CREAT | os.O_RDWR)
os.write(fd, b'kept while open'); os.fsync(fd)
os.unlink({str(store / "open.md")!r})
assert not os.path.exists({str(store / "open.md")!r})
os.lseek(fd, 0, 0); print(os.read(fd, 100).decode()); os.close(fd)
"""
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "kept while open"
    assert m.stop() == 0
    files, dirs = staged(m.state_dir, RW_ID)
    assert set(files) == {"/moved/g.md"} and dirs == {"/moved", "/moved/d2"}


READ_ONLY_TOOLS = [
    "echo x > new.md",
    "echo x >> doc.md",
    "touch new.md",
    "touch doc.md",
    "rm doc.md",
    "rm -r sub",
    "rmdir sub",
    "mv doc.md moved.md",
    "mv doc.md sub/",
    "mkdir newdir",
    "mkdir -p newdir/deeper",
    "cp doc.md copy.md",
    "sed -i s/read/write/ doc.md",
    "truncate -s 0 doc.md",
    "chmod 600 doc.md",
    "ln -s doc.md link",
    "ln doc.md hard",
    "mkfifo fifo",
    "$PY -c \"open('doc.md', 'r+')\"",
]


@pytest.mark.parametrize("who", ["root", "agent"])
def test_read_only_store_and_root_refuse_every_tool(mount, tmp_path, who):
    """EROFS for every tool, root and the non-root owner alike: memfs answers before any mode
    check (no `default_permissions`; an owner would otherwise get EACCES from the 0444 mode)."""
    seed(tmp_path / "state", RO_ID, {"/doc.md": ("mem_1", b"read me\n"), "/sub/x.md": ("mem_2", b"x\n")})
    before = staged(tmp_path / "state", RO_ID)
    agent = who == "agent"
    user = AGENT if agent else None
    m = mount(agent=agent)
    ro = m.path("handbook")
    assert sh("cat doc.md", cwd=ro, user=user).stdout == "read me\n"
    assert sh("stat -c %a doc.md sub .", cwd=ro).stdout.split() == ["444", "555", "555"]
    assert sh("stat -c %u:%g doc.md", cwd=ro).stdout.strip() == ("1000:1000" if agent else "0:0")
    for cmd in READ_ONLY_TOOLS:
        out = sh(cmd, cwd=ro, user=user)
        assert out.returncode != 0, cmd
        assert "Read-only file system" in out.stderr, (cmd, out.stderr)
    # access(2) says the same: W_OK is EROFS, so `test -w` is false; reading is allowed.
    assert sh("test -w doc.md || test -w sub || echo refused", cwd=ro, user=user).stdout == "refused\n"
    assert sh("test -r doc.md && test -x sub && echo ok", cwd=ro, user=user).stdout == "ok\n"
    for cmd in [
        "mkdir x",
        "touch x",
        "echo x > x",
        "rmdir notes",
        "mv notes other",
        "rm -r handbook",
        "ln -s notes l",
        "chmod 700 notes",
    ]:
        out = sh(cmd, cwd=m.root, user=user)
        assert out.returncode != 0 and "Read-only file system" in out.stderr, (cmd, out.stderr)
    assert sh("stat -c %a .", cwd=m.root).stdout.strip() == "555"
    assert m.stop() == 0
    assert staged(tmp_path / "state", RO_ID) == before
    assert staged(tmp_path / "state", RW_ID) == ({}, set())


def test_special_files_are_eperm_and_xattrs_enotsup(mount):
    m = mount()
    store = m.path("notes")
    sh("echo x > f.md", cwd=store, check=True)
    for cmd in ("ln -s f.md link", "ln f.md hard", "mkfifo fifo", "mknod dev c 1 3"):
        out = sh(cmd, cwd=store)
        assert out.returncode != 0 and "Operation not permitted" in out.stderr, (cmd, out.stderr)
    code = "import os, sys; os.setxattr(sys.argv[1], 'user.k', b'v')"
    out = subprocess.run(
        [PYTHON, "-c", code, str(store / "f.md")], capture_output=True, text=True, timeout=20
    )
    assert "Operation not supported" in out.stderr
    if shutil.which("setfattr"):
        out = sh("setfattr -n user.k -v v f.md", cwd=store)
        assert out.returncode != 0 and "Operation not supported" in out.stderr, out.stderr
    assert os.listxattr(store / "f.md") == []
    assert sorted(os.listdir(store)) == [MARKER, NOTICES, "f.md"]


def test_getxattr_is_left_to_the_kernel_after_one_enosys(mount):
    """memfs keeps no xattrs: the first getxattr answers ENOSYS, so the kernel stops asking (no
    round trip per `ls -l` entry or per write()) and callers get EOPNOTSUPP, files still work."""
    m = mount()
    store = m.path("notes")
    sh("mkdir d && echo x > d/f.md", cwd=store, check=True)
    for target in (store / "d" / "f.md", store / "d", store / MARKER, m.root):
        for name in ("user.k", "security.capability", "security.selinux"):
            with pytest.raises(OSError) as e:
                os.getxattr(target, name)
            assert e.value.errno == errno.EOPNOTSUPP, (target, name, e.value)
    assert os.listxattr(store / "d" / "f.md") == []
    out = sh("ls -l d && echo more >> d/f.md && cat d/f.md", cwd=store, check=True)
    assert "f.md" in out.stdout and out.stdout.endswith("x\nmore\n")


def test_fuse_ops_getxattr_answers_enosys_and_enoent(tmp_path):
    import pyfuse3
    import trio

    from memfs.mount.filesystem import Filesystem
    from memfs.mount.fuse_ops import FuseOps
    from memfs.records import StoreInfo

    with State(tmp_path / "state") as st:
        ops = FuseOps(Filesystem(st, [StoreInfo("memstore_x", "x", "x", "read_write")]))
        with pytest.raises(pyfuse3.FUSEError) as e:
            trio.run(ops.getxattr, 1, b"user.k", None)
        assert e.value.errno == errno.ENOSYS
        with pytest.raises(pyfuse3.FUSEError) as e:
            trio.run(ops.getxattr, 999_999, b"user.k", None)
        assert e.value.errno == errno.ENOENT


def test_reserved_files(mount):
    m = mount()
    store = m.path("notes")
    assert (store / MARKER).read_bytes() == f"version 1\n{RW_ID}".encode()
    assert (m.path("handbook") / MARKER).read_bytes() == f"version 1\n{RO_ID}".encode()
    assert (store / NOTICES).read_bytes() == b""
    assert sh(f"stat -c %a {MARKER} {NOTICES}", cwd=store).stdout.split() == ["444", "444"]
    for cmd in (f"rm -f {MARKER}", f"mv {MARKER} x", f"rm -f {NOTICES}", f"mv {NOTICES} y"):
        out = sh(cmd, cwd=store)
        assert out.returncode != 0 and "Operation not permitted" in out.stderr, (cmd, out.stderr)
    out = sh(f"echo hi > {MARKER}", cwd=store)  # as root too: the kernel lets root try, we refuse
    assert out.returncode != 0 and "Permission denied" in out.stderr, out.stderr
    sh("echo a > other", cwd=store, check=True)
    out = sh(f"mv other {NOTICES}", cwd=store)
    assert out.returncode != 0 and "Operation not permitted" in out.stderr
    assert (store / MARKER).read_bytes() == f"version 1\n{RW_ID}".encode()


def test_names_sizes_and_utf8(mount):
    m = mount()
    store = m.path("notes")
    out = sh(f"touch {'x' * 256}", cwd=store)
    assert out.returncode != 0 and "File name too long" in out.stderr
    sh(f"touch {'x' * 255}", cwd=store, check=True)
    with pytest.raises(OSError) as e:
        os.open(os.fsencode(store) + b"/bad-\xff.md", os.O_CREAT | os.O_WRONLY)
    assert e.value.errno == errno.EINVAL
    for bad in ("cafe\u0301.md", "back\\slash", "ctl\x01", "line\u2028sep", "zw\u200bsp"):
        with pytest.raises(OSError) as e:
            open(store / bad, "w").close()
        assert e.value.errno == errno.EINVAL, bad
    deep = store.joinpath(*[f"d{i}" for i in range(21)])
    with pytest.raises(OSError) as e:
        deep.mkdir(parents=True)
    assert e.value.errno == errno.ENAMETOOLONG  # the 21st segment
    # size: 102,400 fits, 102,401 is EFBIG at the crossing write
    (store / "max.md").write_bytes(b"a" * 102_400)
    out = sh("head -c 102401 /dev/zero | tr '\\0' b > big.md", cwd=store)
    assert out.returncode != 0 and "File too large" in out.stderr, out.stderr
    with pytest.raises(OSError) as e:
        with open(store / "big2.md", "wb") as f:
            f.write(b"c" * 102_401)
    assert e.value.errno == errno.EFBIG
    out = sh("truncate -s 102401 max.md", cwd=store)
    assert out.returncode != 0 and "File too large" in out.stderr
    assert os.path.getsize(store / "max.md") == 102_400
    # not UTF-8: close fails with EILSEQ, the file stays (local only), one notice
    fd = os.open(store / "bin.dat", os.O_CREAT | os.O_WRONLY)
    os.write(fd, b"\xff\xfe\x00binary")
    with pytest.raises(OSError) as e:
        os.close(fd)
    assert e.value.errno == errno.EILSEQ
    assert (store / "bin.dat").read_bytes() == b"\xff\xfe\x00binary"
    # A notice invalidates the notices file's cached size, from a queue drained just after the
    # request that caused it: look again for a moment rather than sleep out an attribute timeout.
    deadline = time.monotonic() + 10
    while "upload-refused /bin.dat" not in (notices := (store / NOTICES).read_text()):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert "upload-refused /bin.dat" in notices, notices
    # the failed writers' new files are gone again, `truncate` (an ftruncate through its own
    # handle) left max.md as it was: one notice each (SEMANTICS.md "Failed writers")
    assert [line.split()[1:3] for line in notices.splitlines()] == [
        ["write-failed", "/big.md"],
        ["write-failed", "/big2.md"],
        ["write-failed", "/max.md"],
        ["upload-refused", "/bin.dat"],
    ], notices
    assert not (store / "big.md").exists() and not (store / "big2.md").exists()
    assert m.stop() == 0
    st = State(m.state_dir)
    rows = st.load_files(RW_ID)
    assert rows["/bin.dat"].bad_utf8 and rows["/max.md"].size == 102_400
    assert "/big.md" not in rows and "/big2.md" not in rows  # created by failed writers: undone
    st.close()


def test_the_2001st_file_is_enospc(mount, tmp_path):
    m = mount()
    store = m.path("notes")
    code = """
import errno, os, sys
d = sys.argv[1]
for i in range(2000):
    with open(os.path.join(d, f"f{i:04}.md"), "w") as f:
        f.write(f"file {i}\\n")
try:
    open(os.path.join(d, "one-too-many.md"), "w").close()
except OSError as e:
    print(errno.errorcode[e.errno])
else:
    print("created")
"""
    out = subprocess.run([PYTHON, "-c", code, str(store)], capture_output=True, text=True, timeout=80)
    assert out.stdout.strip() == "ENOSPC", out.stdout + out.stderr
    assert len(os.listdir(store)) == 2002
    t0 = time.monotonic()
    assert sh("grep -rl 'file 1999' .", cwd=store).stdout.split() == ["./f1999.md"]
    assert time.monotonic() - t0 < 20
    out = sh("df -i . | tail -1", cwd=store)
    assert out.returncode == 0


def test_max_bytes_is_enospc(mount):
    m = mount(extra=["--max-bytes", "4096"])
    store = m.path("notes")
    (store / "a.md").write_bytes(b"a" * 4000)
    with pytest.raises(OSError) as e:
        with open(store / "b.md", "wb") as f:
            f.write(b"b" * 200)
    assert e.value.errno == errno.ENOSPC


def test_sigkill_right_after_close_then_remount(mount, tmp_path):
    m = mount()
    store = m.path("notes")
    code = f"""
import os
for i in range(50):
    with open(os.path.join({str(store)!r}, f"k{{i}}.md"), "w") as f:
        f.write("durable " * i)
print("closed", flush=True)
"""
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "closed"
    m.kill()  # SIGKILL of the daemon right after the closes returned; the dead mount is cleared
    assert not mounted_at(m.root)
    m2 = mount(name="root2")
    for i in range(50):
        assert (m2.path("notes") / f"k{i}.md").read_text() == "durable " * i
    files, _ = staged(tmp_path / "state", RW_ID)
    assert len(files) == 50


def test_a_second_mount_of_the_same_state_dir_is_refused(mount, tmp_path):
    m = mount()
    other = DevMount(tmp_path / "root2", tmp_path / "state", [RW])
    try:
        with pytest.raises(RuntimeError):
            other.start(timeout=15)
        assert "in use by a live memfs mount" in other.log()
        assert str(m.proc.pid) in other.log()
    finally:
        other.close()
    assert mounted_at(m.root)


def test_sigterm_unmounts_and_exits_zero(mount):
    m = mount()
    sh("echo hi > x", cwd=m.path("notes"), check=True)
    assert m.stop() == 0
    assert not mounted_at(m.root)
    assert hashlib.sha256(b"hi\n").hexdigest() in {
        r.sha for r in State(m.state_dir).load_files(RW_ID).values()
    }


def test_sync_api_changes_reach_the_kernel_at_once(mount):
    """apply_remote/move_path/remove_path/add_notice invalidate the kernel's caches (60 s TTL)."""
    m = mount(extra=["--stdin-commands"])
    store = m.path("notes")
    m.command(op="apply_remote", store=RW_ID, path="/r.md", memory_id="mem_r", content="one\n")
    assert (store / "r.md").read_text() == "one\n"  # attributes and pages now cached
    m.command(op="apply_remote", store=RW_ID, path="/r.md", memory_id="mem_r", content="two, longer\n")
    assert (store / "r.md").read_text() == "two, longer\n"
    with open(store / "r.md") as f:  # an open file: attributes only, then pages by mtime/size
        assert f.read() == "two, longer\n"
        m.command(op="apply_remote", store=RW_ID, path="/r.md", memory_id="mem_r", content="3\n")
        os.stat(store / "r.md")
        f.seek(0)
        assert f.read() == "3\n"
    assert not (store / "new").exists()
    m.command(op="apply_remote", store=RW_ID, path="/new/x.md", memory_id="mem_x", content="x\n")
    assert (store / "new" / "x.md").read_text() == "x\n"
    ino = os.stat(store / "new" / "x.md").st_ino
    m.command(op="move_path", store=RW_ID, old="/new/x.md", new="/moved/y.md")
    assert not (store / "new").exists() and not (store / "new" / "x.md").exists()
    assert os.stat(store / "moved" / "y.md").st_ino == ino
    m.command(op="remove_path", store=RW_ID, path="/moved/y.md")
    assert not (store / "moved").exists()
    assert sorted(os.listdir(store)) == [MARKER, NOTICES, "r.md"]
    assert (store / NOTICES).read_text() == ""
    m.command(op="add_notice", store=RW_ID, kind="store-won-conflict", path="/r.md", details="kept at /k")
    assert (store / NOTICES).read_text().endswith(" store-won-conflict /r.md kept at /k\n")
    # Many invalidations while a reader hammers the same directory: nothing deadlocks.
    reader = subprocess.Popen(
        ["bash", "-c", "for i in $(seq 300); do cat r.md > /dev/null; ls > /dev/null; done"], cwd=store
    )
    try:
        for i in range(100):
            m.command(
                op="apply_remote", store=RW_ID, path="/r.md", memory_id="mem_r", content=f"v{i}\n" * (i + 1)
            )
        assert reader.wait(60) == 0
    finally:
        reader.kill()
    assert (store / "r.md").read_text() == "v99\n" * 100
    assert m.stop() == 0
    files, dirs = staged(m.state_dir, RW_ID)
    assert files == {"/r.md": ("mem_r", b"v99\n" * 100)} and dirs == set()


def test_an_open_before_the_kernel_is_told_of_a_change_reads_it_whole(mount):
    """A pull's change reaches the kernel's caches through the invalidation queue, a moment after
    the tree has it. A file opened in that moment must not be read from the kernel's old pages
    or up to its old size, nor, once the invalidation lands mid-read, from old pages and then the
    new content: a grep of a shared store read such a torn file (one version's lines, then the
    next one's)."""
    m = mount(extra=["--stdin-commands"])
    path = m.path("notes") / "torn.md"
    old = "".join(f"v1 line {i:05d}\n" for i in range(4000))  # 56 KB: pages enough for a torn read
    new = "".join(f"v22 line {i:05d}\n" for i in range(4000))  # longer: the old size would cut it

    def cached(content: str) -> None:
        m.command(op="apply_remote", store=RW_ID, path="/torn.md", memory_id="mem_t", content=content)
        assert path.read_text() == content  # the kernel holds its pages and attributes now
        assert path.read_text() == content  # and keeps them across opens (keep_cache)

    # read whole before the invalidation lands: the new content, all of it
    cached(old)
    m.command(op="apply_remote", store=RW_ID, path="/torn.md", memory_id="mem_t", content=new, hold=True)
    with open(path, "rb", buffering=0) as f:
        assert f.read().decode() == new
    m.command(op="deliver_held")
    assert os.stat(path).st_size == len(new) and path.read_text() == new
    # the invalidation lands in the middle of the read: still the new content alone
    cached(old)
    m.command(op="apply_remote", store=RW_ID, path="/torn.md", memory_id="mem_t", content=new, hold=True)
    with open(path, "rb", buffering=0) as f:
        head = f.read(8192)
        m.command(op="deliver_held")
        rest = f.read()
    assert (head + rest).decode() == new
    assert m.stop() == 0


@pytest.mark.timeout(120)
def test_failed_writers_close_while_another_process_lists_that_directory(mount):
    """The mount reads FUSE requests from one task (runner.MAX_TASKS), and a failed writer's
    close waits for its invalidation, which needs the directory's lock; another process listing
    that directory the whole time must neither hang the mount nor see the undone file after
    the close returned."""
    m = mount()
    d = m.path("notes") / "busy"
    d.mkdir()
    for i in range(50):
        (d / f"f{i}.md").write_text(f"{i}\n")
    lister = subprocess.Popen(
        ["bash", "-c", f"while :; do ls -l {d} >/dev/null; stat {d}/f1.md >/dev/null; done"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for i in range(20):
            fd = os.open(d / f"big{i}.md", os.O_CREAT | os.O_WRONLY)
            with pytest.raises(OSError) as e:
                os.write(fd, b"x" * 102_401)
            assert e.value.errno == errno.EFBIG
            with pytest.raises(OSError):
                os.close(fd)
            assert f"big{i}.md" not in os.listdir(d)
    finally:
        lister.kill()
        lister.wait()
    assert sorted(os.listdir(d)) == sorted(f"f{i}.md" for i in range(50))


def test_changes_outside_a_request_of_the_node_reach_its_cached_attributes(mount):
    """Attributes the kernel holds for the entry/attr timeout (SEMANTICS.md#d-kernel-cache) are
    invalidated when the mount changes them outside a FUSE request of that node."""
    m = mount(extra=["--stdin-commands"])
    store = m.path("notes")
    # A failed writer's new file is removed at its close (a FLUSH of the file, not of the
    # directory): the directory's mtime moves, and a `stat` right after close() shows it.
    (store / "d").mkdir()
    fd = os.open(store / "d" / "big.md", os.O_CREAT | os.O_WRONLY)
    with pytest.raises(OSError) as e:
        os.write(fd, b"x" * 102_401)
    assert e.value.errno == errno.EFBIG
    before = os.stat(store / "d").st_mtime_ns  # now cached by the kernel
    with pytest.raises(OSError):
        os.close(fd)
    assert not (store / "d" / "big.md").exists()
    assert os.stat(store / "d").st_mtime_ns > before
    # A file removed on the store while a reader holds it open: fstat() says it is gone.
    m.command(op="apply_remote", store=RW_ID, path="/r.md", memory_id="mem_r", content="one\n")
    with open(store / "r.md") as f:
        assert os.fstat(f.fileno()).st_nlink == 1  # cached
        m.command(op="remove_path", store=RW_ID, path="/r.md")
        assert os.fstat(f.fileno()).st_nlink == 0
        assert f.read() == "one\n"  # the open handle still reads what it opened
    assert not (store / "r.md").exists()
    # A rename on the store over a file a reader holds open: the same.
    m.command(op="apply_remote", store=RW_ID, path="/s.md", memory_id="mem_s", content="s\n")
    m.command(op="apply_remote", store=RW_ID, path="/t.md", memory_id="mem_t", content="t\n")
    with open(store / "t.md") as f:
        assert os.fstat(f.fileno()).st_nlink == 1
        m.command(op="move_path", store=RW_ID, old="/s.md", new="/t.md")
        assert os.fstat(f.fileno()).st_nlink == 0
    assert (store / "t.md").read_text() == "s\n"


# Permission checks without `default_permissions`: the same tree, set up by the owner on a plain
# directory and in a read_write store, must give every user the same answers, tool for tool.
# (No op touches a file a non-owner created: in memfs every file belongs to the mount's owner.)
PERM_SETUP = r"""
set -e
mkdir private shared open sticky
echo secret > private/s.md; chmod 700 private
echo team > shared/t.md; chmod 640 shared/t.md; chmod 750 shared
echo mine > mine.md; chmod 600 mine.md
echo pub > pub.md
echo o > open/o.md; chmod 666 open/o.md; chmod 777 open
echo own > sticky/own.md; chmod 666 sticky/own.md; chmod 1777 sticky
"""
PERM_OPS = [
    "cat pub.md",
    "cat mine.md",
    "cat private/s.md",
    "ls private",
    "cd private",
    "cat shared/t.md",
    "ls shared",
    "test -w pub.md",
    "test -r mine.md",
    "test -x private",
    "echo x >> pub.md",
    "echo x >> open/o.md",
    "truncate -s 1 open/o.md",
    "touch pub.md",
    "touch open/o.md",
    "chmod 644 open/o.md",
    "echo x > new-$(id -u).md",
    "echo x > open/by-$(id -u).md",
    "mkdir dir-$(id -u)",
    "mv pub.md pub2.md",
    "cp open/o.md open/copy-$(id -u).md",
    "rm mine.md",
    "echo x >> sticky/own.md",
    "rm sticky/own.md",
    "mv sticky/own.md sticky/x.md",
    "mv shared/t.md open/",
    "rm -r private",
    "ls",
    "cat open/o.md open/copy-*.md",
]
PERM_USERS = [User(2000, 2000), User(2001, 1000), User(2002, 2002, (1000,)), AGENT, None]  # None: root


def test_permissions_match_a_plain_directory_for_every_user(mount):
    m = mount(agent=True, stores=(RW,))
    store = m.path("notes")
    plain = open_dir("memfs-plain-")
    try:
        os.chown(plain, 1000, 1000)
        for tree in (plain, store):
            sh(PERM_SETUP, cwd=tree, user=AGENT, check=True)
        refused = {}
        for user in PERM_USERS:
            for op in PERM_OPS:
                want = sh(op, cwd=plain, user=user)
                got = sh(op, cwd=store, user=user)
                assert (got.returncode, got.stdout, got.stderr) == (
                    want.returncode,
                    want.stdout,
                    want.stderr,
                ), (
                    user,
                    op,
                )
                refused.setdefault(user, []).append(got.returncode != 0)
        for user in PERM_USERS[:3]:  # the other users: some things allowed, some refused
            assert any(refused[user]) and not all(refused[user]), user
        listing = "find . -not -name '.*' -printf '%p %m\\n' | sort"
        assert sh(listing, cwd=store).stdout == sh(listing, cwd=plain).stdout
    finally:
        shutil.rmtree(plain, ignore_errors=True)


def test_modes_asked_for_are_kept_and_a_non_owner_write_drops_setuid(mount):
    """docs/SEMANTICS.md#d-fs: `umask 777; touch f` is 0000, `mkdir(d, 0)` is 0000; a write by another user
    (through --allow-other) to a 04777/02777 file succeeds and clears setuid/setgid, as the
    kernel does on a plain directory."""
    m = mount(agent=True, stores=(RW,))
    store = m.path("notes")
    plain = open_dir("memfs-plain-")
    try:
        os.chown(plain, 1000, 1000)
        setup = (
            '(umask 777; touch zero); "$PY" -c "import os; os.mkdir(\'d0\', 0)"; '
            "for mode in 4777 2777 6777 4755; do echo x > s$mode; chmod $mode s$mode; done"
        )
        for tree in (plain, store):
            sh(setup, cwd=tree, user=AGENT, check=True)
            for mode in ("4777", "2777", "6777"):
                sh(f"echo more >> s{mode}", cwd=tree, user=User(2000, 2000), check=True)
            sh("echo more >> s4755", cwd=tree, user=AGENT, check=True)  # the owner's write too
        listing = "stat -c '%n %a' zero d0 s* | sort"
        want = sh(listing, cwd=plain, check=True).stdout
        assert sh(listing, cwd=store, check=True).stdout == want
        assert dict(line.split() for line in want.splitlines()) == {
            "zero": "0",
            "d0": "0",
            "s4777": "777",
            "s2777": "777",
            "s6777": "777",
            "s4755": "755",
        }
        assert sh("cat s4777", cwd=store, check=True).stdout == "x\nmore\n"
    finally:
        shutil.rmtree(plain, ignore_errors=True)


def test_rename_whiteout_is_refused_not_done_as_a_plain_rename(mount):
    """RENAME_WHITEOUT used to be ignored (a plain rename happened, no whiteout)."""
    import ctypes

    m = mount()
    notes = m.root / "notes"
    (notes / "a.md").write_text("kept where it is\n")
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_whiteout = -100, 4
    rc = libc.renameat2(
        at_fdcwd, str(notes / "a.md").encode(), at_fdcwd, str(notes / "b.md").encode(), rename_whiteout
    )
    assert rc == -1 and ctypes.get_errno() == errno.EINVAL
    assert (notes / "a.md").read_text() == "kept where it is\n" and not (notes / "b.md").exists()
