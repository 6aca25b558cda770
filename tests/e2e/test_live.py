"""Live mode (SEMANTICS.md#d-when): a held watch, pulls as soon as the watch tells (an open file
waits for its close: tests/e2e/test_close_to_open.py), debounced pushes, fallback.

Real mounts on a real `memfs serve`, never timed: every wait polls with a generous deadline, and
the mounts use a 300 s interval, so only live mode can explain a change arriving in time. The
tests watch a mount through `memfs status --json` (the control socket) where reading its files
would change what they look at (a read is a filesystem request: the mount is in use).
"""

from __future__ import annotations

import collections
import re
import subprocess
import time

import pytest

from tests.support.api import MEMORY_BETA
from tests.support.proxy import Proxy
from tests.support.sandbox import Sandbox, SandboxWorld
from tests.support.waits import wait_for
from tests.support.world import StoreSpec

pytestmark = pytest.mark.timeout(150)

RW = "work-notes"
LONG = "300"  # --sync-interval: an interval tick can explain nothing within these tests
WATCH = r"/memory_store_watch$"


def store_counter(api, store: str) -> int:
    resp = api.http.get("/v1/memory_store_counters", params={"ids": store}, headers=MEMORY_BETA)
    assert resp.status_code == 200, resp.text
    return int(resp.json()["data"][0]["counter"])


def rw_status(box: Sandbox) -> dict:
    return next(s for s in box.status()["stores"] if s["slug"] == RW)


def landed(box: Sandbox, counter: int) -> bool:
    s = rw_status(box)
    return s["counter"] is not None and s["counter"] >= counter


def mode(box: Sandbox) -> tuple[str, str]:
    st = box.status()
    return st["mode"], st["mode_reason"]


def test_a_write_in_a_is_readable_in_b_without_a_sync_in_b(world, api):
    a, b = world.sandbox("a"), world.sandbox("b")
    a.mount("--sync-interval", LONG)
    b.mount("--sync-interval", LONG)
    assert wait_for(lambda: mode(a)[0] == "live" and mode(b)[0] == "live"), (a.status(), b.status())
    text = b.memfs("status", "--root", str(b.root), check=True).stdout
    assert "sync: live: watching 2 store(s)" in text, text
    idle = b.memfs("sync", "--root", str(b.root), check=True).stdout  # nothing moved: nothing to do
    assert "nothing to do (live" in idle, idle
    for round_ in range(3):  # a write in A, a write in B, a remote delete: each lands unasked
        before = store_counter(api, world.rw)
        (a.root / RW / f"from-a-{round_}.md").write_text(f"written in A, round {round_}\n")
        # No `memfs sync` anywhere: A pushes after its debounce, B pulls once its watch wakes.
        assert wait_for(lambda before=before: store_counter(api, world.rw) > before), "A never pushed"
        after = store_counter(api, world.rw)
        assert wait_for(lambda after=after: landed(b, after)), rw_status(b)
        assert (b.root / RW / f"from-a-{round_}.md").read_text() == f"written in A, round {round_}\n"
    (b.root / RW / "profile.md").write_text("edited in B\n")
    assert wait_for(lambda: api.contents(world.rw)["/profile.md"] == "edited in B\n")
    counter = store_counter(api, world.rw)
    assert wait_for(lambda: landed(a, counter)), rw_status(a)
    assert (a.root / RW / "profile.md").read_text() == "edited in B\n"
    memory = api.memories(world.rw)["/notes/todo.md"]
    api.delete(world.rw, memory["id"])
    counter = store_counter(api, world.rw)
    assert wait_for(lambda: landed(a, counter) and landed(b, counter))
    assert (
        not (a.root / RW / "notes" / "todo.md").exists() and not (b.root / RW / "notes" / "todo.md").exists()
    )


def test_a_file_held_open_by_a_busy_command_is_pulled_at_the_next_sync(world, api):
    """Close-to-open (tests/e2e/test_close_to_open.py has the rest): a busy mount applies a
    remote change at once, but not to a file a command holds open; the next `memfs sync` (the
    next tool call) applies it all the same, so a tool call starts from the store's state."""
    box = world.sandbox("busy")
    box.mount("--sync-interval", LONG)
    assert wait_for(lambda: mode(box)[0] == "live")
    memory = api.memories(world.rw)["/profile.md"]
    # A command that holds profile.md open (fd 3) and keeps the mount busy (a read every 0.1 s).
    busy = subprocess.Popen(
        [
            "bash",
            "-c",
            f"exec 3< {box.root / RW / 'profile.md'}; "
            f"while true; do cat {box.root / RW / 'notes' / 'todo.md'} >/dev/null; sleep 0.1; done",
        ]
    )
    try:
        content = "changed while held open\n"
        api.update(world.rw, memory["id"], content=content)
        counter = store_counter(api, world.rw)
        # counter_seen stays once the watch has told (pull_pending would flip back on a pull)
        assert wait_for(lambda: (rw_status(box)["counter_seen"] or 0) >= counter, timeout=30), rw_status(box)
        time.sleep(1.0)  # not a timing assertion: the mount had every chance to pull, and must not
        assert not landed(box, counter) and rw_status(box)["pull_pending"], rw_status(box)
        result = box.sync(force=False, wait=False)  # the next tool call
        assert result["ran"] is True and result["requests"] == 1, result  # the changes, content in them
        assert landed(box, counter)
        assert (box.root / RW / "profile.md").read_text() == content
    finally:
        busy.kill()
        busy.wait()


def test_a_burst_of_closes_is_one_push_wave_after_the_last_close(world, api, service):
    with Proxy(service.base_url) as proxy:
        box = world.sandbox("burst", base_url=proxy.url)
        box.mount("--sync-interval", LONG)
        assert wait_for(lambda: mode(box)[0] == "live")
        offset = time.time() - time.monotonic()  # the proxy logs monotonic times, `date` gives wall time
        # An editor's save or a `tar x`: 12 closes 50 ms apart (longer in all than the debounce).
        out = subprocess.run(
            [
                "bash",
                "-c",
                f"cd {box.root / RW} && for i in $(seq -w 12); do "
                'echo "burst $i" > burst$i.md; sleep 0.05; done; date +%s.%N',
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        last_close = float(out.stdout.strip()) - offset
        assert wait_for(lambda: len([p for p in api.contents(world.rw) if p.startswith("/burst")]) == 12)
        # memfs serve has batch writes: the 12 creates go as one or a few batches, never before the
        # last close (one wave); a create sent alone would be a POST to /memories
        writes = [
            e.at
            for e in proxy.log
            if e.method == "POST" and (e.path.endswith("/memories") or e.path.endswith("/memory_batch"))
        ]
        assert 1 <= len(writes) <= 3, writes
        assert min(writes) >= last_close, "a push started before the burst ended"
        assert wait_for(lambda: rw_status(box)["staged"] == 0)


def test_an_idle_live_mount_holds_one_request(world, service):
    with Proxy(service.base_url) as proxy:
        box = world.sandbox("idle", base_url=proxy.url)
        box.mount("--sync-interval", "5")  # would poll 12 times a minute: live mode must not
        assert wait_for(lambda: mode(box)[0] == "live")
        time.sleep(1.5)  # settle: the mount's start is not the idle cost
        proxy.reset_counts()
        window = 12.0
        time.sleep(window)
        sent = [(e.method, e.path) for e in proxy.log]
        held = proxy.counts.in_flight
    # One held watch, renewed about once a minute: at most ceil(2 * window / 60) = 1 new request
    # in the window (a renewal), and the held one still in flight. Two ticks would have polled.
    assert len(sent) <= 1 and all(re.search(WATCH, p) for _m, p in sent), sent
    assert held == 1


def test_a_failed_watch_falls_back_to_polling_and_counts_as_an_attempt(world, api, service):
    with Proxy(service.base_url) as proxy:
        proxy.add("GET", WATCH, "reset", times=1)  # the first watch is killed
        box = world.sandbox("fallback", base_url=proxy.url)
        box.mount("--sync-interval", LONG)
        assert wait_for(lambda: proxy.count("GET", WATCH) >= 1)
        kind, reason = wait_for(
            lambda: mode(box)[0] == "polling" and "watch failed" in mode(box)[1] and mode(box)
        )
        assert kind == "polling" and "watch failed" in reason, reason
        text = box.memfs("status", "--root", str(box.root), check=True).stdout
        assert "sync: polling: the watch failed" in text, text
        # The failed watch was this interval's attempt (SEMANTICS.md#d-unreachable): a plain sync does not tick,
        # and the mount does not try the watch again on its own.
        again = box.sync(force=False, wait=False)
        assert again["ran"] is False and again["next_in"] > 200, again
        time.sleep(1.0)
        assert proxy.count("GET", WATCH) == 1
        # A good tick (here forced) brings the watch back: live again.
        assert box.sync()["ok"] is True
        assert wait_for(lambda: mode(box)[0] == "live"), box.status()
        memory = api.memories(world.rw)["/profile.md"]
        api.update(world.rw, memory["id"], content="seen live after the fallback\n")
        counter = store_counter(api, world.rw)
        assert wait_for(lambda: landed(box, counter)), rw_status(box)
        # A watch the service keeps failing (503): polling, one watch per good tick, no storm.
        proxy.add("GET", WATCH, "status", code=503)
        api.update(world.rw, memory["id"], content="wakes the held watch\n")
        assert wait_for(lambda: mode(box)[0] == "polling"), box.status()
        watches = proxy.count("GET", WATCH)
        time.sleep(1.0)
        assert proxy.count("GET", WATCH) == watches


def _requests(proxy: Proxy) -> collections.Counter:
    return collections.Counter((e.method, e.path) for e in proxy.log)


def test_against_the_hosted_api_the_requests_are_exactly_those_of_polling(tmp_path):
    seed = {f"/d{i % 2}/m{i}.md": f"memory {i}\n" for i in range(5)}
    world = SandboxWorld.serving(tmp_path, [StoreSpec("Work Notes", seed=seed)], hosted_api=True)
    try:
        logs = {}
        for live in ("auto", "off"):
            with Proxy(world.service.base_url) as proxy:
                box = world.sandbox(f"hosted-{live}", base_url=proxy.url)
                box.mount("--sync-interval", LONG, "--live", live)
                st = box.status()
                assert st["mode"] == "polling", st
                if live == "auto":
                    assert "no counter" in st["mode_reason"], st
                box.sync()
                (box.root / RW / f"from-{live}.md").write_text("local\n")
                box.sync()
                box.unmount()
                logs[live] = _requests(proxy)
        assert not any(re.search(WATCH, p) for _m, p in logs["auto"])
        # The same operations cost the same requests (bar the file each one created).
        strip = lambda c: collections.Counter({k: n for k, n in c.items() if "/memories/mem_" not in k[1]})  # noqa: E731
        assert strip(logs["auto"]) == strip(logs["off"]), (logs["auto"], logs["off"])
    finally:
        world.close()
