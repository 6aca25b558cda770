"""A write that landed but whose answer was lost is settled as the mount's own, without a conflict
copy (SEMANTICS.md#d-three-way: a remote sha equal to what was sent is our own write), against the
hosted-API emulator: a real `memfs serve --hosted-api`, a real mount, and the loopback proxy of
tests/support/proxy.py in between, dropping the first answer to a create and to an update after
the service applied them (`lose_answer`).

The mount's client does not send a request again after a dropped connection (the tick fails and
counts as an attempt, SEMANTICS.md#d-unreachable); the next tick learns the store holds what it
sent. A repeat within one request (a 503 `change_outcome_unknown`) is tests/client/test_resend.py.
"""

from __future__ import annotations

import pytest

from tests.support.sandbox import SandboxWorld
from tests.support.world import StoreSpec

pytestmark = pytest.mark.timeout(150)

CONFLICT_KINDS = ("store-won-conflict", "overwritten-by-store", "deleted-by-store")


@pytest.fixture
def rig(tmp_path):
    world = SandboxWorld.serving(tmp_path, [StoreSpec("Notes", seed={"/a.md": "alpha\n"})], hosted_api=True)
    try:
        proxy = world.proxy()
        box = world.sandbox("box", base_url=proxy.url)
        box.mount("--live", "off")
        yield world.api, proxy, box, world.rw
    finally:
        world.close()


def test_a_create_and_an_update_whose_answers_were_lost_are_settled_without_a_conflict_copy(rig):
    api, proxy, box, sid = rig
    top = box.root / "notes"
    (top / "new.md").write_text("brand new\n")
    (top / "a.md").write_text("alpha, edited\n")
    created = proxy.add("POST", r"/memories$", "lose_answer", times=1)
    updated = proxy.add("POST", r"/memories/mem_[^/]+$", "lose_answer", times=1)
    for _attempt in range(4):  # each failed push fails its tick; the next settles it and goes on
        answer = box.sync(check=False)
        if answer["ok"] and box.status()["stores"][0]["staged"] == 0:
            break
    assert answer["ok"], answer
    assert created.hits == 1 and updated.hits == 1  # both writes landed, both answers were lost
    assert api.contents(sid) == {"/a.md": "alpha, edited\n", "/new.md": "brand new\n"}
    memories = api.memories(sid)
    # each write made once: the lost answers were not taken for refusals and sent again
    assert [v["operation"] for v in api.versions(sid, memories["/new.md"]["id"])] == ["created"]
    assert [v["operation"] for v in api.versions(sid, memories["/a.md"]["id"])] == ["modified", "created"]
    assert proxy.count("POST", r"/memories$") == 1 and proxy.count("POST", r"/memories/mem_") == 1
    # no conflict: no notice, no kept copy, the mount shows what it wrote
    notices = (top / ".sync-notices.log").read_text() if (top / ".sync-notices.log").exists() else ""
    assert not [kind for kind in CONFLICT_KINDS if kind in notices], notices
    kept = box.state_dir / "kept"
    assert not kept.exists() or not any(p.is_file() for p in kept.rglob("*"))
    assert (top / "new.md").read_text() == "brand new\n" and (top / "a.md").read_text() == "alpha, edited\n"
    status = box.status()["stores"][0]
    assert status["staged"] == 0 and not status.get("refused")
