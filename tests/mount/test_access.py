"""Permission checks (the mount has no `default_permissions`): access.py against the kernel's own
answers, and the core's permit* rules (read-only first, the path walk, sticky, setattr)."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import subprocess

import pytest

from memfs.mount.access import Caller, R, W, X, allowed, open_wants
from tests.mount.conftest import RO, Harness, errno_of
from tests.support.mounts import User, open_dir

pytestmark = pytest.mark.timeout(60)

OWNER, GROUP = 1000, 1000
USERS = {  # name -> (the identity to run as, the Caller memfs would see)
    "owner": (User(1000, 1000), Caller(1000, 1000)),
    "group": (User(2001, 1000), Caller(2001, 1000)),
    "supplementary": (
        User(2002, 2002, (1000,)),
        Caller(2002, 2002, 1, read_groups=lambda pid: frozenset({1000})),
    ),
    "other": (User(2000, 2000), Caller(2000, 2000)),
    "root": (None, Caller(0, 0)),
}
# What the kernel says, per entry: bash's test -r/-w/-x are access(2) calls (no fork per check).
ASK = 'for f in *; do r=0 w=0 x=0; [ -r "$f" ] && r=4; [ -w "$f" ] && w=2; [ -x "$f" ] && x=1; echo "$f $((r|w|x))"; done'


def test_allowed_matches_the_kernel_for_every_mode_and_user():
    """Every permission mode of a file and a directory owned by 1000:1000, every rwx request, five
    kinds of caller: `allowed` answers what the kernel answers on a real directory."""
    top = open_dir("memfs-access-")
    try:
        for mode in range(0o1000):
            f, d = top / f"f{mode:03o}", top / f"d{mode:03o}"
            f.touch()
            d.mkdir()
            for p in (f, d):
                os.chown(p, OWNER, GROUP)
                os.chmod(p, mode)
        checked = 0
        for name, (user, caller) in USERS.items():
            argv = (user.argv() if user else []) + ["bash", "-c", ASK]
            out = subprocess.run(argv, cwd=top, capture_output=True, text=True, check=True, timeout=60).stdout
            kernel = dict(line.split() for line in out.splitlines())
            assert len(kernel) == 1024, name
            for entry, bits in kernel.items():
                mode = int(entry[1:], 8) | (stat.S_IFDIR if entry[0] == "d" else stat.S_IFREG)
                for want in range(1, 8):
                    # one rwx triplet decides every bit (root: no x without an x bit), so a
                    # request is allowed exactly when each of its bits is
                    expect = want & int(bits) == want
                    assert allowed(mode, OWNER, GROUP, caller, want) == expect, (name, entry, want)
                    checked += 1
        assert checked == 5 * 1024 * 7
    finally:
        shutil.rmtree(top)


def test_groups_are_read_only_when_the_group_bits_differ():
    calls = []

    def groups(pid):
        calls.append(pid)
        return frozenset({7})

    c = Caller(50, 50, 99, read_groups=groups)
    assert allowed(stat.S_IFREG | 0o644, 1, 7, c, R)
    assert not allowed(stat.S_IFREG | 0o644, 1, 7, c, W)
    assert calls == []  # group bits == other bits: membership cannot matter
    assert allowed(stat.S_IFREG | 0o660, 1, 7, c, R | W)
    assert allowed(stat.S_IFREG | 0o660, 1, 7, c, W)
    assert calls == [99]  # read once, then remembered


def test_open_wants():
    assert open_wants(os.O_RDONLY) == R
    assert open_wants(os.O_WRONLY | os.O_APPEND) == W
    assert open_wants(os.O_RDWR) == R | W
    assert open_wants(os.O_RDONLY | os.O_TRUNC) == R | W


# ---- the core's permit* (Harness: files owned by 1234:5678) ---------------------------------

OWNER_C, OTHER_C, ROOT_C = Caller(1234, 5678), Caller(42, 42), Caller(0, 0)
WN, TH = "/work-notes", "/team-handbook"


def _seed_ro(h: Harness) -> None:
    h.fs.apply_remote(RO.store_id, "/doc.md", "mem_1", hashlib.sha256(b"d").hexdigest(), b"d", 1)


def test_read_only_answers_erofs_before_any_mode_check(h):
    _seed_ro(h)
    doc, store = h.ino(f"{TH}/doc.md"), h.ino(TH)
    for caller in (OWNER_C, OTHER_C, ROOT_C):
        assert errno_of(h.fs.permit, doc, caller, W) == errno.EROFS
        assert errno_of(h.fs.permit, store, caller, W | X) == errno.EROFS
        assert errno_of(h.fs.permit, h.ino("/"), caller, W | X) == errno.EROFS
        assert errno_of(h.fs.permit_remove, store, b"doc.md", caller) == errno.EROFS
        for kw in ({"size": True}, {"mode": True}, {"times": True}, {"owner": True}):
            args = {"size": False, "mode": False, "owner": False, "times": False, "fh": None, **kw}
            assert errno_of(h.fs.permit_setattr, doc, caller, **args) == errno.EROFS
        h.fs.permit(doc, caller, R)  # reading is fine
        h.fs.permit(store, caller, R | X)


def test_modes_ancestors_and_root(h):
    h.mkdir(f"{WN}/private")
    f = h.write_file(f"{WN}/private/s.md", b"s")
    h.fs.permit(f, OTHER_C, R)
    assert errno_of(h.fs.permit, f, OTHER_C, W) == errno.EACCES  # 0644
    h.fs.setattr(h.ino(f"{WN}/private"), mode=0o700)
    for want in (0, R):  # not even "exists": the path walk needs search permission
        assert errno_of(h.fs.permit, f, OTHER_C, want) == errno.EACCES
    h.fs.permit(f, OWNER_C, R | W)
    h.fs.permit(f, ROOT_C, R | W)
    assert errno_of(h.fs.permit, h.ino(f"{WN}/private"), OTHER_C, X) == errno.EACCES
    h.fs.setattr(f, mode=0o000)
    assert errno_of(h.fs.permit, f, OWNER_C, R) == errno.EACCES
    h.fs.permit(f, ROOT_C, R | W)
    assert errno_of(h.fs.permit, f, ROOT_C, X) == errno.EACCES  # root executes only with an x bit


def test_sticky_directory_and_moving_a_directory(h):
    h.mkdir(f"{WN}/tmp")
    h.write_file(f"{WN}/tmp/a.md", b"a")
    tmp = h.ino(f"{WN}/tmp")
    h.fs.setattr(tmp, mode=0o1777)
    assert errno_of(h.fs.permit_remove, tmp, b"a.md", OTHER_C) == errno.EPERM
    assert errno_of(h.fs.permit_rename, tmp, b"a.md", tmp, b"b.md", OTHER_C) == errno.EPERM
    h.fs.permit_remove(tmp, b"a.md", OWNER_C)
    h.fs.setattr(tmp, mode=0o777)
    h.fs.permit_remove(tmp, b"a.md", OTHER_C)
    # Moving a directory to another parent rewrites its "..": it needs write permission itself.
    h.mkdir(f"{WN}/d")
    h.fs.setattr(h.ino(f"{WN}/d"), mode=0o555)
    store = h.ino(WN)
    assert errno_of(h.fs.permit_rename, store, b"d", tmp, b"d", OWNER_C) == errno.EACCES
    h.fs.permit_rename(store, b"d", store, b"e", OWNER_C)  # same parent: fine


def test_setattr_rules(h):
    f = h.write_file(f"{WN}/a.md", b"a")

    def check(caller, fh=None, **kw):
        args = {"size": False, "mode": False, "owner": False, "times": False, "fh": fh, **kw}
        return errno_of(h.fs.permit_setattr, f, caller, **args)

    assert check(OTHER_C, mode=True) == errno.EPERM  # chmod: owner or root
    assert check(OTHER_C, owner=True) == errno.EPERM
    assert check(OWNER_C, mode=True) is None and check(ROOT_C, mode=True) is None
    assert check(OTHER_C, size=True) == errno.EACCES  # truncate(2) needs write permission
    assert check(OTHER_C, size=True, fh=7) is None  # ftruncate was checked at open
    assert check(OTHER_C, times=True) == errno.EACCES
    h.fs.setattr(f, mode=0o666)
    assert check(OTHER_C, times=True) is None and check(OTHER_C, size=True) is None


def test_names_in_a_directory_not_everyone_may_search_are_never_cached(h):
    """Without default_permissions the kernel does not check a cached name: such names carry
    `guarded` (entry timeout 0), and a chmod of their directory drops the cached ones."""
    h.mkdir(f"{WN}/d")
    f = h.write_file(f"{WN}/d/a.md", b"a")
    assert not h.fs.getattr(f).guarded
    assert not h.fs.getattr(h.ino(f"{WN}/d")).guarded
    h.fs.invalidations.clear()
    h.fs.setattr(h.ino(f"{WN}/d"), mode=0o750)
    assert ("entry", h.ino(f"{WN}/d"), b"a.md") in h.fs.invalidations
    assert h.fs.getattr(f).guarded
    assert [e.attr.guarded for e in h.fs.readdir(h.fs.opendir(h.ino(f"{WN}/d")), 0) if not e.is_dot] == [True]
    h.fs.invalidations.clear()
    h.fs.setattr(h.ino(f"{WN}/d"), mode=0o710)  # x bits unchanged: nothing to drop
    assert not h.fs.invalidations
