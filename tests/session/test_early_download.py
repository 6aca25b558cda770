"""The mount's early download (memfs/session/early_fetch.py, SEMANTICS.md#d-first-download).

`memfs mount` forks the daemon right after its arguments are checked; the daemon forks a helper
that reads the session and counters and streams each store's snapshot into the state dir while
the daemon imports trio, httpx and pyfuse3, and the first download takes those snapshots instead
of asking again. Real `memfs serve`, real mounts, the fault proxy counting every request: the
service sees each request once; whatever fails early (a cut stream, an error answer) is asked
again the old way, and the mount comes up whole or fails with the old message.
"""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.mounts import state_db, store_files
from tests.support.sandbox import Sandbox, SandboxWorld, is_mounted
from tests.support.world import StoreSpec

pytestmark = pytest.mark.timeout(180)

# Several of the 1 MiB chunks the stream is parsed in (memfs/client/snapshot_stream.py SNAPSHOT_CHUNK_BYTES):
# a cut halfway comes after content was stored.
BIG_FILES = 120
BIG_SIZE = 24 * 1024


def _seed(rng: random.Random) -> dict[str, str]:
    words = ["alpha", "beta", "naïve", "résumé", "✓", "line\n", "tab\tend"]
    out = {}
    for i in range(BIG_FILES):
        text = " ".join(rng.choice(words) for _ in range(BIG_SIZE // 5))[:BIG_SIZE]
        out[f"/d{i % 5}/n-{i:03d}.md"] = text
    return out


def _slugs(box: Sandbox) -> dict[str, str]:
    with state_db(box.state_dir) as db:
        return dict(db.execute("SELECT store_id, slug FROM stores"))


def _log(box: Sandbox) -> str:
    return (box.state_dir / "memfs.log").read_text()


def _texts(top: Path) -> dict[str, str]:
    return {p: c.decode() for p, c in store_files(top).items()}


class Rig(SandboxWorld):
    """A big read_write store (several stream chunks) and a small read_only one, and the fault proxy
    (`front`) every sandbox mounts through."""

    def __init__(self, service, api: Api, tmp_path: Path):
        self.big_seed = _seed(random.Random(18))
        self.small_seed = {"/readme.md": "small store\n", "/x/y.md": "why\n"}
        specs = [
            StoreSpec("Big Notes", "read_write", self.big_seed),
            StoreSpec("Small Notes", "read_only", self.small_seed),
        ]
        super().__init__(service, api, tmp_path, specs)
        self.big, self.small = self.store_ids
        self.front = self.proxy()

    def box(self, name: str = "a", **env: str) -> Sandbox:
        return self.sandbox(name, base_url=self.front.url, **env)

    def requests(self, path_re: str) -> int:
        return self.front.count("GET", path_re)

    def assert_whole(self, box: Sandbox) -> None:
        slugs = _slugs(box)
        assert _texts(box.root / slugs[self.big]) == self.big_seed
        assert _texts(box.root / slugs[self.small]) == self.small_seed
        with state_db(box.state_dir) as db:
            base = dict(db.execute("SELECT path, sha FROM baseline WHERE store_id=?", (self.big,)))
            counters = dict(db.execute("SELECT store_id, counter FROM stores"))
        assert base == {p: hashlib.sha256(c.encode()).hexdigest() for p, c in self.big_seed.items()}
        assert all(c is not None and c > 0 for c in counters.values()), counters


@pytest.fixture
def rig(service, api, tmp_path):
    r = Rig(service, api, tmp_path)
    try:
        yield r
    finally:
        r.close()


def test_the_first_download_takes_the_early_snapshots_and_asks_nothing_twice(rig):
    box = rig.box()
    box.mount()
    rig.assert_whole(box)
    assert rig.requests(r"^/v1/sessions/") == 1
    assert rig.requests(r"^/v1/memory_store_counters") == 1
    assert rig.requests(rf"/memory_stores/{rig.big}/snapshot$") == 1
    assert rig.requests(rf"/memory_stores/{rig.small}/snapshot$") == 1
    assert rig.requests(r"/memories") == 0  # no listing, no fetch: the snapshots were whole
    assert "early download: 2 of 2 store(s) streamed while the mount started\n" in _log(box)
    # The helper is gone; the daemon holds the state dir alone. A local edit pushes as usual.
    slug = _slugs(box)[rig.big]
    (box.root / slug / "d0" / "n-000.md").write_text("edited\n")
    assert box.sync()["ok"]


def test_a_cut_early_stream_is_asked_again_and_the_store_comes_up_whole(rig):
    cut = rig.front.add("GET", rf"/memory_stores/{rig.big}/snapshot$", "reset_mid_body", times=1)
    box = rig.box()
    box.mount()
    assert cut.hits == 1
    rig.assert_whole(box)  # nothing of the cut stream but whole content by its sha, then all of it
    assert rig.requests(rf"/memory_stores/{rig.big}/snapshot$") == 2
    assert rig.requests(rf"/memory_stores/{rig.small}/snapshot$") == 1
    log = _log(box)
    assert "early download: 1 of 2 store(s) streamed" in log
    assert f"snapshot:{rig.big}:" in log


def test_an_early_session_read_that_fails_is_asked_again(rig):
    rig.front.add("GET", r"^/v1/sessions/", "status", code=503, times=1)
    box = rig.box()
    box.mount()  # the old path would fail here: a bare 503 is not retried
    rig.assert_whole(box)
    assert rig.requests(r"^/v1/sessions/") == 2
    assert "early download: 0 of 2 store(s)" in _log(box)


@pytest.mark.expected_log(r"cannot read session")
@pytest.mark.parametrize("code", [401, 503])
def test_a_session_read_that_keeps_failing_fails_the_mount_as_before(rig, code):
    """The same message with and without the early download (`MEMFS_EARLY_DOWNLOAD=off`)."""
    messages = {}
    for early, times in (("on", 2), ("off", 1)):
        rule = rig.front.add("GET", r"^/v1/sessions/", "status", code=code, times=times)
        box = rig.box(f"s{early}{code}", MEMFS_EARLY_DOWNLOAD=early)
        proc = box.mount(check=False)
        assert proc.returncode == 1 and rule.hits == times, (proc.stdout, proc.stderr)
        assert not is_mounted(box.root) and os.listdir(box.root) == []
        messages[early] = proc.stderr.replace(str(box.dir), "BOX")
    assert f"cannot read session {rig.session['id']}" in messages["on"]
    assert messages["on"] == messages["off"]


def test_a_second_mount_of_a_state_dir_streams_no_snapshot(rig):
    box = rig.box()
    box.mount()
    box.unmount()
    rig.front.reset_counts()
    box.mount()
    rig.assert_whole(box)
    assert rig.requests(r"/snapshot$") == 0  # the changes feed since the recorded counters
    assert rig.requests(r"^/v1/sessions/") == 1
    assert rig.requests(r"^/v1/memory_store_counters") == 1
    assert "not a first download" in _log(box).rsplit("early download:", 1)[1]


HOSTED_SEED = {"/a.md": "a\n", "/d/b.md": "b\n"}


@pytest.fixture
def hosted(tmp_path):
    """A store on `memfs serve --hosted-api` (no counters, no snapshots), and a proxy that counts
    what the sandboxes mounted through it send."""
    world = SandboxWorld.serving(tmp_path, [StoreSpec("Hosted Notes", seed=HOSTED_SEED)], hosted_api=True)
    try:
        yield world, world.proxy()
    finally:
        world.close()


@pytest.mark.timeout(120)
def test_a_hosted_service_without_snapshots_still_mounts(hosted):
    world, proxy = hosted
    box = world.sandbox("h", base_url=proxy.url)
    box.mount()
    assert _texts(box.root / "hosted-notes") == HOSTED_SEED
    assert proxy.count("GET", r"/snapshot$") == 0  # the helper stopped at the session
    assert proxy.count("GET", r"^/v1/sessions/") == 1
    # The session's answer offered no extensions: neither the helper nor the daemon asks the
    # counters (the hosted API's 404 would be a request and a round trip before the download).
    assert proxy.count("GET", r"^/v1/memory_store_counters") == 0
    assert "counters: the service has no counters (its session answer says none)" in _log(box)
    # Nor is the version feed asked: the listing says where it stands (sync/feed.py `listed_position`).
    assert proxy.count("GET", r"/memory_versions") == 0 and proxy.count("GET", r"/memories$") >= 1
    assert "early download: 0 of 1 store(s) streamed while the mount started" in _log(box)


@pytest.mark.timeout(120)
def test_a_daemon_that_reads_the_session_itself_asks_no_counters_of_the_hosted_api(hosted):
    # The helper's session read is refused once: the daemon reads the session itself, and its
    # answer (no `memfs-extensions`) tells the daemon too that there are no counters to ask.
    world, proxy = hosted
    refused = proxy.add("GET", r"^/v1/sessions/", "status", code=400, times=1)
    box = world.sandbox("h", base_url=proxy.url)
    box.mount()
    assert refused.hits == 1
    assert _texts(box.root / "hosted-notes") == HOSTED_SEED
    assert proxy.count("GET", r"^/v1/sessions/") == 2
    assert proxy.count("GET", r"^/v1/memory_store_counters") == 0
    assert box.status()["has_counter"] is False, box.status()


@pytest.mark.timeout(120)
def test_an_early_stream_that_never_answers_times_out_and_is_asked_again(rig):
    # The helper's request gets no answer: after the mount's request timeout (10 s) it gives up,
    # and the daemon downloads that store itself.
    held = rig.front.add("GET", rf"/memory_stores/{rig.big}/snapshot$", "blackhole", times=1)
    box = rig.box()
    box.mount()
    assert held.hits == 1
    rig.assert_whole(box)
    assert rig.requests(rf"/memory_stores/{rig.big}/snapshot$") == 2
    assert "early download: 1 of 2 store(s) streamed" in _log(box)
    assert "ReadTimeout" in _log(box), _log(box)


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.mark.timeout(120)
def test_the_helper_dies_with_a_killed_daemon(rig):
    """Nothing writes into the state dir after its daemon is gone (a later mount may hold it)."""
    import signal
    import subprocess
    import sys
    import time

    held = rig.front.add("GET", rf"/memory_stores/{rig.big}/snapshot$", "blackhole", times=1)
    box = rig.box()
    cli = subprocess.Popen(
        [sys.executable, "-m", "memfs", "mount", "--root", str(box.root), "--state-dir", str(box.state_dir)],
        env=box.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while held.hits == 0 and time.monotonic() < deadline:  # the helper's stream is held
            time.sleep(0.05)
        assert held.hits == 1
        daemon = box.daemon_pid()
        assert daemon is not None
        helpers = _children(daemon)
        assert len(helpers) == 1, helpers
        os.kill(daemon, signal.SIGKILL)
        deadline = time.monotonic() + 5  # well within the helper's own request timeout (10 s)
        while not _gone(helpers[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(helpers[0]), "the helper outlived its daemon"
        _out, err = cli.communicate(timeout=30)
        assert cli.returncode != 0 and "daemon exited" in err, err
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        rig.front.release()
