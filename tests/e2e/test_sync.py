"""The sync engine end to end: two sandboxes, one service, real shell tools (issue: sync engine)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tests.support.api import sha
from tests.support.sandbox import is_mounted
from tests.support.service import ServiceProcess

pytestmark = pytest.mark.timeout(150)

RW = "work-notes"
NOTICE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z (?P<kind>[a-z-]+) (?P<path>\S+) (?P<details>.*)$"
)


@pytest.fixture(params=["counter", "hosted-api"])
def service(request, tmp_path):
    """Every sync test runs twice: against memfs serve with its counter, and against a service that
    has only the hosted API (no counter, feed or snapshot: the mount lists every store, docs/SEMANTICS.md#d-no-counter)."""
    svc = ServiceProcess(tmp_path / "service", hosted_api=request.param == "hosted-api")
    try:
        yield svc
    finally:
        svc.stop()


def notices(box, kind: str) -> list[re.Match]:
    out = []
    for line in box.notices(RW):
        m = NOTICE.match(line)
        assert m, f"notice line does not follow the notice format (docs/SEMANTICS.md#d-notices): {line!r}"
        if m["kind"] == kind:
            out.append(m)
    return out


def kept_copy(match: re.Match) -> Path:
    m = re.search(r"kept at (\S+?)\)?$", match["details"])
    assert m, match["details"]
    return Path(m.group(1))


def test_propagation_both_ways(world, api):
    a, b = world.sandbox("a"), world.sandbox("b")
    a.mount()
    b.mount()
    (a.root / RW / "from-a.md").write_text("written in A\n")
    a.sync()
    b.sync()
    assert (b.root / RW / "from-a.md").read_text() == "written in A\n"
    # A change made through the API shows up after `memfs sync`, with new size and mtime.
    todo = b.root / RW / "notes" / "todo.md"
    before = todo.stat()
    memory = api.memories(world.rw)["/notes/todo.md"]
    time.sleep(1.1)  # mtime has second granularity in some tools
    api.update(world.rw, memory["id"], content="changed through the API, longer than before\n")
    b.sync()
    after = todo.stat()
    assert todo.read_text() == "changed through the API, longer than before\n"
    assert after.st_size != before.st_size and after.st_mtime != before.st_mtime


def store_wins(world):
    """A mount with `--on-conflict store-wins`: the seeds' rule to the letter (SEMANTICS.md#d-merge)."""
    box = world.sandbox("store-wins")
    box.mount("--on-conflict", "store-wins")
    return box


def test_conflict_store_wins_and_keeps_the_agents_version(world, api):
    mounted = store_wins(world)
    memory = api.memories(world.rw)["/profile.md"]
    (mounted.root / RW / "profile.md").write_text("local edit\n")
    api.update(world.rw, memory["id"], content="remote edit\n")
    mounted.sync()
    assert (mounted.root / RW / "profile.md").read_text() == "remote edit\n"
    assert api.contents(world.rw)["/profile.md"] == "remote edit\n"
    assert len(api.versions(world.rw, memory["id"])) == 2  # created + the remote edit; ours never landed
    [n] = notices(mounted, "store-won-conflict")
    assert n["path"] == "/profile.md"
    assert kept_copy(n).read_text() == "local edit\n"


def test_conflict_in_the_same_lines_keeps_the_stores_version_and_puts_the_agents_beside_it(
    world, mounted, api
):
    """Merge mode (the default): nothing exists only in this sandbox (SEMANTICS.md#d-merge)."""
    memory = api.memories(world.rw)["/profile.md"]
    (mounted.root / RW / "profile.md").write_text("local edit\n")
    api.update(world.rw, memory["id"], content="remote edit\n")
    mounted.sync()
    assert (mounted.root / RW / "profile.md").read_text() == "remote edit\n"
    store = api.contents(world.rw)
    assert store["/profile.md"] == "remote edit\n"
    [copy] = [p for p in store if p.startswith("/profile.conflict-")]
    assert store[copy] == "local edit\n"
    assert (mounted.root / RW / copy.lstrip("/")).read_text() == "local edit\n"
    [n] = notices(mounted, "conflict-copy")
    assert n["path"] == "/profile.md" and copy in n["details"]


def test_edits_of_different_lines_merge(world, mounted, api):
    memory = api.memories(world.rw)["/notes/todo.md"]
    (mounted.root / RW / "notes" / "todo.md").write_text("# TODO\n- buy milk\n- write tests\n- mine\n")
    api.update(world.rw, memory["id"], content="# TODO\n- buy oat milk\n- write tests\n")
    mounted.sync()
    merged = "# TODO\n- buy oat milk\n- write tests\n- mine\n"
    assert api.contents(world.rw)["/notes/todo.md"] == merged
    assert (mounted.root / RW / "notes" / "todo.md").read_text() == merged
    [n] = notices(mounted, "merged")
    assert n["path"] == "/notes/todo.md"


def test_decision2_store_deleted_what_the_agent_modified(world, mounted, api):
    memory = api.memories(world.rw)["/profile.md"]
    (mounted.root / RW / "profile.md").write_text("local edit of a doomed file\n")
    api.delete(world.rw, memory["id"])
    mounted.sync()
    assert not (mounted.root / RW / "profile.md").exists()
    assert "/profile.md" not in api.contents(world.rw)  # never re-created
    [n] = notices(mounted, "deleted-by-store")
    assert n["path"] == "/profile.md"
    assert kept_copy(n).read_text() == "local edit of a doomed file\n"


def test_decision3_store_created_where_the_agent_created(world, api):
    mounted = store_wins(world)
    (mounted.root / RW / "clash.md").write_text("agent's new file\n")
    api.create(world.rw, "/clash.md", "store's new memory\n")
    mounted.sync()
    assert (mounted.root / RW / "clash.md").read_text() == "store's new memory\n"
    assert api.contents(world.rw)["/clash.md"] == "store's new memory\n"
    [n] = notices(mounted, "overwritten-by-store")
    assert kept_copy(n).read_text() == "agent's new file\n"


def test_both_created_one_path_merge_the_stores_text_first(world, mounted, api):
    (mounted.root / RW / "clash.md").write_text("agent's new file\n")
    api.create(world.rw, "/clash.md", "store's new memory\n")
    mounted.sync()
    both = "store's new memory\nagent's new file\n"
    assert (mounted.root / RW / "clash.md").read_text() == both
    assert api.contents(world.rw)["/clash.md"] == both


def test_decision4_over_the_limits_materialises_in_list_order(world, api):
    box = world.sandbox("small")
    box.mount("--max-files", "3")
    # The seed has 5 memories; in path order the first 3 fit.
    paths = sorted(api.contents(world.rw))
    shown = sorted(
        "/" + str(p.relative_to(box.root / RW))
        for p in (box.root / RW).rglob("*")
        if p.is_file() and not p.name.startswith(".sync") and not p.name.startswith(".anthropic")
    )
    assert shown == paths[:3]
    over = [m["path"] for m in notices(box, "over-limit")]
    assert over == paths[3:]
    box.sync()
    assert [m["path"] for m in notices(box, "over-limit")] == paths[3:]  # noticed once


def test_decision4_a_mass_event_is_summarised_in_the_notices(world, api):
    """30 more memories than fit: 19 over-limit lines and one that counts the rest, not 32 lines
    (a 10,000-memory store on a 2,000-file mount would otherwise write 8,000)."""
    for i in range(27):
        api.create(world.rw, f"/bulk/m{i:02d}.md", f"bulk {i}\n")
    box = world.sandbox("small")
    box.mount("--max-files", "3")
    over = notices(box, "over-limit")
    total = len(api.contents(world.rw)) - 3
    assert total == 29 and len(over) == 20
    assert f"and {total - 20} more over-limit path(s) in this sync" in over[-1]["details"]
    assert len({m["path"] for m in over}) == 20
    box.sync()
    assert len(notices(box, "over-limit")) == 20  # noticed once


def test_decision5_notices_file_format_and_protection(world, mounted, api):
    memory = api.memories(world.rw)["/profile.md"]
    (mounted.root / RW / "profile.md").write_text("local\n")
    api.update(world.rw, memory["id"], content="remote\n")
    mounted.sync()
    log = mounted.root / RW / ".sync-notices.log"
    lines = log.read_text().splitlines()
    assert lines and all(NOTICE.match(line) for line in lines)
    with pytest.raises(OSError):
        log.write_text("tamper")
    with pytest.raises(OSError):
        log.unlink()
    assert not (mounted.root / ".sync-notices.log").exists()  # nothing at the root


def test_decision6_service_down_counts_as_an_attempt_and_loses_nothing(world, mounted, api, service):
    service.stop()
    (mounted.root / RW / "offline.md").write_text("written while the service was down\n")
    result = mounted.sync(check=False)
    assert result["ok"] is False
    status = {s["slug"]: s for s in mounted.status()["stores"]}
    assert status[RW]["last_error"] and status[RW]["staged"] >= 1
    # Not forced: the failed tick counts as an attempt, so no new tick for a full interval.
    again = mounted.sync(force=False, wait=False)
    assert again["ran"] is False
    assert (mounted.root / RW / "offline.md").read_text() == "written while the service was down\n"
    service.start()
    mounted.sync()
    assert api.contents(world.rw)["/offline.md"] == "written while the service was down\n"


@pytest.mark.expected_log(r"ERROR memfs.mount: 1 change\(s\) are not on the store service")
def test_decision7_unmount_with_the_service_down_then_flush(world, mounted, api, service):
    service.stop()  # first: otherwise the quiet-mount timer may push the file before the service is gone
    (mounted.root / RW / "late.md").write_text("staged at the end\n")
    proc = mounted.memfs("unmount", "--root", str(mounted.root), "--flush-timeout", "5", timeout=60)
    assert proc.returncode != 0
    assert "1 staged change" in proc.stderr and str(mounted.state_dir) in proc.stderr
    assert not is_mounted(mounted.root)
    service.start()
    flush = mounted.memfs("flush", "--state-dir", str(mounted.state_dir), timeout=60)
    assert flush.returncode == 0, flush.stderr
    assert api.contents(world.rw)["/late.md"] == "staged at the end\n"


def test_renames_keep_memory_ids_and_history(world, mounted, api):
    top = mounted.root / RW
    (top / "dir1").mkdir()
    for i in range(50):
        (top / "dir1" / f"f{i:02d}.md").write_text(f"file {i}\n")
    mounted.sync()
    ids = {p: m["id"] for p, m in api.memories(world.rw).items() if p.startswith("/dir1/")}
    assert len(ids) == 50
    os.rename(top / "dir1", top / "dir2")
    mounted.sync()
    now = api.memories(world.rw)
    assert not any(p.startswith("/dir1/") for p in now)
    assert {p.replace("/dir2/", "/dir1/"): m["id"] for p, m in now.items() if p.startswith("/dir2/")} == ids
    assert [v["operation"] for v in api.versions(world.rw, ids["/dir1/f00.md"])] == ["modified", "created"]
    # A vim-style save (write a swap file, rename it over the original) keeps the id.
    original = now["/notes/todo.md"]["id"]
    (top / "notes" / ".todo.md.swp").write_text("saved by an editor\n")
    os.rename(top / "notes" / ".todo.md.swp", top / "notes" / "todo.md")
    mounted.sync()
    after = api.memories(world.rw)
    assert after["/notes/todo.md"]["id"] == original
    assert after["/notes/todo.md"]["content"] == "saved by an editor\n"
    assert "/notes/.todo.md.swp" not in after


def test_log_only_deletions_leave_the_memory_and_log_it(world, api):
    box = world.sandbox("logonly")
    box.mount("--sync-deletions", "log_only")
    (box.root / RW / "profile.md").unlink()
    box.sync()
    assert "/profile.md" in api.contents(world.rw)
    assert not (box.root / RW / "profile.md").exists()
    assert [m["path"] for m in notices(box, "delete-held")] == ["/profile.md"]
    box.sync()
    assert len(notices(box, "delete-held")) == 1


def test_idle_tick_is_one_request_and_one_edit_fetches_one_memory(world, api, service):
    # The polling tick's cost (live mode would pull the edit before the sync: tests/e2e/test_live.py).
    mounted = world.sandbox("polling")
    mounted.mount("--live", "off")
    mounted.sync()
    idle = mounted.sync()
    memory = api.memories(world.rw)["/profile.md"]
    api.update(world.rw, memory["id"], content="one remote edit\n")
    one = mounted.sync()
    if service.hosted_api:
        # No counter: one version-feed page per store each tick; the edit's content rides in its
        # feed page (view=full), so it costs no fetch (SEMANTICS.md#d-no-counter).
        assert idle["requests"] == 2, idle
        assert one["requests"] == 2, one
    else:
        assert idle["requests"] == 1, idle  # one counters request for both stores
        assert one["requests"] == 2, one  # counters + the changes feed, the edit's content in it
    assert (mounted.root / RW / "profile.md").read_text() == "one remote edit\n"


def test_kill9_during_ticks_loses_nothing_and_pushes_nothing_twice(world, mounted, api):
    top = mounted.root / RW
    for i in range(30):
        (top / f"burst{i}.md").write_text(f"burst {i}\n")
    mounted.memfs("sync", "--root", str(mounted.root), "--force")  # returns after the pull; pushes run
    mounted.kill9()
    mounted.mount()
    mounted.sync()
    contents = api.contents(world.rw)
    for i in range(30):
        assert contents[f"/burst{i}.md"] == f"burst {i}\n"
    paths = [p for p in contents if p.startswith("/burst")]
    assert len(paths) == 30  # no duplicates
    assert sha("burst 0\n") == api.memories(world.rw)["/burst0.md"]["content_sha256"]


def test_an_empty_local_directory_gives_way_to_a_store_file(world, mounted, api):
    (mounted.root / RW / "later.md").mkdir()  # directories are local only: the store never sees it
    api.create(world.rw, "/later.md", "the store put a file here\n")
    mounted.sync()
    assert (mounted.root / RW / "later.md").read_text() == "the store put a file here\n"


def test_idle_tick_with_eight_stores_is_one_request(world, api, service):
    stores = [api.create_store(f"Store {i}") for i in range(8)]
    for i, store in enumerate(stores):
        for j in range(25):
            api.create(store, f"/d{j % 3}/m{j}.md", f"store {i} memory {j}\n")
    session = api.create_session([(s, "read_write") for s in stores])
    box = world.sandbox("eight", session=session)
    box.mount("--live", "off")  # the polling tick's cost; live mode's is in tests/e2e/test_live.py
    assert sorted(os.listdir(box.root)) == sorted(f"store-{i}" for i in range(8))
    box.sync()
    idle = box.sync()
    expected_idle = 8 if service.hosted_api else 1  # hosted API: one feed page per store
    assert idle["requests"] == expected_idle, idle
    memory = api.memories(stores[5])["/d1/m4.md"]
    api.update(stores[5], memory["id"], content="edited remotely\n")
    one = box.sync()
    # Hosted API: the edit's content comes in its store's feed page (view=full), no fetch; counters:
    # counters + the changes feed, the edit's content in it (view=full).
    assert one["requests"] == (expected_idle if service.hosted_api else 2), one
    assert (box.root / "store-5" / "d1" / "m4.md").read_text() == "edited remotely\n"
