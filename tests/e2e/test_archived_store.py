"""A store archived while mounted (SEMANTICS.md#d-archived): the hosted API and `memfs serve` refuse
creates and updates in an archived store (400) and still serve reads and deletes. The mount learns it
when a write is refused (one read of the store object then, none in the normal case) and turns the
store's folder read-only at that tick: EROFS for every tool, a notice naming why; what it had
staged stays staged (a copy each in kept/) and `memfs status` / `memfs unmount` (exit 3) name it.

A real mount against `memfs serve` and against the hosted-API emulator (`memfs serve --hosted-api`).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

import pytest

from tests.support.api import MEMORY_BETA, Api
from tests.support.mounts import sh
from tests.support.sandbox import Sandbox, SandboxWorld
from tests.support.waits import wait_for
from tests.support.world import StoreSpec

pytestmark = pytest.mark.timeout(150)


@pytest.fixture(params=["serve", "hosted"])
def rig(request, tmp_path) -> Iterator[tuple[Api, Sandbox, str]]:
    seed = {"/a.md": "alpha\n", "/b.md": "beta\n"}
    world = SandboxWorld.serving(
        tmp_path, [StoreSpec("Notes", seed=seed)], hosted_api=request.param == "hosted"
    )
    try:
        box = world.sandbox("box")
        box.mount()
        yield world.api, box, world.rw
    finally:
        world.close()


@pytest.mark.expected_log(r"ERROR memfs.mount: 2 change\(s\) are not on the store service.*archived at")
def test_a_store_archived_while_mounted_turns_read_only_and_loses_nothing(rig):
    api, box, sid = rig
    top = box.root / "notes"
    r = api.http.post(f"/v1/memory_stores/{sid}/archive", headers=MEMORY_BETA)
    assert r.status_code == 200 and r.json()["archived_at"], r.text
    # Written before the mount knows: taken locally, refused by the store at the next tick.
    (top / "a.md").write_text("alpha, edited after the archive\n")
    (top / "new.md").write_text("brand new\n")
    box.sync(check=False)

    # From that tick on the folder is read-only, for every tool; what is there stays readable.
    with pytest.raises(OSError) as e:
        (top / "c.md").write_text("no\n")
    assert e.value.errno == errno.EROFS
    for cmd in (
        "echo x >> a.md",
        "touch c.md",
        "rm b.md",
        "mkdir d",
        "mv b.md e.md",
        "sed -i s/beta/gamma/ b.md",
        "truncate -s 0 b.md",
        "chmod 600 b.md",
    ):
        out = sh(cmd, cwd=top)
        assert out.returncode != 0 and "Read-only file system" in out.stderr, (cmd, out.stderr)
    assert (top / "a.md").read_text() == "alpha, edited after the archive\n"
    assert (top / "new.md").read_text() == "brand new\n"
    assert (top / "b.md").read_text() == "beta\n"
    notices = [line for line in box.notices("notes") if " store-archived " in line]
    assert len(notices) == 1 and "archived at" in notices[0] and "read-only" in notices[0], notices
    assert not [line for line in box.notices("notes") if " upload-refused " in line]

    # Nothing lost: the store holds what it held, the changes stay staged and are named.
    assert api.contents(sid) == {"/a.md": "alpha\n", "/b.md": "beta\n"}
    (store,) = box.status()["stores"]
    assert store["staged"] == 2 and store["refused"] == 0 and store["archived_at"], store
    assert sorted(store["paths"]["staged"]) == ["/a.md", "/new.md"]
    assert all("archived" in store["reasons"][p] for p in ("/a.md", "/new.md")), store["reasons"]
    human = box.memfs("status", "--root", str(box.root), check=True).stdout
    assert "read-only" in human and "staged: /new.md: the store was archived at" in human, human
    kept = {p.name: p.read_text() for p in (box.state_dir / "kept" / sid).rglob("*.md")}
    assert kept == {"a.md": "alpha, edited after the archive\n", "new.md": "brand new\n"}

    # Another tick sends nothing more (the store is not asked again).
    assert box.sync(check=False)["pushed"] == 0
    assert len([line for line in box.notices("notes") if " store-archived " in line]) == 1

    out = box.unmount(check=False)
    assert out.returncode == 3, (out.stdout, out.stderr)
    assert "/a.md" in out.stderr and "/new.md" in out.stderr and "archived" in out.stderr, out.stderr
    assert "kept/" in out.stderr


# memfs serve only: on the hosted API (no watch) a mount pushes at `memfs sync`, the hook's, or at
# its idle poll (SEMANTICS.md#d-no-counter), which the first test covers.
@pytest.mark.parametrize("rig", ["serve"], indirect=True)
@pytest.mark.expected_log(r"ERROR memfs.mount: 1 change\(s\) are not on the store service.*archived at")
def test_the_daemons_own_tick_learns_it_without_a_sync(rig):
    """Nobody runs `memfs sync`: the daemon's own live push wave (memfs serve: the watch) meets the
    refusal and turns the folder read-only."""
    api, box, sid = rig
    top = box.root / "notes"
    r = api.http.post(f"/v1/memory_stores/{sid}/archive", headers=MEMORY_BETA)
    assert r.status_code == 200, r.text
    (top / "b.md").write_text("beta, edited\n")
    assert wait_for(lambda: any(" store-archived " in line for line in box.notices("notes")), timeout=30)
    with pytest.raises(OSError) as e:
        (top / "b.md").write_text("again\n")
    assert e.value.errno == errno.EROFS
    assert (top / "b.md").read_text() == "beta, edited\n"
    assert api.contents(sid) == {"/a.md": "alpha\n", "/b.md": "beta\n"}
    assert box.unmount(check=False).returncode == 3
