"""Each store's .sync-notices.log: the lines the sync and the failed-writer rule write for the
agent, kept in the state dir (the last NOTICES_KEPT) and shown as a virtual file in the store root.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from memfs.mount.invalidation import InvalidationQueue
from memfs.mount.state import State
from memfs.mount.tree import Tree


def rfc3339_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class NoticeLog:
    def __init__(self, tree: Tree, state: State, inval: InvalidationQueue, now: Callable[[], int]):
        self.tree, self.state, self.inval, self.now = tree, state, inval, now
        # Where the notices also go, whole, after each one (a store mounted at a path of its own
        # keeps them out of its folder: memfs/mount/single_store.py).
        self.mirror: Callable[[bytes], None] | None = None

    def add(self, store_id: str, kind: str, path: str, details: str = "") -> str:
        """Append a line to the store's .sync-notices.log (last 100 kept); returns the line."""
        st = self.tree.store(store_id)
        line = f"{rfc3339_now()} {kind} {path} {details}".rstrip()
        line = line.replace("\n", " ")
        self.state.add_notice(store_id, line)
        st.notices.append(line)
        st.render_notices()
        node = st.notices_node
        # A reader's cache goes by mtime (auto_inval_data): two notices within one clock tick
        # must still differ.
        node.mtime_ns = node.ctime_ns = max(self.now(), node.mtime_ns + 1)
        self.inval.inode(node)
        self.inval.wake()
        if self.mirror is not None:
            self.mirror(st.notices_blob)
        return line

    def lines(self, store_id: str) -> list[str]:
        return list(self.tree.store(store_id).notices)
