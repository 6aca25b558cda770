"""The kinds of node in the mount's tree, one class each, and the open handles on them.

Every node has an inode number that never changes while the mount lives and is never reused.
Directories (the mount root, a store's directory, directories inside a store) keep their children
in insertion order with a per-directory sequence number that serves as the readdir cursor. A
file's committed content is a blob (by sha) in the state dir; while a handle has written and not
flushed, the file holds a bytearray buffer that every reader sees. The two reserved files of a
store root (the marker and the notices log) are virtual: their content is rendered in memory.

`Node` is the union of the kinds, so `isinstance` narrows it to what a kind has (a store, a path,
children, content).
"""

from __future__ import annotations

from collections import deque

from memfs.limits import NOTICES_KEPT
from memfs.mount.blobs import EMPTY_SHA
from memfs.mount.view_rows import FileState
from memfs.records import StoreInfo


class _Node:
    """What every kind has: identity, place in its directory, kernel references, times, mode."""

    __slots__ = ("ino", "parent", "name", "seq", "linked", "lookups", "open_count", "mode", "mtime_ns",
                 "ctime_ns", "atime_ns")  # fmt: skip

    def __init__(self, ino: int, mode: int, now: int):
        self.ino = ino
        self.parent: DirLike | None = None
        self.name = ""
        self.seq = 0
        self.linked = False
        self.lookups = 0
        self.open_count = 0
        self.mode = mode
        self.mtime_ns = self.ctime_ns = self.atime_ns = now


class _Directory(_Node):
    __slots__ = ("children", "next_seq", "path")

    def __init__(self, ino: int, mode: int, now: int):
        super().__init__(ino, mode, now)
        self.children: dict[str, Node] = {}
        self.next_seq = 3  # 1 and 2 are "." and ".."
        self.path = ""  # memory path ("/a/b"); "" for a store root and the mount root


class RootNode(_Directory):
    """The mount root: one directory per store, nothing else."""

    __slots__ = ()


class StoreRootNode(_Directory):
    """A store's own directory (fixed: its name, mode and existence follow the store)."""

    __slots__ = ("store",)

    def __init__(self, ino: int, store: Store, mode: int, now: int):
        super().__init__(ino, mode, now)
        self.store = store


class DirNode(_Directory):
    """A directory inside a store."""

    __slots__ = ("store",)

    def __init__(self, ino: int, store: Store, mode: int, now: int):
        super().__init__(ino, mode, now)
        self.store = store


class FileNode(_Node):
    """A memory file."""

    __slots__ = ("store", "path", "memory_id", "sha", "size", "buf", "bad_utf8", "bad_noticed", "clean_mtime",
                 "unborn", "replaces", "creator_fh", "closed")  # fmt: skip

    def __init__(self, ino: int, store: Store, mode: int, now: int):
        super().__init__(ino, mode, now)
        self.store = store
        self.path = ""
        self.memory_id: str | None = None
        self.sha = EMPTY_SHA
        self.size = 0
        self.buf: bytearray | None = None  # unflushed content (dirty) or data of an unlinked open file
        self.bad_utf8 = False
        self.bad_noticed: str | None = None
        self.clean_mtime = now  # mtime of the staged content while `buf` is dirty
        # Created by a writer that has not closed it yet: not in local_view() (nothing to push).
        self.unborn = False
        # An unborn file at a path that held a staged file a moment ago (unlink + create, as
        # `tar x` does; or renamed over one): what the sync keeps seeing there, and what the path
        # returns to if the writer fails.
        self.replaces: FileState | None = None
        self.creator_fh = 0  # the creating handle while it is open
        self.closed = False  # an unborn file's close returned: its row holds that content now


class MarkerNode(_Node):
    """.memfs-store in a store root: says which store this directory is."""

    __slots__ = ("store",)

    def __init__(self, ino: int, store: Store, mode: int, now: int):
        super().__init__(ino, mode, now)
        self.store = store


class NoticesNode(_Node):
    """.sync-notices.log in a store root: the last notices of the sync."""

    __slots__ = ("store",)

    def __init__(self, ino: int, store: Store, mode: int, now: int):
        super().__init__(ino, mode, now)
        self.store = store


Node = RootNode | StoreRootNode | DirNode | FileNode | MarkerNode | NoticesNode
DirLike = RootNode | StoreRootNode | DirNode
InStore = StoreRootNode | DirNode | FileNode  # what a memory path names ("" is the store root)
DIR_KINDS = (RootNode, StoreRootNode, DirNode)
VIRTUAL_KINDS = (MarkerNode, NoticesNode)


class Store:
    """One store's part of the tree, and its running totals."""

    __slots__ = ("info", "root", "paths", "files", "bytes", "notices", "notices_blob", "marker", "notices_node",
                 "replaced", "archived")  # fmt: skip

    def __init__(self, info: StoreInfo, root_ino: int, notices_ino: int, now: int):
        self.info = info
        self.root = StoreRootNode(root_ino, self, 0o755, now)
        self.paths: dict[str, InStore] = {"": self.root}  # memory path -> linked file/dir node
        self.files = 0
        self.bytes = 0
        self.notices: deque[str] = deque(maxlen=NOTICES_KEPT)
        self.notices_blob = b""
        self.marker = f"version 1\n{info.store_id}".encode()
        self.notices_node = NoticesNode(notices_ino, self, 0o444, now)
        # path -> the staged file unlinked there since the sync last looked (local_view()): a
        # create at that path by a writer that then fails returns the path to it.
        self.replaced: dict[str, FileState] = {}
        # The store was archived while mounted (SEMANTICS.md#d-archived): read-only from then on.
        self.archived = False

    @property
    def read_only(self) -> bool:
        """Nothing here may change: a read_only attachment, or a store archived while mounted."""
        return self.info.read_only or self.archived

    def render_notices(self) -> None:
        self.notices_blob = "".join(line + "\n" for line in self.notices).encode()


class FileHandle:
    __slots__ = ("fh", "node", "writable", "wrote", "changed", "failed", "noticed", "pid", "cause", "append")

    def __init__(
        self,
        fh: int,
        node: FileNode | MarkerNode | NoticesNode,
        writable: bool,
        pid: int = 0,
        append: bool = False,
    ):
        self.fh, self.node, self.writable, self.wrote, self.pid = fh, node, writable, False, pid
        # Opened with O_APPEND: every write goes to the file's end as the mount knows it, not to
        # the offset the kernel sends, which it takes from a size it may not have refreshed yet
        # after a pull grew the file (libfuse leaves O_APPEND to the filesystem without writeback
        # caching). Two sandboxes' `echo >> log.md` lost a line of each other's this way.
        self.append = append
        self.cause = ""  # failed with another file of the same process: that file's path
        # A write/truncate went through this handle (`wrote` alone: a create, to stage at close).
        self.changed = False
        self.failed = 0  # errno of this handle's failed write/truncate/fsync: it stages nothing, ever
        self.noticed = False


class DirHandle:
    __slots__ = ("fh", "node", "snapshot", "seqs")

    def __init__(self, fh: int, node: DirLike):
        self.fh, self.node = fh, node
        self.snapshot: list[tuple[int, str, Node]] = []
        self.seqs: list[int] = []
