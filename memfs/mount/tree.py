"""The mount's node tree: the inode table, each store's path map, and what a node shows (mode,
size, content, attributes). Built at start from the state dir's rows; the view lives in memory,
and content comes from the state dir's LRU cache or, on a miss, its blobs table.

The tree changes only in memory here; its users (filesystem.py, staging.py, failed_writers.py,
sync_view.py) write the matching rows.
"""

from __future__ import annotations

import errno
import logging
import stat

from memfs.limits import MARKER_NAME, NOTICES_NAME, RESERVED_NAMES, check_component_bytes
from memfs.mount.nodes import (
    DIR_KINDS,
    VIRTUAL_KINDS,
    DirLike,
    DirNode,
    FileNode,
    MarkerNode,
    Node,
    RootNode,
    Store,
)
from memfs.mount.replies import ROOT_INO, Attr, FsError
from memfs.mount.state import State
from memfs.records import StoreInfo

log = logging.getLogger("memfs.mount.tree")


class Tree:
    def __init__(self, state: State, uid: int, gid: int, now: int):
        self.state = state
        self.uid, self.gid = uid, gid
        self.nodes: dict[int, Node] = {}
        self.stores: dict[str, Store] = {}
        self._next_ino = ROOT_INO
        self.root = RootNode(self._ino(), 0o555, now)
        self.nodes[self.root.ino] = self.root
        self.root.linked = True

    def _ino(self) -> int:
        ino = self._next_ino
        self._next_ino += 1
        return ino

    def _register(self, node: Node) -> None:
        self.nodes[node.ino] = node

    def new_dir(self, st: Store, mode: int, now: int) -> DirNode:
        node = DirNode(self._ino(), st, mode, now)
        self._register(node)
        return node

    def new_file(self, st: Store, mode: int, now: int) -> FileNode:
        node = FileNode(self._ino(), st, mode, now)
        self._register(node)
        return node

    # ---- loading a store from the state dir --------------------------------------------------

    def load_store(self, info: StoreInfo, t: int) -> None:
        if info.store_id in self.stores:
            raise ValueError(f"store {info.store_id} given twice")
        if info.slug in self.root.children:
            raise ValueError(f"two stores share the directory name {info.slug!r}")
        check_component_bytes(info.slug.encode())
        root_ino, marker_ino, notices_ino = self._ino(), self._ino(), self._ino()
        st = Store(info, root_ino, notices_ino, t)
        self.stores[info.store_id] = st
        self._register(st.root)
        self.attach(self.root, st.root, info.slug)
        marker = MarkerNode(marker_ino, st, 0o444, t)
        self._register(marker)
        self.attach(st.root, marker, MARKER_NAME)
        st.notices.extend(self.state.notices(info.store_id))
        st.render_notices()
        self._register(st.notices_node)
        self.attach(st.root, st.notices_node, NOTICES_NAME)
        sid = info.store_id
        for drow in self.state.load_dirs(sid).values():
            try:
                d = self.ensure_dirs(st, drow.path, t)
            except FsError:
                log.warning("store %s: directory %s clashes with a file; not shown", sid, drow.path)
                continue
            d.mtime_ns, d.mode = drow.mtime_ns, drow.mode & 0o7777
        for path, row in self.state.load_files(sid).items():
            if row.unborn:
                # Created by a writer that never closed it (the mount stopped first): dropped,
                # as a writer that fails is undone. Nothing whose close() returned is lost.
                log.warning("store %s: %s was never closed by its writer; dropped", sid, path)
                self.state.delete_file(sid, path)
                continue
            parent_path, _, name = path.rpartition("/")
            if parent_path == "" and name in RESERVED_NAMES:
                log.warning("store %s: a file at reserved path %s is not shown", sid, path)
                continue
            try:
                parent = self.ensure_dirs(st, parent_path, t)
            except FsError:
                log.warning("store %s: file %s clashes with a file on its path; not shown", sid, path)
                continue
            if name in parent.children:
                log.warning("store %s: file %s clashes with a directory; not shown", sid, path)
                continue
            node = self.new_file(st, row.mode & 0o7777, row.mtime_ns)
            node.memory_id, node.sha, node.size = row.memory_id, row.sha, row.size
            node.bad_utf8 = row.bad_utf8
            node.bad_noticed = row.sha if node.bad_utf8 else None
            self.attach(parent, node, name)
            st.files += 1
            st.bytes += row.size

    def ensure_dirs(self, st: Store, path: str, t: int, created: list[DirNode] | None = None) -> DirLike:
        """The directory node at `path`, creating missing ones (in memory only)."""
        node = st.paths.get(path)
        if node is not None:
            if isinstance(node, FileNode):
                raise FsError(errno.ENOTDIR)
            return node
        parent_path, _, name = path.rpartition("/")
        parent = self.ensure_dirs(st, parent_path, t, created)
        if parent is st.root and name in RESERVED_NAMES:
            raise FsError(errno.EPERM)
        d = self.new_dir(st, 0o755, t)
        self.attach(parent, d, name)
        if created is not None:
            created.append(d)
        return d

    # ---- linking -----------------------------------------------------------------------------

    def attach(self, parent: DirLike, node: Node, name: str) -> None:
        node.parent, node.name, node.linked = parent, name, True
        node.seq = parent.next_seq
        parent.next_seq += 1
        parent.children[name] = node
        if isinstance(node, (FileNode, DirNode)):
            self._set_path(node, f"{parent.path}/{name}")

    def _set_path(self, node: FileNode | DirNode, path: str) -> None:
        st = node.store
        if node.path and st.paths.get(node.path) is node:
            del st.paths[node.path]
        node.path = path
        st.paths[path] = node
        st.replaced.pop(path, None)  # something else is there now
        if isinstance(node, DirNode):
            for name, child in node.children.items():
                if isinstance(child, (FileNode, DirNode)):
                    self._set_path(child, f"{path}/{name}")

    def detach(self, node: Node) -> None:
        """Take a node out of its directory (and a directory's subtree out of the path map)."""
        parent = node.parent
        if parent is not None and parent.children.get(node.name) is node:
            del parent.children[node.name]
        if isinstance(node, (FileNode, DirNode)) and node.store.paths.get(node.path) is node:
            del node.store.paths[node.path]

    def unlink_node(self, node: Node) -> None:
        """Remove a node from the view for good (file or directory subtree)."""
        self.detach(node)
        node.linked = False
        if isinstance(node, FileNode):
            node.store.files -= 1
            node.store.bytes -= self.cur_size(node)
            if node.open_count and node.buf is None:
                # Open handles keep reading this data after the blob may be collected.
                node.buf = bytearray(self.committed(node))
        elif isinstance(node, DirNode):
            for child in list(node.children.values()):
                self.unlink_node(child)
        self.maybe_free(node)

    def maybe_free(self, node: Node) -> None:
        if not node.linked and node.lookups <= 0 and node.open_count <= 0:
            self.nodes.pop(node.ino, None)
            if isinstance(node, FileNode):
                node.buf = None

    # ---- finding nodes -----------------------------------------------------------------------

    def node(self, ino: int) -> Node:
        node = self.nodes.get(ino)
        if node is None:
            raise FsError(errno.ENOENT)
        return node

    def dir(self, ino: int) -> DirLike:
        node = self.node(ino)
        if not isinstance(node, DIR_KINDS):
            raise FsError(errno.ENOTDIR)
        return node

    @staticmethod
    def child(parent: DirLike, raw: bytes) -> Node:
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise FsError(errno.ENOENT) from None
        node = parent.children.get(name)
        if node is None:
            raise FsError(errno.ENOENT)
        return node

    @staticmethod
    def parent_of(node: Node) -> DirLike:
        """The directory of a node that has been attached (every node but the mount root)."""
        if node.parent is None:
            raise AssertionError(f"inode {node.ino} was never attached")
        return node.parent

    def store(self, store_id: str) -> Store:
        st = self.stores.get(store_id)
        if st is None:
            raise KeyError(store_id)
        return st

    # ---- what a node shows -------------------------------------------------------------------

    def cur_size(self, node: Node) -> int:
        if isinstance(node, FileNode):
            return len(node.buf) if node.buf is not None else node.size
        if isinstance(node, MarkerNode):
            return len(node.store.marker)
        if isinstance(node, VIRTUAL_KINDS):
            return len(node.store.notices_blob)
        return 0

    def committed(self, node: FileNode) -> bytes:
        try:
            return self.state.get_blob(node.sha)
        except FileNotFoundError:
            log.error("blob %s of %s is missing from the state dir", node.sha, node.path)
            raise FsError(errno.EIO) from None

    def content(self, node: Node) -> bytes | bytearray:
        if isinstance(node, FileNode):
            return node.buf if node.buf is not None else self.committed(node)
        if isinstance(node, MarkerNode):
            return node.store.marker
        if isinstance(node, VIRTUAL_KINDS):
            return node.store.notices_blob
        raise FsError(errno.EISDIR)

    @staticmethod
    def mode(node: Node) -> int:
        ro = isinstance(node, RootNode) or node.store.read_only
        if isinstance(node, DIR_KINDS):
            return stat.S_IFDIR | (0o555 if ro else node.mode)
        return stat.S_IFREG | (0o444 if ro or isinstance(node, VIRTUAL_KINDS) else node.mode)

    def guards(self, d: DirLike) -> bool:
        """Whether the names in `d` must not be cached (it does not let everyone search it)."""
        return self.mode(d) & 0o111 != 0o111

    def attr(self, node: Node, guarded: bool | None = None) -> Attr:
        """`guarded`: `guards(node.parent)` when the caller has it already (a listing asks it
        once for all the entries of one directory, not once per entry)."""
        if guarded is None:
            guarded = node.parent is not None and self.guards(node.parent)
        return Attr(
            node.ino,
            self.mode(node),
            2 if isinstance(node, DIR_KINDS) else 1 if node.linked else 0,
            self.cur_size(node),
            self.uid,
            self.gid,
            node.atime_ns,
            node.mtime_ns,
            node.ctime_ns,
            guarded,
        )
