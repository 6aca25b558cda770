"""A write burst goes out in batch writes where the service has them, one request per
change where it does not (the hosted API), with the same bookkeeping either way.

Real `memfs serve` (`--hosted-api` for the second case), a real mount behind the loopback proxy
of tests/support/proxy.py, which counts the requests. The burst: 300 new files, a renamed
directory, a deleted and an edited file; the service's --max-memories leaves room for all but
three of the new files, so three uploads are refused per item (400) and must be noticed as such.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from tests.support.sandbox import SandboxWorld
from tests.support.world import StoreSpec

SLUG = "burst-notes"
N = 300
SEED = {"/old/a.md": "a\n", "/old/b.md": "b\n", "/gone.md": "gone\n", "/edit.md": "before\n"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("hosted", [False, True], ids=["memfs-serve", "hosted-api"])
@pytest.mark.expected_log(r"change\(s\) are not on the store service")  # the refused creates, at unmount
def test_a_300_file_burst_lands_in_few_requests_or_singles_on_the_hosted_api(tmp_path, hosted):
    # live after the burst: 4 seeded - 1 deleted + 300 new; room for all but three of the new
    notes = StoreSpec("Burst Notes", seed=SEED)
    world = SandboxWorld.serving(tmp_path, [notes], hosted_api=hosted, max_memories=len(SEED) - 1 + N - 3)
    try:
        api, store, ids = world.api, world.rw, world.ids
        proxy = world.proxy()
        box = world.sandbox("a", base_url=proxy.url)
        box.mount()
        root = box.root / SLUG
        proxy.reset_counts()  # from here: the burst, whenever the mount sends it (a tick or live mode)
        subprocess.run(
            ["sh", "-ec", f'mkdir burst; for i in $(seq 1 {N}); do echo "file $i" > burst/f$i.md; done; '
                          "mv old moved; rm gone.md; echo after > edit.md"],
            cwd=root, check=True, timeout=120,
        )  # fmt: skip
        box.sync()

        batches = proxy.count("POST", r"/memory_batch$")
        creates = proxy.count("POST", r"/memories$")
        updates = proxy.count("POST", r"/memories/mem_")
        deletes = proxy.count("DELETE", r"/memories/mem_")
        if hosted:
            assert (batches, creates, updates, deletes) == (0, N, 3, 1)
        else:
            # a stage per kind: the delete, the rename wave with the edit, the creates (one batch);
            # a mount pushing on its own before the tick (live mode) may cut it into a few more
            assert creates == updates == deletes == 0
            assert 1 <= batches <= 6, batches

        on_store = api.contents(store)
        assert on_store["/moved/a.md"] == "a\n" and on_store["/moved/b.md"] == "b\n"
        memories = api.memories(store)
        assert memories["/moved/a.md"]["id"] == ids["/old/a.md"]  # a rename keeps the memory
        assert "/gone.md" not in on_store and on_store["/edit.md"] == "after\n"
        landed = {p for p in on_store if p.startswith("/burst/")}
        # three refused when the delete went first (one tick's stage order), four otherwise
        assert N - 4 <= len(landed) <= N - 3, len(landed)
        for p in landed:
            assert on_store[p] == f"file {p[len('/burst/f') : -3]}\n"
        # the three the store refused: named in the notices and in status, kept in the view
        refused = [line for line in box.notices(SLUG) if " upload-refused " in line]
        assert len(refused) == N - len(landed), refused
        for line in refused:
            path = line.split(" ")[2]
            assert path.startswith("/burst/") and path not in landed
            assert (root / path[1:]).read_text() == f"file {path[len('/burst/f') : -3]}\n"
        # a second tick sends nothing again: everything is booked
        proxy.reset_counts()
        box.sync()
        assert proxy.count("POST", r"/memor") == 0 and proxy.count("DELETE", r"/memor") == 0
    finally:
        world.close()


def _burst(root, tag: str, n: int) -> None:
    subprocess.run(
        ["sh", "-ec", f'mkdir {tag}; for i in $(seq 1 {n}); do echo "{tag} $i" > {tag}/f$i.md; done'],
        cwd=root,
        check=True,
        timeout=60,
    )


@pytest.mark.timeout(240)
def test_a_service_without_the_batch_route_gets_single_requests_and_a_failed_batch_loses_nothing(tmp_path):
    """A memfs service that has the counter but answers the batch 404 (an older memfs): the stage
    goes out as single requests and the batch is not asked again. A batch answered 503: the push
    fails, the changes stay staged, and the next tick sends them."""
    world = SandboxWorld.serving(tmp_path, [StoreSpec("Burst Notes")])
    try:
        api, store = world.api, world.rw
        proxy = world.proxy()
        box = world.sandbox("a", base_url=proxy.url)
        box.mount()
        root = box.root / SLUG

        proxy.add("POST", r"/memory_batch$", "status", code=503, times=1)
        _burst(root, "first", 20)
        proxy.reset_counts()
        box.sync(check=False)
        assert proxy.count("POST", r"/memory_batch$") == 1 and proxy.count("POST", r"/memories$") == 0
        assert not any(p.startswith("/first/") for p in api.contents(store))  # nothing half-sent
        box.sync()
        assert proxy.count("POST", r"/memory_batch$") == 2
        assert {p for p in api.contents(store) if p.startswith("/first/")} == {
            f"/first/f{i}.md" for i in range(1, 21)
        }

        proxy.add("POST", r"/memory_batch$", "status", code=404)
        _burst(root, "second", 20)
        proxy.reset_counts()
        box.sync()
        assert proxy.count("POST", r"/memory_batch$") == 1 and proxy.count("POST", r"/memories$") == 20
        _burst(root, "third", 5)
        proxy.reset_counts()
        box.sync()
        assert proxy.count("POST", r"/memory_batch$") == 0 and proxy.count("POST", r"/memories$") == 5
        contents = api.contents(store)
        for tag, n in (("second", 20), ("third", 5)):
            for i in range(1, n + 1):
                assert contents[f"/{tag}/f{i}.md"] == f"{tag} {i}\n"
    finally:
        world.close()


@pytest.mark.timeout(240)
def test_an_item_refused_409_inside_a_batch_is_settled_as_a_conflict_and_the_others_land(tmp_path):
    """The store changes a memory after the tick planned its upload: the batch's update for it
    answers 409 (its precondition), the batch's other items land, and the next tick settles the
    conflict as SEMANTICS.md#d-merge says: one line changed on both sides is a true conflict, the
    store's version stays in the file and the agent's goes onto the store beside it, named."""
    world = SandboxWorld.serving(tmp_path, [StoreSpec("Burst Notes", seed={"/shared.md": "base\n"})])
    try:
        api, store, mid = world.api, world.rw, world.ids["/shared.md"]
        proxy = world.proxy()
        box = world.sandbox("a", base_url=proxy.url)
        box.mount()
        root = box.root / SLUG
        (root / "shared.md").write_text("local\n")
        (root / "other.md").write_text("other\n")
        (root / "third.md").write_text("third\n")
        proxy.add("POST", r"/memory_batch$", "delay", seconds=2.0)
        proxy.reset_counts()
        ticker = threading.Thread(target=box.sync)
        ticker.start()
        for _ in range(400):  # until the first batch (the update's stage) is held in the proxy
            if proxy.count("POST", r"/memory_batch$"):
                break
            time.sleep(0.025)
        api.update(store, mid, content="remote\n")  # lands before the held batch
        ticker.join(60)
        proxy.clear()
        contents = api.contents(store)
        assert contents["/shared.md"] == "remote\n"  # ours never landed
        assert contents["/other.md"] == "other\n" and contents["/third.md"] == "third\n"
        box.sync()
        assert (root / "shared.md").read_text() == "remote\n"
        [line] = [x for x in box.notices(SLUG) if " conflict-copy " in x]
        assert " /shared.md " in line
        store_now = api.contents(store)
        assert store_now["/shared.md"] == "remote\n"
        [copy] = [p for p in store_now if p.startswith("/shared.conflict-")]
        assert store_now[copy] == "local\n" and copy in line
    finally:
        world.close()
