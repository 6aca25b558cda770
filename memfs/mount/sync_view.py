"""The filesystem as the sync engine sees and changes it (the engine's `View` port): the
committed state of every file, and the store's changes applied to the tree (kernel caches
invalidated through the queue). Called on the trio thread, never from inside a FUSE handler.
`Filesystem` (filesystem.py) answers the port by handing each call to a `SyncView`.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
from collections.abc import Callable

from memfs.limits import RESERVED_NAMES, check_memory_path
from memfs.mount.handles import HandleTable
from memfs.mount.invalidation import InvalidationQueue
from memfs.mount.nodes import DirLike, DirNode, FileNode, Store
from memfs.mount.replies import FsError
from memfs.mount.staging import utf8_ok
from memfs.mount.state import State
from memfs.mount.tree import Tree
from memfs.mount.view_rows import FLAG_BAD_UTF8
from memfs.records import LocalFile

log = logging.getLogger("memfs.mount.sync_view")


class SyncView:
    def __init__(
        self,
        tree: Tree,
        state: State,
        handles: HandleTable,
        inval: InvalidationQueue,
        now: Callable[[], int],
    ):
        self.tree, self.state, self.handles, self.inval, self.now = tree, state, handles, inval, now

    def local_view(self, store_id: str) -> dict[str, LocalFile]:
        """path -> the committed state (last close/fsync) of every file in the view: what the
        sync may push. A file whose creating writer has not closed it is left out (or shows the
        file it replaced). Calling this is "the sync has seen every unlink so far": a failed
        writer's create after it no longer brings back a file unlinked before it."""
        st = self.tree.store(store_id)
        st.replaced.clear()
        out = {}
        for p, n in st.paths.items():
            if isinstance(n, FileNode):
                lf = self._local_file(p, n)
                if lf is not None:
                    out[p] = lf
        return out

    def local_file(self, store_id: str, path: str) -> LocalFile | None:
        """One entry of local_view() (without building all of it)."""
        n = self.tree.store(store_id).paths.get(path)
        if n is None or not isinstance(n, FileNode):
            return None
        return self._local_file(path, n)

    @staticmethod
    def _local_file(path: str, n: FileNode) -> LocalFile | None:
        if n.unborn:
            s = n.replaces
            return None if s is None else LocalFile(path, s.memory_id, s.sha, s.size, s.bad_utf8)
        return LocalFile(path, n.memory_id, n.sha, n.size, n.bad_utf8)

    def dirty_paths(self, store_id: str) -> set[str]:
        """Files with writes not yet staged by a close/fsync, and new files whose creating
        writer is still at work (unborn): the engine does not apply a pull over them."""
        st = self.tree.store(store_id)
        return {p for p, n in st.paths.items() if isinstance(n, FileNode) and (n.buf is not None or n.unborn)}

    def open_paths(self, store_id: str) -> set[str]:
        """Files of the store some process has open (close-to-open: a live pull leaves them as
        they are until they are closed, SEMANTICS.md#d-when). Asked of the handles, not the
        store's paths: a walk of 2,000 files for the few that are open would be the cost."""
        st = self.tree.store(store_id)
        return {
            n.path
            for n in self.handles.open_nodes()
            if isinstance(n, FileNode) and n.store is st and n.linked
        }

    def dir_paths(self, store_id: str) -> set[str]:
        """Every directory of the store's view (not the store root)."""
        st = self.tree.store(store_id)
        return {p for p, n in st.paths.items() if isinstance(n, DirNode)}

    def totals(self, store_id: str) -> tuple[int, int]:
        """(files, bytes) the store's view holds now."""
        st = self.tree.store(store_id)
        return st.files, st.bytes

    def _parse_path(self, st: Store, path: str) -> tuple[str, str]:
        check_memory_path(path)
        parent_path, _, name = path.rpartition("/")
        if parent_path == "" and name in RESERVED_NAMES:
            raise FsError(errno.EPERM, f"{path} is reserved in a store root")
        return parent_path, name

    def apply_remote(
        self, store_id: str, path: str, memory_id: str | None, sha: str, content: bytes, mtime_ns: int | None
    ) -> None:
        """Put the store's content at `path` (the engine has settled conflicts already).

        Creates parent directories; replaces a file there keeping its inode; drops any dirty
        buffer for it. Limits are not checked (SEMANTICS.md#d-over-limits is the engine's). `mtime_ns` is the
        memory's updated_at; None means now."""
        content = bytes(content)
        got = self.state.put_blob(content)
        if got != sha:
            raise ValueError(f"content of {path} has sha {got}, not {sha}")
        self._place_remote(store_id, path, memory_id, sha, len(content), not utf8_ok(content), mtime_ns)

    def apply_stored(
        self, store_id: str, path: str, memory_id: str | None, sha: str, size: int, mtime_ns: int | None
    ) -> None:
        """apply_remote for content the caller has already put into the state dir's blobs under
        its sha (a first download stores content as the snapshot streams, SEMANTICS.md#d-first-download):
        neither read back nor hashed again. The store's content is UTF-8 (the API's is a string)."""
        self._place_remote(store_id, path, memory_id, sha, size, False, mtime_ns)

    def apply_stored_many(
        self, store_id: str, items: list[tuple[str, str | None, str, int, int | None]]
    ) -> None:
        """apply_stored for many files at once, (path, memory_id, sha, size, mtime_ns) each: a
        first download's store. The same changes, their rows written with one statement per table
        in one transaction (a row each was a third of the download's main-thread time)."""
        files: list[tuple] = []
        dirs: list[tuple] = []
        with self.state.transaction():
            for path, memory_id, sha, size, mtime_ns in items:
                self._place_remote(store_id, path, memory_id, sha, size, False, mtime_ns, rows=(files, dirs))
            self.state.upsert_dirs(store_id, dirs)
            self.state.upsert_files(store_id, files)

    def _place_remote(
        self,
        store_id: str,
        path: str,
        memory_id: str | None,
        sha: str,
        size: int,
        bad: bool,
        mtime_ns: int | None,
        rows: tuple[list[tuple], list[tuple]] | None = None,
    ) -> None:
        """Place one file the store has; `rows` (files, dirs): collect its rows for the caller to
        write at once instead of writing them here."""
        st = self.tree.store(store_id)
        if mtime_ns is None:
            mtime_ns = self.now()
        parent_path, name = self._parse_path(st, path)
        created: list[DirNode] = []
        with self.state.transaction():
            parent = self.tree.ensure_dirs(st, parent_path, mtime_ns, created)
            node = parent.children.get(name)
            if node is not None and not isinstance(node, FileNode):
                raise FsError(errno.EISDIR, f"{path} is a directory here")
            mode = node.mode if node is not None else 0o644
            flags = FLAG_BAD_UTF8 if bad else 0
            if rows is not None:  # apply_stored_many writes them, all at once
                rows[1].extend((d.path, d.mtime_ns, d.mode) for d in created)
                rows[0].append((path, memory_id, sha, size, mtime_ns, mode, flags))
            else:
                for d in created:
                    self.state.upsert_dir(store_id, d.path, d.mtime_ns, d.mode)
                self.state.upsert_file(store_id, path, memory_id, sha, size, mtime_ns, mode, flags)
        if created:
            self.inval.entry(Tree.parent_of(created[0]), created[0].name)
        if node is None:
            node = self.tree.new_file(st, 0o644, mtime_ns)
            self.tree.attach(parent, node, name)
            st.files += 1
            st.bytes += size
            if not created:
                self.inval.entry(parent, name)  # a negative dentry may be cached
        else:
            st.bytes += size - self.tree.cur_size(node)
            node.buf = None
            self.inval.inode(node)
        node.memory_id, node.sha, node.size, node.bad_utf8 = memory_id, sha, size, bad
        node.unborn, node.replaces = False, None  # the store's content: nothing left to wait for
        node.mtime_ns = node.ctime_ns = mtime_ns
        self.handles.drop_unflushed(node)
        self.inval.wake()

    def move_path(self, store_id: str, old: str, new: str) -> None:
        """A rename made on the store, applied here (keeps the inode; replaces a file at `new`)."""
        st = self.tree.store(store_id)
        self._parse_path(st, old)
        new_parent_path, new_name = self._parse_path(st, new)
        node = st.paths.get(old)
        if node is None:
            raise FsError(errno.ENOENT, f"{old} is not in the view")
        if old == new:
            return
        created: list[DirNode] = []
        t = self.now()
        old_parent = Tree.parent_of(node)
        with self.state.transaction():
            parent = self.tree.ensure_dirs(st, new_parent_path, t, created)
            p: DirLike | None = parent
            while p is not None:
                if p is node:
                    raise FsError(errno.EINVAL, f"cannot move {old} into itself")
                p = p.parent
            dst = parent.children.get(new_name)
            if dst is not None and (not isinstance(dst, FileNode) or not isinstance(node, FileNode)):
                raise FsError(errno.EEXIST, f"{new} is occupied by a directory")
            for d in created:
                self.state.upsert_dir(store_id, d.path, d.mtime_ns, d.mode)
            if dst is not None:
                self.state.delete_file(store_id, dst.path)
            self.state.rename_prefix(store_id, old, new)
            if dst is not None:
                self._gone([dst])
                self.tree.unlink_node(dst)
            self.inval.entry(old_parent, node.name)
            self.tree.detach(node)
            self.tree.attach(parent, node, new_name)
            self._prune(st, old_parent)
        if created:
            self.inval.entry(Tree.parent_of(created[0]), created[0].name)
        else:
            self.inval.entry(parent, new_name)
        self.inval.wake()

    def remove_path(self, store_id: str, path: str) -> None:
        """A delete made on the store: gone from the view; directories it leaves empty go too."""
        st = self.tree.store(store_id)
        self._parse_path(st, path)
        node = st.paths.get(path)
        if node is None:
            return
        parent = Tree.parent_of(node)
        sid = store_id
        gone: list[FileNode] = []
        with self.state.transaction():
            if isinstance(node, FileNode):
                self.state.delete_file(sid, path)
                gone.append(node)
            else:
                for p, n in list(st.paths.items()):
                    if p == path or p.startswith(path + "/"):
                        (self.state.delete_file if isinstance(n, FileNode) else self.state.delete_dir)(sid, p)
                        if isinstance(n, FileNode):
                            gone.append(n)
            self.inval.entry(parent, node.name)
            self._gone(gone)
            self.tree.unlink_node(node)
            self._prune(st, parent)
        self.inval.wake()

    def _gone(self, files: list[FileNode]) -> None:
        """Files about to leave the view: an open descriptor's fstat() must say so (nlink 0) at
        once, not after the kernel's attribute timeout. The entry invalidation drops only the
        name (and the parent directory's attributes)."""
        for n in files:
            if n.lookups > 0:  # the kernel holds an inode for it
                self.inval.inode(n)

    def _prune(self, st: Store, d: DirLike) -> None:
        """Remove `d` and its ancestors while they are empty (not the store root)."""
        while isinstance(d, DirNode) and not d.children:
            parent = Tree.parent_of(d)
            self.state.delete_dir(st.info.store_id, d.path)
            self.inval.entry(parent, d.name)
            self.tree.unlink_node(d)
            d = parent

    def set_memory_id(self, store_id: str, path: str, memory_id: str | None) -> None:
        st = self.tree.store(store_id)
        node = st.paths.get(path)
        if node is None or not isinstance(node, FileNode):
            raise FsError(errno.ENOENT, f"{path} is not a file in the view")
        self.state.set_file_memory_id(store_id, path, memory_id)
        node.memory_id = memory_id
        if node.replaces is not None:  # what the sync sees of an unborn file
            s = node.replaces
            node.replaces = dataclasses.replace(s, memory_id=memory_id)

    def live_shas(self) -> set[str]:
        """Shas in use by the view (for State.gc_blobs(keep=…))."""
        shas = {n.sha for n in self.tree.nodes.values() if isinstance(n, FileNode)}
        shas |= {n.replaces.sha for n in self.tree.nodes.values() if isinstance(n, FileNode) and n.replaces}
        for st in self.tree.stores.values():
            shas |= {s.sha for s in st.replaced.values()}
        return shas
