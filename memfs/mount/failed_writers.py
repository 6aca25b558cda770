"""The failed-writer rule (docs/SEMANTICS.md): a handle whose write or truncate failed (EFBIG,
ENOSPC) or whose fsync found content that is not UTF-8 stages nothing, ever; at its close the file
returns to its last staged state, and one notice says so.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from memfs.mount.handles import HandleTable
from memfs.mount.invalidation import InvalidationQueue
from memfs.mount.nodes import FileHandle, FileNode, Store
from memfs.mount.notices import NoticeLog
from memfs.mount.state import State
from memfs.mount.tree import Tree


class FailedWriters:
    def __init__(
        self,
        tree: Tree,
        state: State,
        handles: HandleTable,
        inval: InvalidationQueue,
        notices: NoticeLog,
        now: Callable[[], int],
    ):
        self.tree, self.state, self.handles = tree, state, handles
        self.inval, self.notices, self.now = inval, notices, now

    def fail(self, h: FileHandle, err: int) -> None:
        """Handle `h` failed: it stages nothing from now on. The failure is its process's: a new
        file that the same process created and still holds open goes with it (sqlite: the
        journal's fsync fails, so the empty database file it created is not kept either)."""
        if h.failed:
            return
        h.failed = err
        if not h.pid or not isinstance(h.node, FileNode):
            return
        for o in self.handles.creators_of(h.pid):
            if o is not h and not o.failed:
                o.failed, o.cause = err, h.node.path

    def give_up(self, h: FileHandle) -> None:
        """The close of a failed handle: stage nothing; return the file to its last staged state
        unless another handle still has unstaged writes in the shared buffer (its close stages
        them). One notice per handle, when the file is still in the view."""
        h.wrote = False
        node = h.node
        first, h.noticed = not h.noticed, True
        if not isinstance(node, FileNode) or not node.linked:
            return  # unlinked while open: nothing of it can be staged anyway
        sid = node.store.info.store_id
        why = self._why(h)
        if self.handles.others_wrote(h):
            if first:
                self.notices.add(
                    sid,
                    "write-failed",
                    node.path,
                    f"{why}; nothing of that writer was saved, but another writer still has the file "
                    "open and its close saves what the file holds then",
                )
            return
        path = node.path  # (before an unborn file leaves the view)
        outcome = self._undo(node, node.store)
        if first:
            self.notices.add(sid, "write-failed", path, f"{why}; nothing of that writer was saved: {outcome}")
        self.inval.wake()

    @staticmethod
    def _why(h: FileHandle) -> str:
        name = errno.errorcode.get(h.failed, h.failed)
        if h.cause:
            return f"its writer's write to {h.cause} failed ({name})"
        return f"a write failed ({name}: {os.strerror(h.failed)})"

    def _undo(self, node: FileNode, st: Store) -> str:
        """Return `node` to its last staged state (a new file of its own: gone); says what happened."""
        sid, path, parent, s = st.info.store_id, node.path, Tree.parent_of(node), node.replaces
        if node.buf is not None:
            st.bytes += node.size - len(node.buf)
            node.buf = None
            node.mtime_ns = node.clean_mtime
        if node.unborn and s is None:
            with self.state.transaction():
                self.state.delete_file(sid, path)
            self.inval.entry(parent, node.name)
            self.tree.unlink_node(node)
            parent.mtime_ns = parent.ctime_ns = self.now()
            return "the file it created was removed"
        if node.unborn and s is not None:
            st.bytes += s.size - node.size
            node.memory_id, node.sha, node.size, node.bad_utf8 = s.memory_id, s.sha, s.size, s.bad_utf8
            node.mode, node.mtime_ns = s.mode, s.mtime_ns
            node.unborn, node.replaces = False, None
            self.state.upsert_file(sid, path, s.memory_id, s.sha, s.size, s.mtime_ns, s.mode, s.flags)
        self.inval.inode(node)
        return "the file keeps its previous content"
