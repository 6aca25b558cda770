"""The first download (SEMANTICS.md#d-first-download): each store's snapshot is stored as it streams,
and a store is shown only once its stream has ended whole.

Real `memfs serve`, real mounts, the fault proxy between them: a snapshot stream cut halfway leaves
content of the cut store in the state dir's blobs (it was stored while the stream arrived) but no
file, baseline or counter of it, and nothing mounted; the retry then shows every store whole.
"""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest

from tests.support.mounts import state_db, store_files
from tests.support.sandbox import Sandbox, SandboxWorld, is_mounted
from tests.support.world import StoreSpec

pytestmark = pytest.mark.timeout(180)

# Big enough that half of the stream is several of the client's 1 MiB chunks (memfs/client/snapshot_stream.py
# SNAPSHOT_CHUNK_BYTES): the cut comes after content was already handed to the worker thread.
BIG_FILES = 160
BIG_SIZE = 24 * 1024


def _text(rng: random.Random, n: int) -> str:
    words = ["alpha", "beta", "gamma", "delta", "naïve", "résumé", "✓", "line\n", "tab\tend"]
    out: list[str] = []
    size = 0
    while size < n:
        w = rng.choice(words)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


def _rows(state_dir: Path, table: str, store_id: str) -> int:
    with state_db(state_dir) as db:
        return db.execute(f"SELECT COUNT(*) FROM {table} WHERE store_id=?", (store_id,)).fetchone()[0]


@pytest.fixture
def fd_world(service, api, tmp_path):
    """A big read_write store and a small read_only one, a session over both."""
    rng = random.Random(18)
    big_seed = {f"/d{i % 7}/sub{i % 3}/note-{i:03d}.md": _text(rng, BIG_SIZE) for i in range(BIG_FILES)}
    small_seed = {"/readme.md": "small store\n", "/x/y.md": "why\n"}
    specs = [StoreSpec("Big Notes", seed=big_seed), StoreSpec("Small Notes", "read_only", small_seed)]
    world = SandboxWorld(service, api, tmp_path, specs)
    try:
        yield world
    finally:
        world.close()


@pytest.fixture
def stores(fd_world):
    (big, big_spec), (small, small_spec) = fd_world.made()
    return big, small, dict(big_spec.seed), dict(small_spec.seed), fd_world.session


@pytest.fixture
def through_proxy(fd_world):
    """A sandbox that mounts through the fault proxy (its faults cleared before the box closes)."""
    proxy = fd_world.proxy()
    return fd_world.sandbox("fd", base_url=proxy.url), proxy


def _slugs(box: Sandbox) -> dict[str, str]:
    with state_db(box.state_dir) as db:
        return dict(db.execute("SELECT store_id, slug FROM stores"))


@pytest.mark.expected_log(r"cannot download the memory stores")
def test_a_cut_snapshot_shows_nothing_and_the_retry_starts_clean(stores, through_proxy):
    big, small, big_seed, small_seed, _session = stores
    box, proxy = through_proxy
    # Twice: the mount's early download streams it first (memfs/session/early_fetch.py), and a
    # cut there is asked again the old way (tests/session/test_early_download.py); both cut.
    cut = proxy.add("GET", rf"/memory_stores/{big}/snapshot$", "reset_mid_body", times=2)

    proc = box.mount(check=False)
    assert cut.hits == 2
    assert proc.returncode != 0, proc.stdout
    assert "cannot download the memory stores" in proc.stderr, proc.stderr
    assert not is_mounted(box.root) and os.listdir(box.root) == []
    # Content of the cut store reached the state dir while its stream arrived (the download
    # stores as it streams) ...
    with state_db(box.state_dir) as db:
        stored = {sha for (sha,) in db.execute("SELECT sha FROM blobs")}
    big_shas = {hashlib.sha256(c.encode()).hexdigest() for c in big_seed.values()}
    assert 0 < len(stored & big_shas) < len(big_shas), len(stored & big_shas)
    # ... but none of it is a file, a baseline entry or a counter: no half store anywhere.
    for table in ("files", "dirs", "baseline"):
        assert _rows(box.state_dir, table, big) == 0, table
    with state_db(box.state_dir) as db:
        (counter,) = db.execute("SELECT counter FROM stores WHERE store_id=?", (big,)).fetchone()
    assert counter is None
    # The other store is untouched or whole, never partial.
    assert _rows(box.state_dir, "files", small) in (0, len(small_seed))

    # The retry (the stream whole now) shows both stores exactly as the service has them.
    box.mount()
    slugs = _slugs(box)
    assert store_files(box.root / slugs[big]) == {p: c.encode() for p, c in big_seed.items()}
    assert store_files(box.root / slugs[small]) == {p: c.encode() for p, c in small_seed.items()}
    assert _rows(box.state_dir, "files", big) == len(big_seed)
    assert _rows(box.state_dir, "baseline", big) == len(big_seed)


def test_a_streamed_download_matches_the_store_and_its_sizes(stores, through_proxy):
    """Every memory of a multi-chunk snapshot lands as its file: content, size, the baseline's sha."""
    big, small, big_seed, small_seed, _session = stores
    box, _proxy = through_proxy
    box.mount()
    slugs = _slugs(box)
    top = box.root / slugs[big]
    assert store_files(top) == {p: c.encode() for p, c in big_seed.items()}
    for path, content in list(big_seed.items())[:10]:
        assert (top / path.lstrip("/")).stat().st_size == len(content.encode())
    with state_db(box.state_dir) as db:
        base = dict(db.execute("SELECT path, sha FROM baseline WHERE store_id=?", (big,)))
    assert base == {p: hashlib.sha256(c.encode()).hexdigest() for p, c in big_seed.items()}
    # A local edit after the streamed download pushes as usual (the blob is really there).
    (top / "d0/sub0/note-000.md").write_text("edited\n")
    assert box.sync()["ok"]
