"""A clean store's pull is planned on what the store changed (memfs/sync/narrow.py), not on every
memory: the whole-store planner is not called, the view ends as the store, and the cached
baseline the engine moved by hand is the journal's."""

from __future__ import annotations

import pytest

from memfs.sync import store_pull as engine_module
from memfs.sync.remote import in_path_order, remote_from_base

pytestmark = [pytest.mark.trio, pytest.mark.timeout(60)]


@pytest.fixture
def whole_plans(monkeypatch) -> list[str]:
    """The store ids the engine planned whole (apply.plan_pull)."""
    calls: list[str] = []
    real = engine_module.plan_pull

    def counted(fs, state, store, *a, **kw):
        calls.append(store.store_id)
        return real(fs, state, store, *a, **kw)

    monkeypatch.setattr(engine_module, "plan_pull", counted)
    return calls


def _assert_mirrors(world, m, contents: dict[str, str]) -> None:
    sid = world.rw
    for path, text in contents.items():
        assert m.read_file("/notes" + path) == text.encode(), path
    shown = {f.path for f in m.fs.local_view(sid).values()}
    assert shown == set(contents)
    cached = m.engine.reader.baseline(sid)  # the engine's, moved by hand after a narrowed pull
    journal = m.state.baseline(sid)
    assert dict(cached.entries) == journal
    remote, order = remote_from_base(m.state, sid, journal)
    assert cached.remote == remote and cached.order == order == in_path_order(cached.remote)


async def test_remote_edits_moves_deletes_and_creates_plan_only_what_changed(world, whole_plans):
    files = {f"/d{i % 3}/f{i}.md": f"text {i}" for i in range(30)}
    m = await world.setup(files)
    svc, notes, ids = world.svc, world.rw, world.ids
    assert (await m.sync())["ok"]
    whole_plans.clear()
    steps = [
        lambda: svc.update(notes, ids["/d0/f0.md"], content="edited"),
        lambda: svc.update(notes, ids["/d1/f1.md"], path="/moved/f1.md"),
        lambda: svc.delete(notes, ids["/d2/f2.md"]),
        lambda: svc.create(notes, "/new/one.md", "created"),
        lambda: svc.update(notes, ids["/d0/f3.md"], path="/d2/f2.md", content="onto a freed path"),
    ]
    for step in steps:
        await step()
        result = await m.sync()
        assert result["ok"] and result["pulled"] >= 1, result
        _assert_mirrors(world, m, await svc.contents(notes))
    assert whole_plans == []


async def test_a_store_with_staged_changes_is_planned_whole(world, whole_plans):
    m = await world.setup({f"/f{i}.md": str(i) for i in range(10)})
    assert (await m.sync())["ok"]
    m.write_file("/notes/local.md", b"staged here")
    await world.svc.update(world.rw, world.ids["/f1.md"], content="theirs")
    whole_plans.clear()
    result = await m.sync()
    assert result["ok"] and whole_plans == [world.rw]
    contents = await world.svc.contents(world.rw)
    assert contents["/local.md"] == "staged here" and contents["/f1.md"] == "theirs"
    _assert_mirrors(world, m, contents)
    # Pushed and pulled: clean again, so the next remote edit is narrowed.
    whole_plans.clear()
    await world.svc.update(world.rw, world.ids["/f2.md"], content="again")
    assert (await m.sync())["ok"]
    _assert_mirrors(world, m, await world.svc.contents(world.rw))
    assert whole_plans == []
