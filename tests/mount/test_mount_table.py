"""Reading /proc/mounts (memfs/mount/mount_table.py): the kernel's octal escapes, on a synthetic
table and on a real FUSE mount whose root holds every byte the kernel escapes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memfs.mount.mount_table import MountEntry, fuse_mount_at, mounted_at, read_mount_table, unescape
from tests.support.mounts import DevMount

# space, tab, newline, backslash: the four the kernel writes as \040 \011 \012 \134
AWKWARD = "a b\tc\nd\\e"


def test_unescape_every_escaped_byte_and_nothing_else():
    assert unescape(rb"/tmp/a\040b\011c\012d\134e") == "/tmp/a b\tc\nd\\e"
    # a literal backslash followed by digits is written \134 then the digits: not a second escape
    assert unescape(rb"/tmp/x\134040y") == "/tmp/x\\040y"
    assert unescape("/tmp/caf\u00e9".encode()) == "/tmp/caf\u00e9"  # UTF-8 is not escaped
    assert unescape(b"/tmp/x\xff") == os.fsdecode(b"/tmp/x\xff")  # nor is a byte that is not UTF-8


def test_synthetic_table(tmp_path):
    table = tmp_path / "mounts"
    table.write_bytes(
        b"proc /proc proc rw 0 0\n"
        b"memfs /tmp/a\\040b\\011c\\012d\\134e fuse.memfs rw,nosuid 0 0\n"
        b"tmpfs /tmp/a\\040b tmpfs rw 0 0\n"
    )
    entries = read_mount_table(str(table))
    assert entries[1] == MountEntry("memfs", "/tmp/" + AWKWARD, "fuse.memfs")
    assert fuse_mount_at("/tmp/" + AWKWARD, resolve=False, table=str(table)) == "fuse.memfs"
    assert fuse_mount_at("/tmp/a b", resolve=False, table=str(table)) is None  # mounted, not FUSE
    assert mounted_at("/tmp/a b", table=str(table))
    assert not mounted_at("/tmp/a", table=str(table))
    assert read_mount_table(str(tmp_path / "missing")) == []


@pytest.mark.timeout(60)
def test_real_mount_at_a_root_with_escaped_bytes(devmounts, tmp_path):
    root = tmp_path / AWKWARD / "root"
    m = DevMount(root, tmp_path / "state", ["memstore_t1:notes:read_write"])
    devmounts.append(m)
    m.start()
    assert fuse_mount_at(str(root)) == "fuse.memfs"
    assert fuse_mount_at(str(root), resolve=False) == "fuse.memfs"
    assert fuse_mount_at(str(Path(tmp_path / AWKWARD))) is None  # the parent is not the mount
    assert m.stop() == 0
    assert fuse_mount_at(str(root)) is None
