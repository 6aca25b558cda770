"""Merging concurrent writers in the engine (SEMANTICS.md#d-merge), in process: the real service
app, the kernel-free filesystem core and the real SyncEngine (tests/support/inprocess.py). Each
case is one the seeds' store-wins rule settled by keeping the agent's version in the state dir
only (tests/engine/test_engine_rules.py has those, with --on-conflict store-wins)."""

from __future__ import annotations

import pytest

from memfs.sync.plan import MERGE_TRIES
from tests.support.inprocess import MEMORY_BY_ID, single_requests
from tests.support.stores import unreachable

pytestmark = [pytest.mark.trio, pytest.mark.timeout(30)]

NOTES = "# notes\n- one\n- two\n"


def _notice(m, kind: str, path: str) -> str:
    [n] = [n for n in m.notices("notes") if f" {kind} {path} " in n]
    return n


async def test_two_appends_to_one_file_both_land_the_stores_line_first(world):
    m = await world.setup({"/log.md": NOTES})
    await world.svc.update(world.rw, world.ids["/log.md"], content=NOTES + "- theirs\n")
    m.write_file("/notes/log.md", (NOTES + "- mine\n").encode())
    result = await m.sync()
    assert result["ok"]
    both = NOTES + "- theirs\n- mine\n"
    assert m.read_file("/notes/log.md") == both.encode()
    assert (await world.svc.contents(world.rw)) == {"/log.md": both}
    assert "merged with the store's version" in _notice(m, "merged", "/log.md")
    assert m.engine.not_on_store()[world.rw].count == 0
    assert not [p for p in m.state_dir.rglob("*") if "kept" in p.parts and p.is_file()]  # nothing kept aside


async def test_a_push_answered_409_is_merged_at_the_next_pull_and_pushed_again(world):
    """The store moves between our pull and our push (another writer's append): the 409 waits for
    the pull, which merges the two appends; the merge goes out with the store's sha as precondition."""
    m = await world.setup({"/log.md": NOTES})
    single_requests(m)
    mid = world.ids["/log.md"]
    m.write_file("/notes/log.md", (NOTES + "- mine\n").encode())

    async def other_writer(_request) -> None:
        await world.svc.update(world.rw, mid, content=NOTES + "- theirs\n")

    m.transport.add("POST", MEMORY_BY_ID, before=other_writer)
    result = await m.sync()
    assert result["ok"] and result["pushed"] == 0  # the 409: an answer, not a failure
    await m.sync()
    both = NOTES + "- theirs\n- mine\n"
    assert (await world.svc.contents(world.rw)) == {"/log.md": both}
    assert m.read_file("/notes/log.md") == both.encode()
    assert m.engine.not_on_store()[world.rw].count == 0


async def test_sections_rewritten_by_two_writers_both_survive(world):
    text = "## alice\nold a\n\n## bob\nold b\n\n## carol\nold c\n"
    m = await world.setup({"/plan.md": text})
    await world.svc.update(world.rw, world.ids["/plan.md"], content=text.replace("old a", "new a"))
    m.write_file("/notes/plan.md", text.replace("old c", "new c").encode())
    await m.sync()
    merged = text.replace("old a", "new a").replace("old c", "new c")
    assert (await world.svc.contents(world.rw))["/plan.md"] == merged
    assert m.read_file("/notes/plan.md") == merged.encode()


async def test_a_true_conflict_puts_the_agents_version_on_the_store_as_a_named_copy(world):
    m = await world.setup({"/status.md": "state: working\n"})
    await world.svc.update(world.rw, world.ids["/status.md"], content="state: blocked\n")
    m.write_file("/notes/status.md", b"state: done\n")
    await m.sync()
    assert m.read_file("/notes/status.md") == b"state: blocked\n"  # the store's version stays in the file
    store = await world.svc.contents(world.rw)
    [copy] = [p for p in store if p != "/status.md"]
    assert copy.startswith("/status.conflict-") and copy.endswith(".md")
    assert store[copy] == "state: done\n"  # the agent's version, on the store for every sandbox
    assert m.read_file(f"/notes{copy}") == b"state: done\n"
    assert copy in _notice(m, "conflict-copy", "/status.md")
    assert m.engine.not_on_store()[world.rw].count == 0  # nothing exists only in this sandbox


async def test_the_service_counts_the_mounts_merges_and_copies_per_store(world):
    """The mount marks a merged update and a conflict copy's create (the `memfs-write-reason`
    header, sent on single requests: a batch's one header could not say which item) and the
    service's /metrics counts them for the store (tests/service/test_write_reason_metrics.py)."""
    m = await world.setup({"/log.md": NOTES, "/status.md": "state: working\n"})
    await world.svc.update(world.rw, world.ids["/log.md"], content=NOTES + "- theirs\n")
    await world.svc.update(world.rw, world.ids["/status.md"], content="state: blocked\n")
    m.write_file("/notes/log.md", (NOTES + "- mine\n").encode())
    m.write_file("/notes/status.md", b"state: done\n")
    m.write_file("/notes/other.md", b"plain\n")  # no reason: it goes in the batch
    m.transport.clear()
    await m.sync()
    assert m.transport.count("POST", MEMORY_BY_ID) == 1  # the merge, on its own
    assert m.transport.count("POST", r"/memories$") == 1  # the copy's create
    assert m.transport.count("POST", r"/memory_batch$") == 1
    text = (await world.svc.admin.get("/metrics")).text
    assert f'memfs_merges_total{{store="{world.rw}"}} 1.0' in text
    assert f'memfs_conflict_copies_total{{store="{world.rw}"}} 1.0' in text
    status = m.store_status("notes")
    assert (status["merges"], status["conflicts"], status["conflict_copies"]) == (1, 1, 1)


async def test_json_does_not_merge_it_conflicts(world):
    """A union of two JSON documents is not JSON: the default policy merges text memories only."""
    m = await world.setup({"/cfg.json": '{\n"a": 1\n}\n'})
    await world.svc.update(world.rw, world.ids["/cfg.json"], content='{\n"a": 1,\n"b": 2\n}\n')
    m.write_file("/notes/cfg.json", b'{\n"a": 1,\n"c": 3\n}\n')
    await m.sync()
    store = await world.svc.contents(world.rw)
    assert store["/cfg.json"] == '{\n"a": 1,\n"b": 2\n}\n'
    [copy] = [p for p in store if p != "/cfg.json"]
    assert copy.endswith(".json") and store[copy] == '{\n"a": 1,\n"c": 3\n}\n'


async def test_both_created_one_path_merge(world):
    m = await world.setup({})
    m.write_file("/notes/team.md", b"- mine\n")
    await world.svc.create(world.rw, "/team.md", "- theirs\n")
    await m.sync()
    assert (await world.svc.contents(world.rw)) == {"/team.md": "- theirs\n- mine\n"}
    assert m.read_file("/notes/team.md") == b"- theirs\n- mine\n"
    assert m.engine.not_on_store()[world.rw].count == 0


async def test_store_wins_mode_keeps_the_seeds_rule(world):
    m = await world.setup({"/log.md": NOTES}, on_conflict="store-wins")
    await world.svc.update(world.rw, world.ids["/log.md"], content=NOTES + "- theirs\n")
    m.write_file("/notes/log.md", (NOTES + "- mine\n").encode())
    await m.sync()
    assert (await world.svc.contents(world.rw)) == {"/log.md": NOTES + "- theirs\n"}
    assert "kept at" in _notice(m, "store-won-conflict", "/log.md")


async def test_a_merge_whose_push_meets_another_409_merges_again_on_the_base_it_left(world):
    """A merge's base is the store's version, which the view never materialised (it shows the
    merge). When the merge's push meets a 409 too (a third writer came in between), the next pull
    merges again on that base: its content must still be at hand (it was not, and the file stayed
    staged for good: found by scripts/bench --only writers)."""
    m = await world.setup({"/log.md": NOTES})
    single_requests(m)
    mid = world.ids["/log.md"]
    await world.svc.update(world.rw, mid, content=NOTES + "- theirs 0\n")
    m.write_file("/notes/log.md", (NOTES + "- mine\n").encode())

    async def third_writer(_request) -> None:  # lands between our merge and its push
        await world.svc.update(world.rw, mid, content=NOTES + "- theirs 0\n- theirs 1\n")

    m.transport.add("POST", MEMORY_BY_ID, before=third_writer)
    result = await m.sync()
    assert result["pushed"] == 0 and result["superseded"] == 1
    await m.sync()
    want = NOTES + "- theirs 0\n- theirs 1\n- mine\n"
    assert (await world.svc.contents(world.rw)) == {"/log.md": want}
    assert m.read_file("/notes/log.md") == want.encode()
    assert m.store_status("notes")["merges"] == 2 and m.store_status("notes")["conflicts"] == 0


def _a_writer_before_every_update(world, m, mid: str, times: int | None = None) -> list[str]:
    """Another writer appends a line of its own just before each of our updates reaches the
    store: every merged push meets a 409. Returns its lines, as they land."""
    theirs: list[str] = []

    async def other_writer(_request) -> None:
        theirs.append(f"- theirs {len(theirs) + 1}\n")
        await world.svc.update(world.rw, mid, content=NOTES + "- theirs 0\n" + "".join(theirs))

    m.transport.add("POST", MEMORY_BY_ID, before=other_writer, times=times)
    return theirs


async def test_a_store_that_keeps_moving_after_merge_tries_merges_is_a_true_conflict(world):
    """SEMANTICS.md#d-merge: each merged push superseded merges again, MERGE_TRIES times; then the
    store's version stays and the agent's (the last merge: its lines included) goes onto the store
    as a conflict copy, which lands. No line of either writer is lost."""
    m = await world.setup({"/log.md": NOTES})
    single_requests(m)
    mid = world.ids["/log.md"]
    await world.svc.update(world.rw, mid, content=NOTES + "- theirs 0\n")
    m.write_file("/notes/log.md", (NOTES + "- mine\n").encode())
    theirs = _a_writer_before_every_update(world, m, mid)
    for tries in range(1, MERGE_TRIES + 1):
        result = await m.sync()
        assert result["superseded"] == 1 and m.engine.sync[world.rw].merge_tries == {mid: tries}
    result = await m.sync()
    assert result["ok"] and result["superseded"] == 0
    store = await world.svc.contents(world.rw)
    want = NOTES + "- theirs 0\n" + "".join(theirs)
    assert len(theirs) == MERGE_TRIES and store["/log.md"] == want
    assert m.read_file("/notes/log.md") == want.encode()  # the store's version stays in the file
    [copy] = [p for p in store if p != "/log.md"]
    assert store[copy] == NOTES + "- theirs 0\n" + "".join(theirs[:-1]) + "- mine\n"  # the last merge
    assert copy in _notice(m, "conflict-copy", "/log.md")
    status = m.store_status("notes")
    assert (status["merges"], status["conflicts"], status["conflict_copies"]) == (MERGE_TRIES, 1, 1)
    assert m.engine.sync[world.rw].merge_tries == {}
    assert m.engine.not_on_store()[world.rw].count == 0


async def test_a_merged_push_that_lands_ends_the_merges_in_a_row(world):
    m = await world.setup({"/log.md": NOTES})
    single_requests(m)
    mid = world.ids["/log.md"]
    await world.svc.update(world.rw, mid, content=NOTES + "- theirs 0\n")
    m.write_file("/notes/log.md", (NOTES + "- mine\n").encode())
    theirs = _a_writer_before_every_update(world, m, mid, times=MERGE_TRIES - 1)
    for _ in range(MERGE_TRIES):
        await m.sync()
    want = NOTES + "- theirs 0\n" + "".join(theirs) + "- mine\n"
    assert (await world.svc.contents(world.rw)) == {"/log.md": want}  # merged, no copy
    assert m.engine.sync[world.rw].merge_tries == {}  # a later conflict merges MERGE_TRIES times anew


# -- write-through: what the worker's write/edit is told (SEMANTICS.md#d-merge) ------------------


async def test_write_through_of_a_file_nobody_else_changed_is_one_write_request(world):
    m = await world.setup({"/log.md": NOTES})
    single_requests(m)  # as on the hosted API: the write is one request of its own
    m.write_file("/notes/log.md", (NOTES + "- mine\n").encode())
    m.transport.clear()
    answer = await m.engine.write_through(world.rw, "/log.md")
    assert answer["result"] == "pushed", answer
    assert m.transport.requests == [("POST", f"/v1/memory_stores/{world.rw}/memories/{world.ids['/log.md']}")]
    assert (await world.svc.contents(world.rw)) == {"/log.md": NOTES + "- mine\n"}


async def test_write_through_meets_a_newer_version_merges_and_says_so(world):
    m = await world.setup({"/log.md": NOTES})
    await world.svc.update(world.rw, world.ids["/log.md"], content="# notes\n- one\n- two, theirs\n")
    m.write_file("/notes/log.md", (NOTES + "- mine\n").encode())
    answer = await m.engine.write_through(world.rw, "/log.md")
    assert answer["result"] == "merged", answer
    want = "# notes\n- one\n- two, theirs\n- mine\n"
    assert (await world.svc.contents(world.rw)) == {"/log.md": want}
    assert m.read_file("/notes/log.md") == want.encode()


async def test_write_through_of_the_lines_another_writer_changed_is_a_conflict_named(world):
    m = await world.setup({"/log.md": NOTES})
    await world.svc.update(world.rw, world.ids["/log.md"], content="# notes\n- one\n- two, theirs\n")
    m.write_file("/notes/log.md", b"# notes\n- one\n- two, mine\n")
    answer = await m.engine.write_through(world.rw, "/log.md")
    assert answer["result"] == "conflict" and answer["copy"].startswith("/log.conflict-"), answer
    assert m.read_file("/notes/log.md") == b"# notes\n- one\n- two, theirs\n"  # the store's version
    assert (await world.svc.contents(world.rw))[answer["copy"]] == "# notes\n- one\n- two, mine\n"


async def test_write_through_with_the_store_unreachable_stays_staged_and_says_why(world):
    m = await world.setup({"/log.md": NOTES})
    m.write_file("/notes/log.md", (NOTES + "- mine\n").encode())
    m.store.fail("write_batch", unreachable(), times=None)
    m.store.fail("update_memory", unreachable(), times=None)
    answer = await m.engine.write_through(world.rw, "/log.md")
    assert answer["result"] == "staged" and "dropped" in answer["error"], answer
    assert m.engine.not_on_store()[world.rw].count == 1


async def test_write_through_against_a_store_that_keeps_moving_is_told_a_conflict_in_band(world):
    """The write-through's rounds include the tick's bound (plan.MERGE_TRIES): the store moving
    under every push ends as a true conflict, named to the tool, never as "staged"."""
    m = await world.setup({"/log.md": NOTES})
    single_requests(m)
    mid = world.ids["/log.md"]
    m.write_file("/notes/log.md", (NOTES + "- mine\n").encode())
    _a_writer_before_every_update(world, m, mid)
    answer = await m.engine.write_through(world.rw, "/log.md")
    assert answer["result"] == "conflict" and answer["copy"].startswith("/log.conflict-"), answer
    store = await world.svc.contents(world.rw)
    assert "- mine\n" in store[answer["copy"]] and m.read_file("/notes/log.md") == store["/log.md"].encode()
