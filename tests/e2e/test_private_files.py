"""What memfs writes that holds memory content or a credential is private whatever the umask
(docs/OPERATIONS.md#security). A real `memfs serve` and a real `memfs mount`,
both started under umask 022 (the common default, with which they used to leave the state dir
0755, state.db and memfs.log 0644 and the service's database 0644)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.support.sandbox import SandboxWorld
from tests.support.world import StoreSpec

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> str:
    return oct(stat.S_IMODE(os.stat(path).st_mode))


def test_file_modes_after_memfs_serve_and_memfs_mount_under_umask_022(umask_022, tmp_path):
    db = tmp_path / "service" / "data" / "store.db"
    spec = StoreSpec("Private", seed={"/secret.md": "memory content\n"})
    world = SandboxWorld.serving(tmp_path, [spec], db_path=db)
    try:
        served = {p: mode(p) for p in (db.parent, db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()}
        assert served == {db.parent: "0o700", **{p: "0o600" for p in served if p != db.parent}}, served
        assert Path(f"{db}-wal").exists()

        box = world.sandbox("a")
        box.mount()
        assert (box.root / "private" / "secret.md").read_text() == "memory content\n"
        sd = box.state_dir
        written = {p.name: mode(p) for p in (sd, sd / "kept", sd / "state.db", sd / "memfs.log", sd / "lock")}
        written |= {p.name: mode(p) for p in sd.glob("state.db-*")}
        assert written == {
            "state": "0o700",
            "kept": "0o700",
            **{name: "0o600" for name in written if name not in ("state", "kept")},
        }, written
        assert {"state.db-wal", "state.db-shm"} <= set(written), written
    finally:
        world.close()


def test_an_existing_state_dir_left_wide_is_tightened(umask_022, tmp_path):
    from memfs.private_files import private_dir, private_file

    d = tmp_path / "old-state"
    d.mkdir(mode=0o755)
    (d / "state.db").write_text("")
    os.chmod(d / "state.db", 0o644)
    private_dir(d)
    private_file(d / "state.db")
    assert (mode(d), mode(d / "state.db")) == ("0o700", "0o600")
