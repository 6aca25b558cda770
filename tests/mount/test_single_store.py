"""One store mounted at a path of its own (memfs/mount/single_store.py, SEMANTICS.md#d-store-mount):
the store's folder is the mount root and holds only its memories; the notices go to the state dir."""

from __future__ import annotations

import errno

import pytest

from memfs.limits import MARKER_NAME, NOTICES_NAME
from memfs.mount.replies import ROOT_INO
from memfs.mount.single_store import mount_store_at_root, notices_path
from tests.mount.conftest import RW, Harness, errno_of

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def one(tmp_path):
    h = Harness(tmp_path / "state", stores=(RW,))
    h.write_file(f"/{RW.slug}/MEMORY.md", b"# Memory\n")  # written in the session layout, kept
    h.close()
    h = h.reopen()
    mount_store_at_root(h.fs, h.state_dir)
    yield h
    h.close()


def test_the_root_is_the_store_and_holds_only_its_memories(one):
    assert one.listdir("/") == ["MEMORY.md"]
    assert one.read_file("/MEMORY.md") == b"# Memory\n"
    for name in (MARKER_NAME, NOTICES_NAME):
        assert errno_of(one.fs.lookup, ROOT_INO, name.encode()) == errno.ENOENT
    attr = one.fs.getattr(ROOT_INO)
    assert attr.ino == ROOT_INO and attr.mode & 0o777 == 0o755  # a read_write store's folder
    assert one.fs.lookup(ROOT_INO, b"..").ino == ROOT_INO


def test_writes_at_the_root_are_the_store_s_at_its_top(one):
    one.write_file("/topic.md", b"a topic\n")
    one.mkdir("/notes")
    one.write_file("/notes/x.md", b"x\n")
    one.rename("/topic.md", "/notes/topic.md")
    assert sorted(one.fs.local_view(RW.store_id)) == ["/MEMORY.md", "/notes/topic.md", "/notes/x.md"]
    one.assert_staged()
    # the reserved names stay reserved in the folder, as in every store root
    assert errno_of(one.fs.create, ROOT_INO, NOTICES_NAME.encode(), 0o644, 0) == errno.EPERM


def test_the_notices_go_to_the_state_dir(one):
    path = notices_path(one.state_dir)
    assert path.read_bytes() == b""
    one.fs.add_notice(RW.store_id, "merged", "/MEMORY.md", "two writers")
    one.fs.add_notice(RW.store_id, "conflict-copy", "/prefs.md", "kept beside")
    lines = path.read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        "merged /MEMORY.md two writers",
        "conflict-copy /prefs.md kept beside",
    ]
    assert path.stat().st_mode & 0o777 == 0o600
    assert one.listdir("/") == ["MEMORY.md"]


def test_only_one_store_mounts_at_a_path(tmp_path):
    h = Harness(tmp_path / "state")  # two stores
    try:
        with pytest.raises(ValueError, match="one store"):
            mount_store_at_root(h.fs, h.state_dir)
    finally:
        h.close()
