"""Sync over a network (docs/SEMANTICS.md#network): listings split by path prefix and read
concurrently stay complete and consistent, downloads cost a bounded number of requests, and a short
retry-after is honoured within the tick.

Real `memfs serve` (hosted-API mode where the test says so: no counter, feed or snapshot,
docs/SEMANTICS.md#d-no-counter), real mounts, and the loopback proxy of tests/support/proxy.py in between to count requests
and inject answers. Nothing here is timed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from memfs.client import CONCURRENCY
from tests.support.api import MEMORY_BETA, Api
from tests.support.proxy import Proxy
from tests.support.sandbox import Sandbox, SandboxWorld
from tests.support.seed import seed_database
from tests.support.service import ServiceProcess
from tests.support.world import StoreSpec

SLUG = "wan-notes"
TOPS = [f"t{i}" for i in range(8)]


def layout() -> dict[str, str]:
    """3,000 memories in nested prefixes: 8 top prefixes x 6 x 4 leaf directories of 13, plus
    memories at every level above (the root included), so every listing splits at least twice."""
    out: dict[str, str] = {}
    n = 0

    def add(path: str) -> None:
        nonlocal n
        out[path] = f"memory {n} at {path}\n"
        n += 1

    for t in TOPS:
        for s in range(6):
            for leaf in range(4):
                for _ in range(13):
                    add(f"/{t}/s{s}/l{leaf}/m{n:04d}.md")
            for _ in range(5):
                add(f"/{t}/s{s}/m{n:04d}.md")
        for _ in range(15):
            add(f"/{t}/m{n:04d}.md")
    while n < 3000:
        add(f"/m{n:04d}.md")
    assert n == 3000
    return out


def seed(db: Path, contents: dict[str, str]) -> str:
    """Write the store straight into a database before the service starts (one transaction; 3,000
    creates over HTTP would be 3,000 commits). Returns the store id."""
    db.parent.mkdir(parents=True, exist_ok=True)
    return seed_database(db, {"WAN Notes": contents})["WAN Notes"]


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Iterator[tuple[ServiceProcess, str, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("wan")
    contents = layout()
    db = tmp / "service" / "data" / "store.db"
    store = seed(db, contents)
    svc = ServiceProcess(tmp / "service", db_path=db, hosted_api=True)
    try:
        yield svc, store, contents
    finally:
        svc.stop()


def walk(top: Path) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, names in os.walk(top):
        for n in names:
            rel = "/" + os.path.relpath(os.path.join(dirpath, n), top)
            if rel not in ("/.anthropic-memory-store", "/.sync-notices.log"):
                out[rel] = Path(dirpath, n).read_text()
    return out


@contextmanager
def mounted_through(
    tmp: Path, svc: ServiceProcess, store: str, name: str
) -> Iterator[tuple[Sandbox, Proxy, Api]]:
    """A session of its own on the module's store `store` (named "WAN Notes"), one sandbox through
    a proxy, and an admin Api."""
    world = SandboxWorld.serving(tmp, [StoreSpec("WAN Notes")], service=svc, premade={"WAN Notes": store})
    try:
        proxy = world.proxy()
        yield world.sandbox(name, base_url=proxy.url), proxy, world.api
    finally:
        world.close()


@pytest.mark.timeout(300)
def test_a_hosted_download_costs_pages_not_a_request_per_memory(big, tmp_path):
    svc, store, contents = big
    with mounted_through(tmp_path, svc, store, "download") as (box, proxy, _api):
        box.mount("--max-files", "5000", timeout=240)
        assert walk(box.root / SLUG) == contents
        listings = proxy.count("GET", r"/memories$")
        fetches = proxy.count("GET", r"/memories/mem_")
        # Full-view pages hold 20 memories: 150 pages at least. A store nothing is known of costs
        # one probe page, "/"'s depth-1 pages and a chain per top-level prefix (its last page part
        # filled), not the probe and depth-1 pages of every large prefix, nor 3,000 fetches.
        root = [p for p in contents if p.count("/") == 1]
        assert fetches == 0, "content comes with the full-view listing"
        pages = -(-len(contents) // 20)
        assert pages <= listings <= pages + 1 + (-(-len(root) // 20) + 1) + len(TOPS), listings
        assert proxy.counts.max_in_flight <= CONCURRENCY, proxy.counts
        assert proxy.counts.max_in_flight > 4, "the listing was not concurrent"


class Renamer(threading.Thread):
    """Another writer: moves memories between two top prefixes, back and forth, until stopped."""

    def __init__(self, svc: ServiceProcess, store: str, contents: dict[str, str]):
        super().__init__(daemon=True)
        self.http = httpx.Client(
            base_url=svc.base_url, headers={"x-api-key": svc.admin_key, **MEMORY_BETA}, timeout=30
        )
        self.store = store
        self.stop = threading.Event()
        self.renames = 0
        ids = Api(svc.base_url, svc.admin_key)
        try:
            by_path = {p: m["id"] for p, m in ids.memories(store).items()}
        finally:
            ids.close()
        # Memories under the first and the last top prefix swap sides: listed early, moved late
        # and the other way round, so a listing that is not one snapshot loses and doubles some.
        self.moves = [
            (by_path[p], p, p.replace(f"/{TOPS[0]}/", f"/{TOPS[-1]}/x", 1))
            for p in by_path
            if p.startswith(f"/{TOPS[0]}/")
        ]
        self.moves += [
            (by_path[p], p, p.replace(f"/{TOPS[-1]}/", f"/{TOPS[0]}/y", 1))
            for p in by_path
            if p.startswith(f"/{TOPS[-1]}/")
        ]
        self.where = {mid: old for mid, old, _new in self.moves}

    def run(self) -> None:
        i = 0
        while not self.stop.is_set() and i < 100_000:  # bounded, whatever happens
            mid, old, new = self.moves[i % len(self.moves)]
            target = new if self.where[mid] == old else old
            r = self.http.post(f"/v1/memory_stores/{self.store}/memories/{mid}", json={"path": target})
            if r.status_code == 200:
                self.where[mid] = target
                self.renames += 1
            i += 1

    def close(self) -> None:
        self.stop.set()
        self.join(30)
        self.http.close()


@pytest.mark.timeout(600)
def test_listing_while_another_writer_renames_across_prefixes_loses_and_doubles_nothing(big, tmp_path):
    svc, store, contents = big
    with mounted_through(tmp_path, svc, store, "renames") as (box, proxy, api):
        box.mount("--max-files", "5000", timeout=240)
        assert len(walk(box.root / SLUG)) == len(contents)
        writer = Renamer(svc, store, contents)
        writer.start()
        try:
            for _ in range(4):
                before = writer.renames
                answer = box.sync()
                assert answer["ok"], answer
                during = writer.renames - before
                view = walk(box.root / SLUG)
                # Renames keep the number of memories: a lost one or a doubled one shows here.
                assert len(view) == len(contents), (len(view), during)
                assert sorted(view.values()) == sorted(contents.values()), during
        finally:
            writer.close()
        assert writer.renames > 50, writer.renames  # the writer really raced the listings
        box.sync()
        assert walk(box.root / SLUG) == api.contents(store)


@pytest.fixture
def small(tmp_path) -> Iterator[tuple[ServiceProcess, str]]:
    svc = ServiceProcess(tmp_path / "service")
    api = Api(svc.base_url, svc.admin_key)
    store = api.create_store("WAN Notes")
    for i in range(5):
        api.create(store, f"/d{i % 2}/m{i}.md", f"memory {i}\n")
    api.close()
    try:
        yield svc, store
    finally:
        svc.stop()


@pytest.mark.timeout(120)
def test_a_short_retry_after_is_retried_within_the_tick(small, tmp_path):
    svc, store = small
    with mounted_through(tmp_path, svc, store, "retry") as (box, proxy, api):
        box.mount()
        rule = proxy.add("GET", r"/memory_store_counters$", "status", code=429, retry_after=1, times=1)
        start = time.monotonic()
        answer = box.sync()
        assert rule.hits == 1
        assert proxy.count("GET", r"/memory_store_counters$", since=start) == 2  # refused, then answered
        assert answer["ok"], answer  # the second try answered: the tick did not fail
        # a push refused once with 503 + retry-after lands in the same tick too
        (box.root / SLUG / "new.md").write_text("pushed after one 503\n")
        # (memfs serve has the batch-write extension: the push is a batch)
        rule = proxy.add("POST", r"/memory_batch$", "status", code=503, retry_after="0.2", times=1)
        answer = box.sync()
        assert answer["ok"], answer
        assert rule.hits == 1
        assert api.contents(store)["/new.md"] == "pushed after one 503\n"
        assert proxy.count("POST", r"/memory_batch$") == 2  # refused once, then created


@pytest.mark.timeout(120)
def test_a_long_retry_after_fails_the_tick_which_counts_as_an_attempt(small, tmp_path):
    svc, store = small
    with mounted_through(tmp_path, svc, store, "long-retry") as (box, proxy, _api):
        box.mount()
        rule = proxy.add("GET", r"/memory_store_counters$", "status", code=429, retry_after=60, times=1)
        start = time.monotonic()
        answer = box.sync(check=False)
        known = time.monotonic()  # the tick failed on the 429: the client holds from here on
        assert rule.hits == 1
        assert answer["ok"] is False and "429" in str(answer["error"]), answer
        assert (
            proxy.count("GET", r"/memory_store_counters$", since=start) == 1
        )  # not retried: waiting is the interval's job
        not_forced = box.sync(force=False, wait=False, check=False)
        assert not_forced.get("ran") is False, (
            not_forced
        )  # docs/SEMANTICS.md#d-unreachable: the failure was this interval's attempt
        # Not even forced (SEMANTICS.md#d-budget): the client holds every request until the retry-after.
        forced = box.sync(check=False)
        assert forced["ok"] is False and "held back" in forced["error"], forced
        # Nothing sent once the client had the 429 (the watch's first request may still have been
        # on its way when the proxy refused the tick's: the watch starts after the mount returns).
        assert [e for e in proxy.log if e.at > known] == []


@pytest.mark.timeout(120)
def test_the_client_spreads_its_requests_over_small_pools_and_keeps_the_bound(small):
    """The client's connections are several pools of POOL_SHARD (memfs/client/transport.py `Pools`:
    httpcore's pool costs O(connections²) per request event); the listing pages take connections
    of their own (memfs/client/plain_get.py). Many requests gathered at once still have at most CONCURRENCY in
    flight, open at most CONCURRENCY connections each way, every pool carries its share, and
    every pool's in-flight count is back to 0 when the requests are answered."""
    import trio

    from memfs.client import StoreClient
    from memfs.client.transport import POOL_SHARD

    svc, store = small
    proxy = Proxy(svc.base_url)
    client = StoreClient(proxy.url, svc.admin_key)
    answers: list[int] = []
    fetched: list[str] = []

    async def main() -> None:
        async def one() -> None:
            listing = await client.list_memories(store)
            answers.append(len(listing.items))
            first = listing.items[0]
            fetched.append((await client.get_memory(store, first["id"]))["id"])

        try:
            async with trio.open_nursery() as nursery:
                for _ in range(4 * CONCURRENCY):
                    nursery.start_soon(one)
        finally:
            await client.aclose()

    try:
        trio.run(main)
        pools = client._http._transport
        assert answers == [5] * (4 * CONCURRENCY) and len(fetched) == 4 * CONCURRENCY
        assert (
            len(pools._pools) == -(-(CONCURRENCY + 1) // POOL_SHARD) > 1
        )  # + 1: the held watch's connection
        assert pools._busy == [0] * len(pools._pools), "a finished request still counts as in flight"
        assert proxy.counts.max_in_flight <= CONCURRENCY, proxy.counts
        assert pools._plain.connections_opened <= CONCURRENCY
        assert CONCURRENCY // 2 < proxy.counts.conns <= 2 * CONCURRENCY, proxy.counts
    finally:
        proxy.close()


@pytest.mark.timeout(120)
def test_a_hosted_tick_gives_a_changed_file_its_memorys_updated_at_as_mtime(tmp_path):
    """The engine keeps each listed memory's updated_at as text and parses it only for the files
    it writes (remote.Pulled.note_mtime): the written file's mtime is still the memory's updated_at."""
    from datetime import datetime

    def ns(stamp: str) -> int:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1e9)

    svc = ServiceProcess(tmp_path / "service", hosted_api=True)
    try:
        api = Api(svc.base_url, svc.admin_key)
        store = api.create_store("WAN Notes")
        api.create(store, "/d/keep.md", "kept\n")
        m = api.create(store, "/d/edit.md", "before\n")
        api.close()
        with mounted_through(tmp_path, svc, store, "mtime") as (box, _proxy, api):
            box.mount()
            f = box.root / SLUG / "d" / "edit.md"
            assert f.stat().st_mtime_ns == ns(m["updated_at"])
            time.sleep(1.1)  # updated_at has whole seconds: the edit must show a new one
            edited = api.update(store, m["id"], content="after\n")
            assert edited["updated_at"] != m["updated_at"]
            box.sync()
            assert f.read_text() == "after\n"
            assert f.stat().st_mtime_ns == ns(edited["updated_at"])
    finally:
        svc.stop()
