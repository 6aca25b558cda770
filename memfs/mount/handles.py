"""The open handles: file and directory handle numbers, what each is open on, and the questions
the other parts ask about them (who else writes this file, which new files a process holds).

One counter numbers both kinds, so a number is never reused while the mount lives (a stale
number is EBADF, never someone else's handle).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

from memfs.mount.nodes import DirHandle, DirLike, FileHandle, FileNode, MarkerNode, Node, NoticesNode
from memfs.mount.replies import FsError


class HandleTable:
    def __init__(self) -> None:
        self._files: dict[int, FileHandle] = {}
        self._dirs: dict[int, DirHandle] = {}
        self._next_fh = 1

    def _number(self) -> int:
        fh = self._next_fh
        self._next_fh += 1
        return fh

    # ---- file handles ------------------------------------------------------------------------

    def open_file(
        self, node: FileNode | MarkerNode | NoticesNode, writable: bool, pid: int = 0, append: bool = False
    ) -> FileHandle:
        h = FileHandle(self._number(), node, writable, pid, append)
        self._files[h.fh] = h
        node.open_count += 1
        return h

    def file(self, fh: int) -> FileHandle:
        """The open file handle `fh` (EBADF when there is none)."""
        h = self._files.get(fh)
        if h is None:
            raise FsError(errno.EBADF)
        return h

    def find(self, fh: int | None) -> FileHandle | None:
        return self._files.get(fh) if fh is not None else None

    def close_file(self, fh: int) -> FileHandle | None:
        """Forget handle `fh` (the node's open count goes down); None when it was not open."""
        h = self._files.pop(fh, None)
        if h is not None:
            h.node.open_count -= 1
        return h

    def on(self, node: Node) -> Iterator[FileHandle]:
        """Every open handle on `node`."""
        return (h for h in self._files.values() if h.node is node)

    def open_nodes(self) -> Iterator[FileNode | MarkerNode | NoticesNode]:
        """The node of every open file handle (a node open twice comes twice)."""
        return (h.node for h in self._files.values())

    def others_wrote(self, h: FileHandle) -> bool:
        """Another handle on `h`'s file has writes in the shared buffer that its close stages."""
        return any(o is not h and o.wrote for o in self.on(h.node))

    def creators_of(self, pid: int) -> Iterator[FileHandle]:
        """The handles of process `pid` that created their file, which is still unborn."""
        for o in self._files.values():
            n = o.node
            if o.pid == pid and isinstance(n, FileNode) and n.unborn and n.creator_fh == o.fh:
                yield o

    def drop_unflushed(self, node: FileNode) -> None:
        """The store's content replaced `node`'s: its handles' unflushed writes are gone."""
        for h in self.on(node):
            h.wrote = False

    # ---- directory handles -------------------------------------------------------------------

    def open_dir(self, node: DirLike) -> int:
        fh = self._number()
        self._dirs[fh] = DirHandle(fh, node)
        return fh

    def dir(self, fh: int) -> DirHandle:
        h = self._dirs.get(fh)
        if h is None:
            raise FsError(errno.EBADF)
        return h

    def close_dir(self, fh: int) -> None:
        self._dirs.pop(fh, None)
