"""A mount against the hosted API is frugal (SEMANTICS.md#d-no-counter): it learns what changed from
the stores' version feeds (nothing new: one request per store), lists a store only where the feed
cannot say (first download, feed refused, position past retention, the safety net), backs off
while nobody uses it, and a 429 holds back every request of the mount until its retry-after.

A real `memfs serve --hosted-api`, real mounts, and the loopback proxy of tests/support/proxy.py
in between to count (and, where said, answer) the mount's requests.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.support.api import Api
from tests.support.proxy import Proxy
from tests.support.sandbox import Sandbox, SandboxWorld
from tests.support.service import ServiceProcess
from tests.support.waits import wait_for
from tests.support.world import StoreSpec

VERSIONS = r"/memory_versions"
LISTING = r"/memories$"  # a listing page (the proxy logs paths without the query)
GET_ONE = r"/memories/mem_"
SEED = {"/a.md": "alpha\n", "/b.md": "bravo\n", "/c.md": "charlie\n", "/d/e.md": "echo\n"}


class Hosted:
    def __init__(self, svc: ServiceProcess, api: Api, proxy: Proxy, box: Sandbox, stores: list[str]):
        self.svc, self.api, self.proxy, self.box, self.stores = svc, api, proxy, box, stores

    def count(self, path_re: str, method: str = "GET") -> int:
        return self.proxy.count(method, path_re)

    def id_of(self, store: str, path: str) -> str:
        return self.api.memories(store)[path]["id"]

    def texts(self, slug: str) -> dict[str, str]:
        top = self.box.root / slug
        return {
            "/" + str(p.relative_to(top)): p.read_text()
            for p in sorted(top.rglob("*"))
            if p.is_file() and not p.name.startswith(".")
        }


@contextmanager
def hosted(
    tmp: Path, *, stores: int = 2, serve_args: tuple[str, ...] = (), mount_args: tuple[str, ...] = ()
) -> Iterator[Hosted]:
    specs = [StoreSpec(f"Feed {i}", seed=SEED) for i in range(stores)]
    world = SandboxWorld.serving(tmp, specs, hosted_api=True, extra_args=serve_args)
    try:
        proxy = world.proxy()
        box = world.sandbox("box", base_url=proxy.url)
        box.mount("--live", "off", *mount_args)
        yield Hosted(world.service, world.api, proxy, box, world.store_ids)
    finally:
        world.close()


@pytest.mark.timeout(120)
def test_nothing_new_is_one_versions_request_per_store_and_an_edit_no_request_more(tmp_path):
    with hosted(tmp_path) as h:
        h.box.sync()
        h.proxy.reset_counts()
        idle = h.box.sync()
        assert idle["ok"] and idle["requests"] == 2, idle
        assert h.count(VERSIONS) == 2 and h.count(".", "*") == 2, h.proxy.log
        h.api.update(h.stores[1], h.id_of(h.stores[1], "/a.md"), content="alpha, edited\n")
        h.proxy.reset_counts()
        one = h.box.sync()
        assert one["requests"] == 2, (
            one
        )  # two feeds, the edit's content in one (view=full): no fetch, no listing
        assert h.count(VERSIONS) == 2 and h.count(GET_ONE) == 0 and h.count(LISTING) == 0
        assert (h.box.root / "feed-1" / "a.md").read_text() == "alpha, edited\n"
        # Our own push comes back through the feed as a version: seen, nothing fetched.
        (h.box.root / "feed-0" / "new.md").write_text("from the mount\n")
        h.box.sync()
        h.proxy.reset_counts()
        after = h.box.sync()
        assert after["requests"] == 2 and h.count(GET_ONE) == 0, after
        requests = h.box.status()["requests"]
        assert requests["last_minute"]["versions"] >= 6 and requests["last_hour"]["write"] == 1, requests
        assert "list" in requests["last_hour"]  # the first download
        text = h.box.memfs("status", "--root", str(h.box.root), check=True).stdout
        assert re.search(r"^  requests: last minute .*versions \d+.*; last hour ", text, re.M), text


@pytest.mark.timeout(120)
def test_a_rename_a_delete_and_a_recreate_at_the_same_path_in_one_window(tmp_path):
    with hosted(tmp_path, stores=1) as h:
        sid = h.stores[0]
        h.box.sync()
        b, c = h.id_of(sid, "/b.md"), h.id_of(sid, "/c.md")
        h.api.update(sid, b, path="/d/b-moved.md")  # a rename: a `modified` version, new path
        h.api.update(sid, b, content="bravo, moved and edited\n")
        h.api.delete(sid, c)
        h.api.create(sid, "/c.md", "charlie, the second\n")  # a new memory where the deleted one was
        h.api.create(sid, "/b.md", "bravo's old place, taken\n")  # the path the rename freed
        # A redacted version has no path or sha: the memory is asked by id.
        edit = h.api.update(sid, h.id_of(sid, "/a.md"), content="alpha, its version redacted\n")
        r = h.api.http.post(
            f"/v1/memory_stores/{sid}/memory_versions/{edit['memory_version_id']}/redact",
            headers={"anthropic-beta": "agent-memory-2026-07-22"},
        )
        assert r.status_code == 200, r.text
        h.proxy.reset_counts()
        h.box.sync()
        assert (
            h.texts("feed-0")
            == h.api.contents(sid)
            == {
                "/a.md": "alpha, its version redacted\n",
                "/b.md": "bravo's old place, taken\n",
                "/c.md": "charlie, the second\n",
                "/d/b-moved.md": "bravo, moved and edited\n",
                "/d/e.md": "echo\n",
            }
        )
        assert h.count(LISTING) == 0, h.proxy.log  # all from the feed
        # And the mount writes on: its baseline knows the new ids.
        (h.box.root / "feed-0" / "c.md").write_text("charlie, edited here\n")
        h.box.sync()
        assert h.api.contents(sid)["/c.md"] == "charlie, edited here\n"


@pytest.mark.timeout(150)
def test_a_feed_refused_to_session_tokens_falls_back_to_listings_still_demand_driven(tmp_path):
    """`--session-versions refuse`: the session's token may not read versions (403). The mount lists,
    as before the feed, asks the feed again only rarely, and still backs off while unused."""
    with hosted(
        tmp_path, serve_args=("--session-versions", "refuse"), mount_args=("--idle-poll-interval", "3600")
    ) as h:
        assert h.texts("feed-0") == SEED
        h.api.update(h.stores[0], h.id_of(h.stores[0], "/d/e.md"), content="echo, edited\n")
        h.proxy.reset_counts()
        h.box.sync()
        assert (h.box.root / "feed-0" / "d" / "e.md").read_text() == "echo, edited\n"
        # The download asked no feed (its listing said where the feed stood): the first tick meets
        # the refusal, one 403 a store, lists, and does not ask the feed again for an hour.
        assert h.count(LISTING) >= 2 and h.count(VERSIONS) == len(h.stores), h.proxy.log
        h.proxy.reset_counts()
        h.box.sync()
        assert h.count(LISTING) >= 2 and h.count(VERSIONS) == 0, h.proxy.log
        time.sleep(7)  # the read above was a use: one more poll at the interval, then none
        h.proxy.reset_counts()
        time.sleep(12)  # nobody uses the mount: more than two intervals without a request
        assert h.count(".", "*") == 0, h.proxy.log
        h.api.update(h.stores[1], h.id_of(h.stores[1], "/b.md"), content="bravo, edited\n")
        back = h.box.sync(force=False)
        assert back["ran"] is True, back
        assert (h.box.root / "feed-1" / "b.md").read_text() == "bravo, edited\n"


def _late_edit(h: Hosted, backdate: int) -> None:
    """A memory created with its version stamped `backdate` seconds back: it lands behind versions
    the mount has already read past (and outside the overlap), so the ordinary read cannot see it.
    (A new memory: an edit stamped before the memory's own newer version would lose to it, by the
    feed's rule that a memory's newest version counts; only a listing settles that.)"""
    sid = h.stores[0]
    h.api.update(sid, h.id_of(sid, "/b.md"), content="bravo, edited\n")
    h.box.sync()  # the feed's position is now this edit's version
    r = h.api.http.post(
        f"/v1/memory_stores/{sid}/memories",
        json={"path": "/late.md", "content": "committed late\n"},
        headers={"anthropic-beta": "agent-memory-2026-07-22", "memfs-test-backdate-seconds": str(backdate)},
    )
    assert r.status_code == 200, r.text
    h.proxy.reset_counts()
    h.box.sync()
    assert not (h.box.root / "feed-0" / "late.md").exists()  # hidden from the feed
    assert h.count(LISTING) == 0


def _in_use_until_applied(h: Hosted, seconds: float) -> None:
    late = h.box.root / "feed-0" / "late.md"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not late.exists():
        h.box.sync()  # an agent at work: the mount is in use
        time.sleep(1)
    assert late.read_text() == "committed late\n"


@pytest.mark.timeout(150)
def test_a_version_made_visible_late_is_settled_by_the_wide_window(tmp_path):
    """`--test-late-versions`: an edit whose version is stamped 10 minutes back is settled by the
    safety net's wide read of the store's feed (the last hour, one store per
    `--safety-net-interval`) within that period, without listing the store."""
    with hosted(
        tmp_path, stores=1, serve_args=("--test-late-versions",), mount_args=("--safety-net-interval", "8")
    ) as h:
        _late_edit(h, 600)
        _in_use_until_applied(h, 20)  # the safety net's period (8 s) and an interval, with room
        assert h.count(LISTING) == 0, h.proxy.log


@pytest.mark.timeout(150)
def test_a_version_later_than_the_wide_window_is_settled_by_the_rare_listing(tmp_path):
    """A version stamped two hours back is behind the wide window too: the rare full listing
    (one store per `--full-listing-interval`) applies it."""
    with hosted(
        tmp_path,
        stores=1,
        serve_args=("--test-late-versions",),
        mount_args=("--safety-net-interval", "4", "--full-listing-interval", "12"),
    ) as h:
        _late_edit(h, 7200)
        _in_use_until_applied(h, 30)  # the listing's period (12 s) and an interval, with room
        assert h.count(LISTING) >= 1


@pytest.mark.timeout(240)
def test_nothing_new_after_a_burst_of_writes_is_one_request(tmp_path):
    """250 writes (more than two pages of versions, all within the overlap): once they are read,
    a poll that finds nothing new is one request, not a re-read of the burst's pages."""
    with hosted(tmp_path, stores=1) as h:
        sid = h.stores[0]
        for i in range(250):
            h.api.create(sid, f"/burst/{i:03}.md", f"burst {i}\n")
        h.box.sync()
        assert (h.box.root / "feed-0" / "burst" / "249.md").read_text() == "burst 249\n"
        for _ in range(3):
            h.proxy.reset_counts()
            h.box.sync()
            assert h.count(".", "*") == 1 and h.count(VERSIONS) == 1, h.proxy.log
        h.api.update(sid, h.id_of(sid, "/b.md"), content="bravo, edited\n")
        h.proxy.reset_counts()
        h.box.sync()
        assert (h.box.root / "feed-0" / "b.md").read_text() == "bravo, edited\n"
        assert h.count(VERSIONS) == 1, h.proxy.log  # the new version and the burst's seen ones: one page
        h.proxy.reset_counts()
        h.box.sync()
        assert h.count(".", "*") == 1, h.proxy.log


@pytest.mark.timeout(150)
def test_a_position_older_than_retention_lists_the_store_once(tmp_path):
    with hosted(tmp_path, stores=1) as h:
        sid = h.stores[0]
        h.box.sync()
        h.box.unmount()
        h.api.update(sid, h.id_of(sid, "/a.md"), content="alpha, while unmounted\n")
        db = sqlite3.connect(h.box.state_dir / "state.db")
        old = (datetime.now(UTC) - timedelta(days=40)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with db:
            assert db.execute("UPDATE feed SET position=?", (old,)).rowcount == 1
        db.close()
        h.proxy.reset_counts()
        h.box.mount("--live", "off")
        assert (h.box.root / "feed-0" / "a.md").read_text() == "alpha, while unmounted\n"
        assert h.count(LISTING) >= 1, h.proxy.log
        h.proxy.reset_counts()
        h.box.sync()
        assert h.count(LISTING) == 0 and h.count(VERSIONS) == 1, h.proxy.log  # the feed again


@pytest.mark.timeout(150)
def test_a_remount_reads_the_feed_from_where_it_was_not_a_listing(tmp_path):
    with hosted(tmp_path, stores=1) as h:
        sid = h.stores[0]
        h.box.sync()
        h.box.unmount()
        h.api.update(sid, h.id_of(sid, "/a.md"), content="alpha, while unmounted\n")
        h.proxy.reset_counts()
        h.box.mount("--live", "off")
        assert (h.box.root / "feed-0" / "a.md").read_text() == "alpha, while unmounted\n"
        assert h.count(LISTING) == 0, h.proxy.log


@pytest.mark.timeout(150)
def test_an_idle_mount_backs_off_and_the_next_sync_polls_at_once(tmp_path):
    with hosted(tmp_path, mount_args=("--idle-poll-interval", "3600")) as h:
        h.box.sync()  # a use: the next poll comes at the interval (5 s), then nobody uses it
        time.sleep(7)
        h.proxy.reset_counts()
        time.sleep(12)  # more than two intervals, nobody using the mount
        assert h.count(".", "*") == 0, h.proxy.log
        status = h.box.status()
        assert status["in_use"] is False and "while nobody uses it" in status["mode_reason"], status
        h.api.update(h.stores[0], h.id_of(h.stores[0], "/a.md"), content="alpha, while idle\n")
        back = h.box.sync(force=False, wait=False)  # an agent comes back: a tick is due
        assert back["ran"] is True and back["requests"] == 2, back  # two feeds, the edit's content in one
        assert (h.box.root / "feed-0" / "a.md").read_text() == "alpha, while idle\n"
        # A filesystem request is a use too: the daemon's own timer polls again within an interval.
        h.proxy.reset_counts()
        (h.box.root / "feed-1" / "b.md").read_text()
        deadline = time.monotonic() + 15
        while h.count(VERSIONS) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert h.count(VERSIONS) == 2, h.proxy.log


@pytest.mark.timeout(150)
def test_a_429_holds_back_every_request_of_the_mount_until_its_retry_after(tmp_path):
    with hosted(tmp_path) as h:
        h.box.sync()
        (h.box.root / "feed-1" / "staged.md").write_text("waits for the 429 to pass\n")
        h.proxy.reset_counts()
        h.proxy.add("GET", VERSIONS, "status", code=429, retry_after=10, times=1)
        first = h.box.sync(check=False)
        assert first["ok"] is False, first
        refused_at = max(e.at for e in h.proxy.log if e.action == "status")
        # Forced syncs (the user asked), and the daemon's timer: nothing goes out, the write included.
        for _ in range(2):
            again = h.box.sync(check=False)
            assert again["ok"] is False and "held back" in (again.get("error") or ""), again
            time.sleep(1)
        assert h.api.contents(h.stores[1]).get("/staged.md") is None
        while time.monotonic() < refused_at + 10.5:
            time.sleep(0.5)
        # (a request sent beside the refused one, before its answer came, may be logged just after it)
        early = [e for e in h.proxy.log if refused_at + 0.5 < e.at < refused_at + 9.9]
        assert not early, early
        done = h.box.sync()
        assert done["ok"], done
        assert h.api.contents(h.stores[1])["/staged.md"] == "waits for the 429 to pass\n"
        assert not h.box.status()["stores"][1]["staged"]


def org_count(svc: ServiceProcess, cls: str, outcome: str) -> float:
    text = httpx.get(svc.base_url + "/metrics", timeout=10).text
    m = re.search(rf'^memfs_org_requests_total\{{class="{cls}",outcome="{outcome}"\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.mark.timeout(240)
def test_a_429_storm_under_the_organisations_limits_loses_nothing(tmp_path):
    """The emulator's per-organisation limits, small (reads 2/s in bursts of 6, writes 1 every 2 s
    in bursts of 2): 4 stores' feeds and 16 creates meet 429s; every create lands exactly once, nothing
    stays staged, and the mount's requests waited for the holds the refusals put (or for their paced
    turns, which keep them past those holds)."""
    specs = [StoreSpec(f"Storm {i}", seed=SEED, in_database=True) for i in range(4)]
    world = SandboxWorld.serving(
        tmp_path,
        specs,
        hosted_api=True,
        org_limits=None,
        extra_args=("--org-limits", "120,30", "--org-burst", "3"),
    )
    try:
        svc, api, ids = world.service, world.api, world.store_ids
        box = world.sandbox("box")
        box.mount("--live", "off")
        files = {(i, f"/storm/f{k}.md"): f"store {i} file {k}\n" for i in range(4) for k in range(4)}
        for (i, path), text in files.items():
            top = box.root / f"storm-{i}"
            (top / "storm").mkdir(exist_ok=True)
            (top / path.lstrip("/")).write_text(text)
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            box.sync(check=False)
            if not any(s["staged"] for s in box.status()["stores"]):
                break
            time.sleep(1)
        status = box.status()
        assert not any(s["staged"] for s in status["stores"]), status["stores"]
        assert org_count(svc, "write", "limited") + org_count(svc, "read", "limited") > 0, (
            "no 429: nothing tested"
        )
        # they waited: for the holds the refusals put, or for their turns at the rate the
        # emulator's answers said (SEMANTICS.md#d-budget), which keep them past the holds
        assert status["requests"]["held"] + status["requests"]["paced"] > 0, status["requests"]
        time.sleep(4)  # a full bucket for the checks below
        for i, sid in enumerate(ids):
            stored = api.contents(sid)
            assert {p: t for p, t in stored.items() if p.startswith("/storm/")} == {
                p: t for (j, p), t in files.items() if j == i
            }
    finally:
        world.close()


@pytest.mark.timeout(150)
def test_a_closed_file_reaches_the_store_while_a_process_holds_a_file_the_store_changed(tmp_path):
    """SEMANTICS.md#d-when: a process keeps feed-0/a.md open with unflushed writes (written, never
    closed: no FUSE flush) and the store changes a.md meanwhile: the poll's apply waits
    for the writer (nothing half applied), but b.md, written and closed by another command, reaches
    the store at the mount's next poll all the same, with no `memfs sync`. Once the writer closes,
    `memfs sync` settles a.md: the store's version at a.md, the writer's kept as a conflict copy."""
    with hosted(tmp_path, stores=1) as h:
        store, top = h.stores[0], h.box.root / "feed-0"
        write = "import os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); os.write(fd, sys.argv[2].encode()); time.sleep(120)"
        writer = subprocess.Popen([sys.executable, "-c", write, str(top / "a.md"), "alpha, being written\n"])
        try:
            assert wait_for(lambda: (top / "a.md").read_text() == "alpha, being written\n", 10)
            h.api.update(store, h.id_of(store, "/a.md"), content="alpha from elsewhere\n")
            (top / "b.md").write_text("bravo, mine\n")
            # the mount's own poll (5 s interval), not a sync: b.md goes out, a.md waits
            assert wait_for(lambda: h.api.contents(store)["/b.md"] == "bravo, mine\n", 30), h.box.status()
            assert h.api.contents(store)["/a.md"] == "alpha from elsewhere\n"
        finally:
            writer.kill()
            writer.wait(10)
        assert h.box.sync()["ok"]
        kept = h.api.contents(store)
        assert kept["/a.md"] == "alpha from elsewhere\n"
        assert "alpha, being written\n" in kept.values(), kept
