"""The registry dir (`/run/memfs`, `/tmp/memfs-<uid>`, MEMFS_RUNTIME_DIR) is checked for owner and
mode, and `memfs unmount` removes its entries. Before, another local user who
made /tmp/memfs-<uid> first chose the state dir that `memfs sync|status|unmount --root R` talked
to, and entries piled up for ever."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.timeout(120)


def squat(box, how: str) -> str:
    run = box.dir / f"run-{how}"
    if how == "other-owner":
        run.mkdir(mode=0o700)
        os.chown(run, 65534, 65534)  # nobody: another user made it first
    elif how == "world-writable":
        run.mkdir()
        os.chmod(run, 0o777)
    else:  # a symlink to a directory of the other user's choosing
        target = box.dir / "elsewhere"
        target.mkdir(mode=0o700)
        run.symlink_to(target)
    box.env["MEMFS_RUNTIME_DIR"] = str(run)
    return str(run)


@pytest.mark.parametrize("how", ["other-owner", "world-writable", "symlink"])
def test_a_squatted_registry_dir_is_refused_with_a_message(world, how):
    box = world.sandbox("a")
    run = squat(box, how)
    why = {
        "other-owner": "belongs to uid 65534",
        "world-writable": "writable by other users",
        "symlink": "not a directory",
    }
    for args in (["sync"], ["status"], ["unmount"]):
        proc = box.memfs(*args, "--root", str(box.root))
        assert proc.returncode != 0, (args, proc.stdout, proc.stderr)
        assert f"the memfs registry dir {run} " in proc.stderr and why[how] in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    proc = box.mount(check=False)
    assert proc.returncode != 0 and why[how] in proc.stderr, proc.stderr
    assert not (box.state_dir / "state.db").exists()


def test_memfs_unmount_removes_the_registry_entries(world):
    box = world.sandbox("a")
    box.mount()
    run = box.dir / "run"
    assert list(run.glob("*.json")), "the mount registers its root"
    assert oct(os.stat(run).st_mode & 0o777) == "0o700"
    box.unmount()
    assert list(run.glob("*.json")) == []


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_registry_entries_are_0600_whatever_the_umask(tmp_path, monkeypatch, umask):
    """An entry names a mount's state dir (every store's content): before, it took the umask's
    mode (0666 under umask 000, 0644 under 022)."""
    from memfs.session import control

    monkeypatch.setenv("MEMFS_RUNTIME_DIR", str(tmp_path / "run"))
    root, given = tmp_path / "root", tmp_path / "link-to-root"
    root.mkdir()
    given.symlink_to(root)
    old = os.umask(umask)
    try:
        control.register(str(root), tmp_path / "state", os.getpid(), given=str(given))
        control.register(str(root), tmp_path / "state", os.getpid())  # again: replaced, still 0600
    finally:
        os.umask(old)
    entries = sorted((tmp_path / "run").iterdir())
    assert len(entries) == 2 and all(e.suffix == ".json" for e in entries), entries
    assert {oct(e.stat().st_mode & 0o777) for e in entries} == {"0o600"}
    assert control.registry_entry(root)["state_dir"] == str(tmp_path / "state")
