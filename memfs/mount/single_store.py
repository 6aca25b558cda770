"""One store mounted at the path itself (SEMANTICS.md#d-store-mount): the mount root *is* the
store's folder, holding only its memories.

A session's mount shows one folder per store under its root, each with the store's marker and
its `.sync-notices.log`. A store mounted on a person's machine sits where another program
expects a folder of its own (Claude Code's memory directory): nothing but memories may appear
there. So the tree built for one store is rearranged once, before the mount exists:

- the store's own directory takes the mount root's inode (the kernel's root), and the session
  layout's root (the folder of stores) is dropped;
- the marker and the notices file are taken out of the folder; the notices are mirrored into a
  file in the state dir instead (`NOTICES_FILE`), rewritten whenever a notice is added.

The two names stay reserved in the folder (a memory at either path is refused or not shown, as
in every store root), so a store mounted either way holds the same memories.
"""

from __future__ import annotations

import os
from pathlib import Path

from memfs.limits import MARKER_NAME, NOTICES_NAME
from memfs.mount.filesystem import Filesystem
from memfs.mount.replies import ROOT_INO

NOTICES_FILE = "sync-notices.log"  # in the state dir: the store's notices, as the session mount shows them


def notices_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / NOTICES_FILE


def mount_store_at_root(fs: Filesystem, state_dir: str | os.PathLike[str]) -> None:
    """Make `fs`'s only store the mount root; its notices go to the state dir's NOTICES_FILE."""
    tree = fs.tree
    if len(tree.stores) != 1:
        raise ValueError(f"one store mounts at a path of its own, not {len(tree.stores)}")
    (st,) = tree.stores.values()
    folder = st.root
    for name in (MARKER_NAME, NOTICES_NAME):
        node = folder.children.get(name)
        if node is not None:
            tree.detach(node)
            node.linked = False
            tree.maybe_free(node)
    # The folder of stores goes; the store's folder becomes the kernel's root inode.
    tree.detach(folder)
    del tree.nodes[tree.root.ino]
    del tree.nodes[folder.ino]
    folder.ino = ROOT_INO
    folder.parent = None
    folder.linked = True
    tree.nodes[ROOT_INO] = folder
    target = notices_path(state_dir)

    def mirror(blob: bytes) -> None:
        # Whole, or not at all: a reader never sees half a rewrite. Owner-only, as the state dir.
        part = target.with_name(target.name + ".part")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, blob)
        finally:
            os.close(fd)
        os.replace(part, target)

    fs.notice_log.mirror = mirror
    mirror(st.notices_blob)
