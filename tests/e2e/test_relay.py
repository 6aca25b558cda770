"""The relay ("a relay for fleets"): `memfs serve --upstream URL` between real mounts and a real
upstream `memfs serve` (plain, or `--hosted-api` where the test says so).

Each test starts its own upstream and relay (both start in well under a second) with
`--poll-interval 1` and a short `--confirm-every`, builds its worlds on the upstream (StoreSpecs:
tests/support/world.py; a store two sessions share is `premade` for the second), and mounts them
through the relay. Nothing here is timed: every wait polls with a generous deadline; a deadline far
above the promise (seconds) still fails a relay that never does it.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.api import MEMORY_BETA, SESSION_BETA
from tests.support.mounts import sh
from tests.support.sandbox import Sandbox, SandboxWorld
from tests.support.service import ServiceProcess
from tests.support.waits import wait_for
from tests.support.world import StoreSpec, World

pytestmark = pytest.mark.timeout(120)

CONFIRM_EVERY = 2.0  # --confirm-every (the default is 60)
LONG = "300"  # --sync-interval: a mount's own tick explains nothing within these tests


class Relayed:
    """An upstream `memfs serve`, a relay in front of it, and the worlds made on the upstream, whose
    sandboxes mount through the relay. Everything it makes is closed by `relayed` (its `stack`)."""

    def __init__(self, tmp: Path, up: ServiceProcess, relay: ServiceProcess, stack: ExitStack):
        self.tmp, self.up, self.relay, self.stack = tmp, up, relay, stack

    def world(self, specs: Sequence[StoreSpec], premade: Mapping[str, str] | None = None) -> SandboxWorld:
        """A world made on the upstream, its sandboxes mounting through the relay. `premade`: its
        stores another world made already (name -> store id): a session of its own on them."""
        world = SandboxWorld.serving(
            self.tmp, specs, service=self.up, premade=premade, base_url=self.relay.base_url
        )
        self.stack.callback(world.close)
        return world

    def as_token(self, world: World) -> httpx.Client:
        """An HTTP client with the world's session token (what its mount sends), on the relay."""
        client = httpx.Client(
            base_url=self.relay.base_url,
            headers={"authorization": f"Bearer {world.token}", **MEMORY_BETA},
            timeout=30,
        )
        self.stack.callback(client.close)
        return client

    def relay_status(self) -> dict:
        r = httpx.get(
            f"{self.relay.base_url}/v1/relay_status", headers={"x-api-key": self.relay.admin_key}, timeout=30
        )
        assert r.status_code == 200, r.text
        return r.json()

    def cached(self, store: str) -> bool:
        return any(s["memory_store_id"] == store and s["cached"] for s in self.relay_status()["stores"])


@contextmanager
def relayed(tmp: Path, *, hosted: bool = False, confirm_every: float = CONFIRM_EVERY) -> Iterator[Relayed]:
    """Closed last made first, each step whatever the others did: the worlds (their sandboxes
    unmounted through the relay), the relay, the upstream."""
    with ExitStack() as stack:
        up = ServiceProcess(tmp / "up", hosted_api=hosted)
        stack.callback(up.stop)
        relay = ServiceProcess(
            tmp / "relay",
            extra_args=(
                "--upstream",
                up.base_url,
                "--poll-interval",
                "1",
                "--confirm-every",
                str(confirm_every),
            ),
        )
        stack.callback(relay.stop)
        yield Relayed(tmp, up, relay, stack)


def store_reads(client: httpx.Client, store: str, memory_id: str) -> dict[str, int]:
    """What a mount reads of a store, each as one request: read -> status."""
    s = f"/v1/memory_stores/{store}"
    return {
        "list": client.get(f"{s}/memories", params={"view": "full"}).status_code,
        "get memory": client.get(f"{s}/memories/{memory_id}").status_code,
        "counter": client.get("/v1/memory_store_counters", params={"ids": store}).status_code,
        "changes": client.get(f"{s}/changes", params={"since": 0}).status_code,
        "snapshot": client.get(f"{s}/snapshot").status_code,
        "watch": client.get("/v1/memory_store_watch", params={"known": f"{store}:0", "wait": 1}).status_code,
    }


def all_status(reads: dict[str, int], status: int) -> bool:
    return all(v == status for v in reads.values())


def mount_status(box: Sandbox, slug: str) -> dict:
    return next(s for s in box.status()["stores"] if s["slug"] == slug)


def pushed(box: Sandbox, slug: str) -> bool:
    """A forced sync of the mount answers ok, and its store `slug` has nothing left to push."""
    answer = box.sync()
    st = mount_status(box, slug)
    return bool(answer.get("ok")) and st["staged"] == st["not_on_store"] == 0 and st["last_error"] is None


def texts(top: Path) -> dict[str, str]:
    return {
        "/" + str(p.relative_to(top)): p.read_text()
        for p in sorted(top.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def listing(client: httpx.Client, store: str) -> dict[str, str]:
    """path -> content of every memory, as `client` lists them (every page)."""
    out: dict[str, str] = {}
    page = None
    while True:
        params = {"view": "full", "limit": 20, **({"page": page} if page else {})}
        r = client.get(f"/v1/memory_stores/{store}/memories", params=params)
        assert r.status_code == 200, r.text
        out.update({m["path"]: m["content"] for m in r.json()["data"] if m["type"] == "memory"})
        page = r.json().get("next_page")
        if not page:
            return out


def diff(got: dict[str, str], want: dict[str, str]) -> str:
    return (
        f"missing {sorted(set(want) - set(got))}, extra {sorted(set(got) - set(want))}, "
        f"differ {sorted(p for p in set(got) & set(want) if got[p] != want[p])}"
    )


# -- 1. a token reads from the cache only the stores its session attaches ----------------------------


def test_a_token_reads_nothing_of_a_store_its_session_does_not_attach(tmp_path):
    with relayed(tmp_path) as fleet:
        owner = fleet.world([StoreSpec("Secret", seed={"/plans.md": "the plans\n"})])
        other = fleet.world([StoreSpec("Mine", seed={"/own.md": "my own\n"})])
        secret, hidden = owner.rw, owner.ids["/plans.md"]
        mine, own = other.rw, other.ids["/own.md"]
        foreign = fleet.as_token(other)

        # Before anyone warmed the store: refused, and the refusal downloads nothing.
        before = store_reads(foreign, secret, hidden)
        assert all_status(before, 404), before
        assert not fleet.cached(secret), fleet.relay_status()

        # Its owner's token warms it (the download), and reads it all.
        owned = store_reads(fleet.as_token(owner), secret, hidden)
        assert all_status(owned, 200), owned
        assert fleet.cached(secret), fleet.relay_status()

        # The foreign token, not known to the relay by its session: still refused.
        after = store_reads(foreign, secret, hidden)
        assert all_status(after, 404), after
        # Once the relay has read its session (what its mount does at start), it reads its own
        # store and still nothing of the other, alone or asked alongside its own.
        session = foreign.get(f"/v1/sessions/{other.session['id']}", headers=SESSION_BETA)
        assert session.status_code == 200, session.text
        assert all_status(store_reads(foreign, mine, own), 200)
        learned = store_reads(foreign, secret, hidden)
        assert all_status(learned, 404), learned
        both = foreign.get("/v1/memory_store_counters", params={"ids": f"{mine},{secret}"})
        assert both.status_code == 404, both.text
        assert "plans" not in foreign.get(f"/v1/memory_stores/{secret}/memories").text
        # A write it tries is the upstream's to refuse (404: not its store), and proves nothing:
        # the cache serves it no more after than before.
        s = f"/v1/memory_stores/{secret}"
        tried = {
            "create": foreign.post(f"{s}/memories", json={"path": "/x.md", "content": "x\n"}).status_code,
            "update": foreign.post(f"{s}/memories/{hidden}", json={"content": "y\n"}).status_code,
            "delete": foreign.delete(f"{s}/memories/{hidden}").status_code,
        }
        assert all_status(tried, 404), tried
        after_writes = store_reads(foreign, secret, hidden)
        assert all_status(after_writes, 404), after_writes
        assert owner.api.contents(secret) == {"/plans.md": "the plans\n"}


# -- 2. an archived session's token stops reading within --confirm-every --------------------------


def test_an_archived_sessions_token_stops_reading_within_confirm_every(tmp_path):
    with relayed(tmp_path) as fleet:
        w = fleet.world([StoreSpec("Notes", seed={"/a.md": "alpha\n"})])
        store, memory = w.rw, w.ids["/a.md"]
        box = w.sandbox("a")
        box.mount()  # the session read at start teaches the relay the token's stores
        assert (box.root / "notes" / "a.md").read_text() == "alpha\n"
        token = fleet.as_token(w)
        assert all_status(store_reads(token, store, memory), 200)

        r = w.api.http.post(f"/v1/sessions/{w.session['id']}/archive", headers=SESSION_BETA)
        assert r.status_code == 200, r.text

        # Served from the cache until the confirmation is older than --confirm-every (2 s), then
        # refused: the deadline is generous, a relay that never asks again never gets there.
        refused = wait_for(lambda: token.get(f"/v1/memory_stores/{store}/memories").status_code != 200, 20)
        assert refused, "the archived session's token still reads through the relay"
        reads = store_reads(token, store, memory)
        assert all(s in (401, 403, 404) for s in reads.values()), reads
        time.sleep(CONFIRM_EVERY + 0.5)  # and it stays refused (no stale confirmation comes back)
        reads = store_reads(token, store, memory)
        assert all(s in (401, 403, 404) for s in reads.values()), reads


# -- 3. read_only through the relay ----------------------------------------------------------------


def test_read_only_through_the_relay(tmp_path):
    with relayed(tmp_path) as fleet:
        w = fleet.world([StoreSpec("Handbook", "read_only", {"/style.md": "Write short sentences.\n"})])
        handbook = w.ro
        box = w.sandbox("ro")
        box.mount()
        top = box.root / "handbook"
        assert (top / "style.md").read_text() == "Write short sentences.\n"

        # The mount refuses locally (EROFS), as it does without a relay.
        out = sh("echo changed > style.md; echo new > new.md; rm style.md; mkdir d", top, timeout=60)
        assert out.stderr.count("Read-only file system") == 4, out.stderr
        assert texts(top) == {"/style.md": "Write short sentences.\n"}

        # A write with the token straight through the relay gets the upstream's 403.
        token = fleet.as_token(w)
        counter = token.get("/v1/memory_store_counters", params={"ids": handbook})
        assert counter.status_code == 200, counter.text
        memory = w.ids["/style.md"]
        writes = {
            "create": token.post(
                f"/v1/memory_stores/{handbook}/memories", json={"path": "/new.md", "content": "new\n"}
            ),
            "update": token.post(
                f"/v1/memory_stores/{handbook}/memories/{memory}", json={"content": "changed\n"}
            ),
            "delete": token.delete(f"/v1/memory_stores/{handbook}/memories/{memory}"),
        }
        for what, r in writes.items():
            assert r.status_code == 403, (what, r.status_code, r.text)
            assert r.json()["error"]["type"] == "permission_error", (what, r.text)
        # Nothing moved: on the upstream, in the relay's cache, in the mount.
        assert w.api.contents(handbook) == {"/style.md": "Write short sentences.\n"}
        assert token.get("/v1/memory_store_counters", params={"ids": handbook}).json() == counter.json()
        listed = token.get(f"/v1/memory_stores/{handbook}/memories", params={"view": "full"}).json()
        assert [(m["path"], m["content"]) for m in listed["data"]] == [
            ("/style.md", "Write short sentences.\n")
        ]
        assert texts(top) == {"/style.md": "Write short sentences.\n"}


# -- 4. the relay SIGKILLed in the middle of a burst of writes ------------------------------------

BURST = 50


def burst_text(i: int) -> str:
    return f"line of file {i:02d}\n" * 100


@pytest.mark.expected_log(r"is unreachable|cannot reach")
def test_the_relay_killed_in_a_burst_of_writes_loses_nothing(tmp_path):
    with relayed(tmp_path) as fleet:
        w = fleet.world([StoreSpec("Burst", seed={"/seed.md": "seed\n"})])
        store, seed = w.rw, w.ids["/seed.md"]
        box = w.sandbox("burst")
        box.mount()
        top = box.root / "burst"
        # 50 files written by shell tools, five at a time, 0.6 s apart (about 6 s of writes): each
        # group is pushed as a wave once the mount's 0.3 s debounce passes.
        writer = subprocess.Popen(
            [
                "bash",
                "-c",
                f'for i in $(seq -w 1 {BURST}); do yes "line of file $i" | head -n 100 > f$i.md; '
                "case $i in *5|*0) sleep 0.6;; esac; done",
            ],
            cwd=top,
        )
        try:
            # Midway: some of the burst is on the upstream (the mount pushes as it goes), not all.
            landed = wait_for(lambda: sum(p.startswith("/f") for p in w.api.contents(store)) >= 10, 30, 0.05)
            assert landed, w.api.contents(store)
            fleet.relay.kill()  # SIGKILL: no answer to what was in flight, nothing flushed
            on_kill = sum(p.startswith("/f") for p in w.api.contents(store))
            # Another writer edits the upstream while the relay is away: the restarted relay's
            # cache must find it (its first poll reads the feed from the position the cache recorded).
            w.api.update(store, seed, content="seed, edited while the relay was down\n")
            assert writer.wait(60) == 0
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
        fleet.relay.start()  # the same port, the same cache db
        token = fleet.as_token(w)
        # The restarted relay reads the feed from the position its cache recorded (within a few polls;
        # long before the poll's wide safety net, one poll in 20, could find the edit).
        assert wait_for(
            lambda: listing(token, store)["/seed.md"] == "seed, edited while the relay was down\n", 10
        ), listing(token, store)

        burst = {f"/f{i:02d}.md": burst_text(i) for i in range(1, BURST + 1)}
        # the mount never lost a write (its seed may be either: once the relay has the upstream's
        # edit, a quiet live mount pulls it at any moment)
        seen = texts(top)
        assert seen.pop("/seed.md") in ("seed\n", "seed, edited while the relay was down\n")
        assert seen == burst
        expected = {"/seed.md": "seed, edited while the relay was down\n", **burst}

        assert wait_for(lambda: pushed(box, "burst"), 60, 0.5), (box.status(), box.sync())
        assert on_kill < BURST, "the relay was killed after the burst had landed: not midway"
        assert w.api.contents(store) == expected  # none lost, none partial, nothing else

        # The relay's cache, reused after the kill, holds what the upstream holds.
        def relay_view() -> dict[str, str]:
            return listing(token, store)

        assert wait_for(lambda: relay_view() == expected, 20), diff(relay_view(), expected)
        assert wait_for(lambda: box.sync().get("ok") and texts(top) == expected, 20), diff(
            texts(top), expected
        )


# -- 5. the upstream down for a while ------------------------------------------------------------


OUTAGE = 60.0  # seconds the upstream is down


@pytest.mark.expected_log(r"is unreachable|cannot reach|not on the store service")
@pytest.mark.timeout(240)
def test_upstream_down_reads_served_writes_staged_then_pushed(tmp_path):
    with relayed(tmp_path) as fleet:
        seed = {"/a.md": "alpha\n", "/d/b.md": "bravo\n"}
        w = fleet.world([StoreSpec("Notes", seed=seed)])
        store, ids = w.rw, w.ids
        box = w.sandbox("a")
        box.mount()
        top = box.root / "notes"
        assert texts(top) == seed
        token = fleet.as_token(w)
        assert all_status(store_reads(token, store, ids["/a.md"]), 200)

        # A minute of outage, as the issue says: it outlasts --confirm-every (2 s here) many
        # times, the mount's --sync-interval (5 s) and its held watch (55 s).
        fleet.up.stop()
        down_at = time.monotonic()
        assert sh("cat a.md d/b.md", top, timeout=60).stdout == "alpha\nbravo\n"
        sh("echo gamma > c.md; echo 'alpha again' > a.md", top, timeout=60)
        write = token.post(f"/v1/memory_stores/{store}/memories", json={"path": "/x.md", "content": "x\n"})
        assert write.status_code == 503, write.text
        time.sleep(CONFIRM_EVERY + 0.5)
        # Reads the token had confirmed are served from the cache, past --confirm-every too.
        reads = store_reads(token, store, ids["/a.md"])
        assert all_status(reads, 200), reads
        assert listing(token, store) == seed
        box.sync(check=False)
        st = mount_status(box, "notes")
        assert "503" in st["last_error"] and "cannot reach its upstream" in st["last_error"], st
        assert st["staged"] == 2, st
        assert sorted(st["paths"]["staged"]) == ["/a.md", "/c.md"], st
        assert sh("cat a.md c.md d/b.md", top, timeout=60).stdout == "alpha again\ngamma\nbravo\n"
        time.sleep(max(0.0, OUTAGE - (time.monotonic() - down_at)))
        assert all_status(store_reads(token, store, ids["/a.md"]), 200)  # still, a minute on
        assert texts(top) == {"/a.md": "alpha again\n", "/c.md": "gamma\n", "/d/b.md": "bravo\n"}

        fleet.up.start()  # the same port, the same db
        want = {"/a.md": "alpha again\n", "/c.md": "gamma\n", "/d/b.md": "bravo\n"}

        assert wait_for(lambda: pushed(box, "notes"), 60, 0.5), box.status()
        assert w.api.contents(store) == want
        assert texts(top) == want
        write = token.post(f"/v1/memory_stores/{store}/memories", json={"path": "/x.md", "content": "x\n"})
        assert write.status_code == 200, write.text


# -- 6. two mounts through one relay ---------------------------------------------------------------


def test_two_mounts_through_one_relay_read_each_others_writes_and_upstream_edits(tmp_path):
    with relayed(tmp_path, hosted=True) as fleet:
        w = fleet.world([StoreSpec("Shared", seed={"/shared.md": "first\n"})])
        store, memory = w.rw, w.ids["/shared.md"]
        shared = {"Shared": store}  # the one store, for the next sessions
        a = w.sandbox("a")
        b = fleet.world([StoreSpec("Shared")], shared).sandbox("b")
        # A long --sync-interval: only the relay's watch (live mode) can bring a change in time.
        a.mount("--sync-interval", LONG)
        b.mount("--sync-interval", LONG)
        assert wait_for(lambda: a.status()["mode"] == "live" and b.status()["mode"] == "live"), (
            a.status(),
            b.status(),
        )
        ta, tb = a.root / "shared", b.root / "shared"
        token = fleet.as_token(fleet.world([StoreSpec("Shared", "read_only")], shared))

        def counter() -> int:
            r = token.get("/v1/memory_store_counters", params={"ids": store})
            assert r.status_code == 200, r.text
            return int(r.json()["data"][0]["counter"])

        def landed(box: Sandbox, at_least: int) -> bool:
            # Through `memfs status` (the control socket), never the files: a file read is a
            # filesystem request, and a mount that is never quiet never pulls by itself.
            seen = mount_status(box, "shared")["counter"]
            return seen is not None and seen >= at_least

        before = counter()
        (ta / "from-a.md").write_text("written in A\n")
        assert wait_for(lambda: counter() > before, 20), "A's write never reached the relay's cache"
        assert "/from-a.md" in w.api.contents(store)
        assert wait_for(lambda n=counter(): landed(b, n), 20), mount_status(b, "shared")
        assert (tb / "from-a.md").read_text() == "written in A\n"
        before = counter()
        (tb / "shared.md").write_text("edited in B\n")
        assert wait_for(lambda: counter() > before, 20), "B's write never reached the relay's cache"
        assert w.api.contents(store)["/shared.md"] == "edited in B\n"
        assert wait_for(lambda n=counter(): landed(a, n), 20), mount_status(a, "shared")
        assert (ta / "shared.md").read_text() == "edited in B\n"
        # Each write was in the relay's cache before its mount heard of it: no poll fetched the
        # memory (at most one, where a poll read the feed between the upstream's answer and the
        # relay's own apply).
        fetched = fleet.relay_status()["requests"]["last_hour"].get("get", 0)
        assert fetched <= 1, fleet.relay_status()

        # An edit made on the upstream directly: the relay's poll (every 1 s) finds it, its watch
        # wakes both mounts.
        fetched = fleet.relay_status()["requests"]["last_hour"].get("get", 0)
        before = counter()
        w.api.update(store, memory, content="edited upstream\n")
        assert wait_for(lambda: counter() > before, 20), "the relay's poll never found the upstream edit"
        n = counter()
        assert wait_for(lambda: landed(a, n) and landed(b, n), 20), (
            mount_status(a, "shared"),
            mount_status(b, "shared"),
        )
        assert (ta / "shared.md").read_text() == (tb / "shared.md").read_text() == "edited upstream\n"
        # The poll's read of the version feed carried the new content (view=full): no GET of it.
        assert fleet.relay_status()["requests"]["last_hour"].get("get", 0) == fetched
        polls = {s["memory_store_id"]: s for s in fleet.relay_status()["stores"]}[store]
        assert polls["downloads"] == 1, polls  # one download for both mounts


# -- a relay that lost its cache -------------------------------------------------------------------


def test_a_relay_that_lost_its_cache_leaves_no_mount_stale(tmp_path):
    """A fresh cache counted from scratch and could land on the counter a mount had applied; it now
    counts from the time in milliseconds (memfs/service/mirror.py `counter_base`)."""
    with relayed(tmp_path) as fleet:
        w = fleet.world([StoreSpec("Notes", seed={"/a.md": "alpha\n"})])
        store, memory = w.rw, w.ids["/a.md"]
        box = w.sandbox("a")
        box.mount("--sync-interval", LONG)
        top = box.root / "notes"
        for i in range(4):  # the old cache's counter moves past what a fresh download numbers
            (top / f"m{i}.md").write_text(f"m{i}\n")
            assert box.sync().get("ok")
        # The relay moves to a fresh cache (a new volume, a new host behind the same URL).
        fleet.relay.kill()
        for f in fleet.relay.db_path.parent.glob(fleet.relay.db_path.name + "*"):
            f.unlink()
        w.api.update(store, memory, content="edited while the relay had no cache\n")
        fleet.relay.start()
        assert wait_for(
            lambda: (
                box.sync().get("ok") and (top / "a.md").read_text() == "edited while the relay had no cache\n"
            ),
            8,
            0.5,
        ), mount_status(box, "notes")
