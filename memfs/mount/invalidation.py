"""Kernel invalidations the core asks for, queued until the adapter can send them.

A FUSE handler must never call the kernel's invalidation functions (it would deadlock on the
inode it is answering for), so the core only queues them; `fuse_ops.py` drains the queue outside
handlers and reports how many reached the kernel. The sync engine waits for that before telling
anyone that remote changes are visible. Until then the kernel may hold a changed file's old pages
and size: an open in that moment (`stale`) has them dropped (the one invalidation made in a
handler, attributes only: fuse_ops `_opened`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import trio

from memfs.mount.nodes import DirLike, Node

# ("entry", parent_ino, name_bytes) | ("inode", ino, attr_only)
Invalidation = tuple[str, int, bytes | bool]


class InvalidationQueue:
    def __init__(self) -> None:
        self.items: deque[Invalidation] = deque()
        self.on_invalidate: Callable[[], None] | None = None  # set by the adapter while mounted
        self.pushed = 0
        self._done = 0
        self._event: trio.Event | None = None
        # ino -> the place in the queue (1-based, as `pushed` counts) of its newest inode
        # invalidation: the kernel may still hold that inode's old pages and size until
        # `_done` reaches it (`stale`)
        self._inode_at: dict[int, int] = {}

    def entry(self, parent: DirLike, name: str) -> None:
        self.items.append(("entry", parent.ino, name.encode()))
        self.pushed += 1

    def inode(self, node: Node) -> None:
        # Open files get attributes only (SEMANTICS.md#d-kernel-cache); mtime/size changes then drop their pages.
        self.items.append(("inode", node.ino, node.open_count > 0))
        self.pushed += 1
        self._inode_at[node.ino] = self.pushed

    def stale(self, ino: int) -> bool:
        """An invalidation of this inode is queued or on its way: the kernel may still hold its
        old pages and attributes (an open then has it drop them: `Filesystem.open`)."""
        at = self._inode_at.get(ino)
        return at is not None and at > self._done

    def wake(self) -> None:
        """Tell the adapter there is something to drain (no-op when nothing is mounted)."""
        if self.on_invalidate is not None:
            self.on_invalidate()

    def done(self, n: int) -> None:
        """The adapter reports that `n` queued invalidations reached the kernel."""
        self._done += n
        if self._done >= self.pushed:
            self._inode_at.clear()  # every one delivered (items are delivered in queue order)
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self, timeout: float = 5.0) -> bool:
        """Wait until every invalidation queued so far reached the kernel. True when done;
        immediately True when nothing is mounted (no adapter drains the queue)."""
        target = self.pushed
        with trio.move_on_after(timeout):
            while self._done < target and self.on_invalidate is not None:
                if self._event is None:
                    self._event = trio.Event()
                await self._event.wait()
        return self._done >= target or self.on_invalidate is None
