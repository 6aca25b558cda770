"""A memory whose path has a segment over 255 bytes: valid on the store, skipped by a mount.

The store service accepts such paths (the hosted API has no per-segment limit); the kernel cannot
carry such a name, so the mount leaves the memory on the store with one `not-materialised` notice,
materialises everything else, and never deletes or rewrites the memory.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_sync import RW, notices

pytestmark = pytest.mark.timeout(150)

LONG = "/long/" + "é" * 150 + ".md"  # one segment of 303 bytes


def test_a_memory_with_a_long_segment_is_skipped_once_and_kept(world, api):
    created = api.create(world.rw, LONG, "stays on the store\n")
    api.create(world.rw, "/long/short.md", "a neighbour\n")
    box = world.sandbox("a")
    box.mount()
    assert (box.root / RW / "long" / "short.md").read_text() == "a neighbour\n"
    assert sorted(p.name for p in (box.root / RW / "long").iterdir()) == ["short.md"]
    [n] = notices(box, "not-materialised")
    assert n["path"] == LONG
    (box.root / RW / "long" / "short.md").write_text("edited\n")
    box.sync()
    box.sync(force=True)
    assert len(notices(box, "not-materialised")) == 1  # noticed once, not on every sync
    held = api.memories(world.rw)
    assert held[LONG]["content"] == "stays on the store\n"
    assert held[LONG]["id"] == created["id"]
    assert held["/long/short.md"]["content"] == "edited\n"
    assert len(api.versions(world.rw, created["id"])) == 1
