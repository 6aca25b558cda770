"""Kernel-free filesystem core (DESIGN.md "Filesystem core").

Every FUSE operation is a method taking and returning plain Python values and raising
`FsError(errno)`; `fuse_ops.py` only converts types. No pyfuse3 here, so every semantic can be
tested without a kernel.

Model: every node (root, store dirs, directories, files, the two reserved files) has an inode
number that never changes while the mount lives and is never reused. Directories keep their
children in insertion order with a per-directory sequence number that serves as the readdir
cursor. A file's committed content is a blob (by sha) in the State; while a handle has written and
not flushed, the inode holds a bytearray buffer that every reader sees. `flush`/`fsync` stage
(blob, then the `files` row in one commit). Namespace changes stage at once. Read paths never
touch SQLite: the view lives in memory, content comes from the State's LRU or the blob file.

Failed writers (docs/SEMANTICS.md): a handle whose write or truncate failed (EFBIG, ENOSPC) or
whose fsync found content that is not UTF-8 stages nothing, ever; at its close the file returns
to its last staged state. A file created by a writer that has not closed it yet is "unborn": it
is in the view for the agent but not in `local_view()` (what the sync may push), and a restart
drops it (its writer never closed it).
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import stat
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import trio

from memfs.limits import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_FILES,
    MARKER_NAME,
    MAX_COMPONENT_BYTES,
    MAX_CONTENT_BYTES,
    MAX_PATH_BYTES,
    MAX_SEGMENTS,
    NOTICES_KEPT,
    NOTICES_NAME,
    RESERVED_NAMES,
    PathError,
    check_component_bytes,
    check_memory_path,
)
from memfs.mount.access import Caller, W, X, allowed, may_change_owner_fields, sticky_allows
from memfs.mount.blobs import EMPTY_SHA
from memfs.mount.state import State
from memfs.mount.view_rows import FLAG_BAD_UTF8, FLAG_UNBORN
from memfs.records import LocalFile, StoreInfo

log = logging.getLogger("memfs.mount.core")

ROOT_INO = 1
RENAME_NOREPLACE = 1  # linux/fs.h values (what pyfuse3 passes through)
RENAME_EXCHANGE = 2
BLOCK_SIZE = 4096

_ROOT, _STORE, _DIR, _FILE, _MARKER, _NOTICES = range(6)
_DIR_KINDS = (_ROOT, _STORE, _DIR)
_VIRTUAL = (_MARKER, _NOTICES)


class FsError(OSError):
    """An operation fails with this errno (the adapter turns it into FUSEError)."""

    def __init__(self, err: int, message: str = ""):
        super().__init__(err, message or os.strerror(err))


@dataclass(slots=True)
class Attr:
    ino: int
    mode: int
    nlink: int
    size: int
    uid: int
    gid: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    # Its directory does not let everyone search it: the kernel must ask again on every path walk
    # (entry timeout 0), since without `default_permissions` it never checks a cached name itself.
    guarded: bool = False

    @property
    def blocks(self) -> int:
        return (self.size + 511) // 512


@dataclass(frozen=True, slots=True)
class DirEntry:
    name: bytes
    attr: Attr
    cursor: int  # pass back as `start` to continue after this entry
    is_dot: bool  # "." / "..": the kernel's lookup count must not be bumped for these


@dataclass(frozen=True, slots=True)
class OpenReply:
    fh: int
    keep_cache: bool
    direct_io: bool = False


@dataclass(frozen=True, slots=True)
class _Staged:
    """A file's last staged state, kept so that a failed writer can return the path to it."""

    memory_id: str | None
    sha: str
    size: int
    mode: int
    mtime_ns: int
    bad_utf8: bool


@dataclass(frozen=True, slots=True)
class StatFs:
    bsize: int
    blocks: int
    bfree: int
    files: int
    ffree: int
    namemax: int


class _Node:
    __slots__ = (
        "ino", "kind", "store", "parent", "name", "path", "seq", "children", "next_seq", "linked",
        "lookups", "open_count", "memory_id", "sha", "size", "buf", "bad_utf8", "bad_noticed",
        "mode", "mtime_ns", "ctime_ns", "atime_ns", "clean_mtime", "unborn", "replaces", "creator_fh",
        "closed",
    )  # fmt: skip

    def __init__(self, ino: int, kind: int, store: _Store | None, mode: int, now: int):
        self.ino = ino
        self.kind = kind
        self.store = store
        self.parent: _Node | None = None
        self.name = ""
        self.path = ""  # memory path ("/a/b"); "" for a store root and the mount root
        self.seq = 0
        self.children: dict[str, _Node] | None = {} if kind in _DIR_KINDS else None
        self.next_seq = 3  # 1 and 2 are "." and ".."
        self.linked = False
        self.lookups = 0
        self.open_count = 0
        self.memory_id: str | None = None
        self.sha = EMPTY_SHA
        self.size = 0
        self.buf: bytearray | None = None  # unflushed content (dirty) or data of an unlinked open file
        self.bad_utf8 = False
        self.bad_noticed: str | None = None
        self.mode = mode
        self.mtime_ns = self.ctime_ns = self.atime_ns = now
        self.clean_mtime = now  # mtime of the staged content while `buf` is dirty
        # Created by a writer that has not closed it yet: not in local_view() (nothing to push).
        self.unborn = False
        # An unborn file at a path that held a staged file a moment ago (unlink + create, as
        # `tar x` does; or renamed over one): what the sync keeps seeing there, and what the path
        # returns to if the writer fails.
        self.replaces: _Staged | None = None
        self.creator_fh = 0  # the creating handle while it is open
        self.closed = False  # an unborn file's close returned: its row holds that content now


class _Store:
    __slots__ = (
        "info",
        "root",
        "paths",
        "files",
        "bytes",
        "notices",
        "notices_blob",
        "marker",
        "notices_node",
        "replaced",
    )

    def __init__(self, info: StoreInfo):
        self.info = info
        self.root: _Node = None  # type: ignore[assignment]
        self.paths: dict[str, _Node] = {}  # memory path -> linked file/dir node
        self.files = 0
        self.bytes = 0
        self.notices: deque[str] = deque(maxlen=NOTICES_KEPT)
        self.notices_blob = b""
        self.marker = f"version 1\n{info.store_id}".encode()
        self.notices_node: _Node = None  # type: ignore[assignment]
        # path -> the staged file unlinked there since the sync last looked (local_view()): a
        # create at that path by a writer that then fails returns the path to it.
        self.replaced: dict[str, _Staged] = {}


class _Handle:
    __slots__ = ("fh", "node", "writable", "wrote", "changed", "failed", "noticed", "pid", "cause")

    def __init__(self, fh: int, node: _Node, writable: bool, pid: int = 0):
        self.fh, self.node, self.writable, self.wrote, self.pid = fh, node, writable, False, pid
        self.cause = ""  # failed with another file of the same process: that file's path
        # A write/truncate went through this handle (`wrote` alone: a create, to stage at close).
        self.changed = False
        self.failed = 0  # errno of this handle's failed write/truncate/fsync: it stages nothing, ever
        self.noticed = False


class _DirHandle:
    __slots__ = ("fh", "node", "snapshot", "seqs")

    def __init__(self, fh: int, node: _Node):
        self.fh, self.node = fh, node
        self.snapshot: list[tuple[int, str, _Node]] = []
        self.seqs: list[int] = []


def _utf8_ok(data: bytes | bytearray) -> bool:
    try:
        bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def rfc3339_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Filesystem:
    """The mount's view of its stores. See the module docstring and DESIGN.md."""

    def __init__(
        self,
        state: State,
        stores: Iterable[StoreInfo],
        *,
        max_files: int = DEFAULT_MAX_FILES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        uid: int | None = None,
        gid: int | None = None,
        now: Callable[[], int] = time.time_ns,
    ):
        self.state = state
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.now = now
        self.frozen = False
        # Kernel invalidations requested by the sync-facing API; fuse_ops drains them outside
        # handlers. Items: ("entry", parent_ino, name_bytes) | ("inode", ino, attr_only).
        self.invalidations: deque[tuple] = deque()
        self.on_invalidate: Callable[[], None] | None = None  # set by the adapter while mounted
        self.last_activity = 0.0  # time.monotonic() of the last FUSE request (set by the adapter)
        self._inval_pushed = 0
        self._inval_done = 0
        self._inval_event: trio.Event | None = None
        self._nodes: dict[int, _Node] = {}
        self._next_ino = ROOT_INO
        self._handles: dict[int, _Handle] = {}
        self._dir_handles: dict[int, _DirHandle] = {}
        self._next_fh = 1
        self._stores: dict[str, _Store] = {}
        self.state.put_blob(b"")  # every new file starts as the empty blob
        t = self.now()
        self.root = self._new_node(_ROOT, None, 0o555, t)
        self.root.linked = True
        for info in stores:
            self._load_store(info, t)

    # ---- construction ----------------------------------------------------------------------

    def _new_node(self, kind: int, store: _Store | None, mode: int, now: int) -> _Node:
        ino = self._next_ino
        self._next_ino += 1
        node = _Node(ino, kind, store, mode, now)
        self._nodes[ino] = node
        return node

    def _load_store(self, info: StoreInfo, t: int) -> None:
        if info.store_id in self._stores:
            raise ValueError(f"store {info.store_id} given twice")
        if info.slug in self.root.children:  # type: ignore[operator]
            raise ValueError(f"two stores share the directory name {info.slug!r}")
        check_component_bytes(info.slug.encode())
        st = _Store(info)
        self._stores[info.store_id] = st
        st.root = self._new_node(_STORE, st, 0o755, t)
        self._attach(self.root, st.root, info.slug)
        st.paths[""] = st.root
        marker = self._new_node(_MARKER, st, 0o444, t)
        self._attach(st.root, marker, MARKER_NAME)
        st.notices.extend(self.state.notices(info.store_id))
        st.notices_blob = self._render_notices(st)
        st.notices_node = self._new_node(_NOTICES, st, 0o444, t)
        self._attach(st.root, st.notices_node, NOTICES_NAME)
        sid = info.store_id
        for row in self.state.load_dirs(sid).values():
            try:
                d = self._ensure_dirs(st, row.path, t)
            except FsError:
                log.warning("store %s: directory %s clashes with a file; not shown", sid, row.path)
                continue
            d.mtime_ns, d.mode = row.mtime_ns, row.mode & 0o7777
        for row in self.state.load_files(sid).values():
            if row.flags & FLAG_UNBORN:
                # Created by a writer that never closed it (the mount stopped first): dropped,
                # as a writer that fails is undone. Nothing whose close() returned is lost.
                log.warning("store %s: %s was never closed by its writer; dropped", sid, row.path)
                self.state.delete_file(sid, row.path)
                continue
            parent_path, _, name = row.path.rpartition("/")
            if parent_path == "" and name in RESERVED_NAMES:
                log.warning("store %s: a file at reserved path %s is not shown", sid, row.path)
                continue
            try:
                parent = self._ensure_dirs(st, parent_path, t)
            except FsError:
                log.warning("store %s: file %s clashes with a file on its path; not shown", sid, row.path)
                continue
            if name in parent.children:  # type: ignore[operator]
                log.warning("store %s: file %s clashes with a directory; not shown", sid, row.path)
                continue
            node = self._new_node(_FILE, st, row.mode & 0o7777, row.mtime_ns)
            node.memory_id, node.sha, node.size = row.memory_id, row.sha, row.size
            node.bad_utf8 = bool(row.flags & FLAG_BAD_UTF8)
            node.bad_noticed = row.sha if node.bad_utf8 else None
            self._attach(parent, node, name)
            st.files += 1
            st.bytes += row.size

    def _ensure_dirs(self, st: _Store, path: str, t: int, created: list[_Node] | None = None) -> _Node:
        """The directory node at `path`, creating missing ones (in memory only)."""
        node = st.paths.get(path)
        if node is not None:
            if node.kind == _FILE:
                raise FsError(errno.ENOTDIR)
            return node
        parent_path, _, name = path.rpartition("/")
        parent = self._ensure_dirs(st, parent_path, t, created)
        if parent is st.root and name in RESERVED_NAMES:
            raise FsError(errno.EPERM)
        d = self._new_node(_DIR, st, 0o755, t)
        self._attach(parent, d, name)
        if created is not None:
            created.append(d)
        return d

    # ---- tree helpers ----------------------------------------------------------------------

    def _attach(self, parent: _Node, node: _Node, name: str) -> None:
        node.parent, node.name, node.linked = parent, name, True
        node.seq = parent.next_seq
        parent.next_seq += 1
        parent.children[name] = node  # type: ignore[index]
        if node.kind in (_FILE, _DIR):
            self._set_path(node, f"{parent.path}/{name}")

    def _set_path(self, node: _Node, path: str) -> None:
        st = node.store
        if node.path and st.paths.get(node.path) is node:  # type: ignore[union-attr]
            del st.paths[node.path]  # type: ignore[union-attr]
        node.path = path
        st.paths[path] = node  # type: ignore[union-attr]
        st.replaced.pop(path, None)  # type: ignore[union-attr]  (something else is there now)
        if node.kind == _DIR:
            for name, child in node.children.items():  # type: ignore[union-attr]
                self._set_path(child, f"{path}/{name}")

    def _detach(self, node: _Node) -> None:
        """Take a node out of its directory (and a directory's subtree out of the path map)."""
        parent = node.parent
        if parent is not None and parent.children.get(node.name) is node:  # type: ignore[union-attr]
            del parent.children[node.name]  # type: ignore[union-attr]
        if node.kind in (_FILE, _DIR) and node.store.paths.get(node.path) is node:  # type: ignore[union-attr]
            del node.store.paths[node.path]  # type: ignore[union-attr]

    def _unlink_node(self, node: _Node) -> None:
        """Remove a node from the view for good (file or directory subtree)."""
        self._detach(node)
        node.linked = False
        st = node.store
        if node.kind == _FILE:
            st.files -= 1  # type: ignore[union-attr]
            st.bytes -= self._cur_size(node)  # type: ignore[union-attr]
            if node.open_count and node.buf is None:
                # Open handles keep reading this data after the blob may be collected.
                node.buf = bytearray(self._committed(node))
        elif node.kind == _DIR:
            for child in list(node.children.values()):  # type: ignore[union-attr]
                self._unlink_node(child)
        self._maybe_free(node)

    def _maybe_free(self, node: _Node) -> None:
        if not node.linked and node.lookups <= 0 and node.open_count <= 0:
            self._nodes.pop(node.ino, None)
            node.buf = None

    def _node(self, ino: int) -> _Node:
        node = self._nodes.get(ino)
        if node is None:
            raise FsError(errno.ENOENT)
        return node

    def _dir(self, ino: int) -> _Node:
        node = self._node(ino)
        if node.kind not in _DIR_KINDS:
            raise FsError(errno.ENOTDIR)
        return node

    def _refuse_read_only(self, node: _Node) -> None:
        """EROFS for the root, anything in a read_only store, and everything after stop_writes()."""
        if self.frozen or node.kind == _ROOT or (node.store is not None and node.store.info.read_only):
            raise FsError(errno.EROFS)

    def _check_writable_dir(self, d: _Node) -> None:
        self._refuse_read_only(d)
        if not d.linked:
            raise FsError(errno.ENOENT)

    def _check_writable_node(self, node: _Node) -> None:
        if node.kind == _STORE:  # a store's own directory is fixed (mode, name, existence)
            raise FsError(errno.EROFS)
        self._refuse_read_only(node)
        if node.kind in _VIRTUAL:
            raise FsError(errno.EPERM)

    def _new_name(self, parent: _Node, raw: bytes, *, depth_below: int = 0, longest_below: int = 0) -> str:
        """Validate a name for a new entry in `parent`; return it decoded.

        `depth_below`/`longest_below`: for a directory being moved, how many segments and bytes its
        deepest/longest descendant adds, so a move can't push a descendant past the path limits."""
        try:
            name = check_component_bytes(raw)
        except PathError as e:
            raise FsError(errno.ENAMETOOLONG if e.too_long else errno.EINVAL) from None
        if parent.kind == _STORE and name in RESERVED_NAMES:
            raise FsError(errno.EPERM)
        path = f"{parent.path}/{name}"
        # A path deeper than the store allows is "too long" too (see SEMANTICS.md).
        if (
            len(path.encode()) + longest_below > MAX_PATH_BYTES
            or path.count("/") + depth_below > MAX_SEGMENTS
        ):
            raise FsError(errno.ENAMETOOLONG)
        return name

    @staticmethod
    def _child(parent: _Node, raw: bytes) -> _Node:
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise FsError(errno.ENOENT) from None
        node = parent.children.get(name)  # type: ignore[union-attr]
        if node is None:
            raise FsError(errno.ENOENT)
        return node

    def _cur_size(self, node: _Node) -> int:
        if node.kind == _FILE:
            return len(node.buf) if node.buf is not None else node.size
        if node.kind == _MARKER:
            return len(node.store.marker)  # type: ignore[union-attr]
        if node.kind == _NOTICES:
            return len(node.store.notices_blob)  # type: ignore[union-attr]
        return 0

    def _committed(self, node: _Node) -> bytes:
        try:
            return self.state.get_blob(node.sha)
        except FileNotFoundError:
            log.error("blob %s of %s is missing from the state dir", node.sha, node.path)
            raise FsError(errno.EIO) from None

    def _content(self, node: _Node) -> bytes | bytearray:
        if node.kind == _FILE:
            return node.buf if node.buf is not None else self._committed(node)
        if node.kind == _MARKER:
            return node.store.marker  # type: ignore[union-attr]
        if node.kind == _NOTICES:
            return node.store.notices_blob  # type: ignore[union-attr]
        raise FsError(errno.EISDIR)

    @staticmethod
    def _mode(node: _Node) -> int:
        kind = node.kind
        ro = kind == _ROOT or (node.store is not None and node.store.info.read_only)
        if kind in _DIR_KINDS:
            return stat.S_IFDIR | (0o555 if ro else node.mode)
        return stat.S_IFREG | (0o444 if ro or kind in _VIRTUAL else node.mode)

    def _attr(self, node: _Node) -> Attr:
        return Attr(
            node.ino,
            self._mode(node),
            2 if node.kind in _DIR_KINDS else 1 if node.linked else 0,
            self._cur_size(node),
            self.uid,
            self.gid,
            node.atime_ns,
            node.mtime_ns,
            node.ctime_ns,
            node.parent is not None and self._mode(node.parent) & 0o111 != 0o111,
        )

    def _wake(self) -> None:
        if self.on_invalidate is not None:
            self.on_invalidate()

    def _inval_entry(self, parent: _Node, name: str) -> None:
        self.invalidations.append(("entry", parent.ino, name.encode()))
        self._inval_pushed += 1

    def _inval_inode(self, node: _Node) -> None:
        # Open files get attributes only (FIELD-NOTES); mtime/size changes then drop their pages.
        self.invalidations.append(("inode", node.ino, node.open_count > 0))
        self._inval_pushed += 1

    @property
    def invalidations_queued(self) -> int:
        """How many invalidations were ever queued (the adapter compares two readings)."""
        return self._inval_pushed

    def invalidations_done(self, n: int) -> None:
        """The adapter reports that `n` queued invalidations reached the kernel."""
        self._inval_done += n
        if self._inval_event is not None:
            self._inval_event.set()
            self._inval_event = None

    async def wait_invalidated(self, timeout: float = 5.0) -> bool:
        """Wait until every invalidation queued so far reached the kernel (call this before telling
        anyone that remote changes are visible). True when done; immediately True when nothing is
        mounted (no adapter drains the queue)."""
        target = self._inval_pushed
        with trio.move_on_after(timeout):
            while self._inval_done < target and self.on_invalidate is not None:
                if self._inval_event is None:
                    self._inval_event = trio.Event()
                await self._inval_event.wait()
        return self._inval_done >= target or self.on_invalidate is None

    # ---- lookup / attributes -----------------------------------------------------------------

    def lookup(self, parent_ino: int, name: bytes) -> Attr:
        """Counts one kernel lookup of the returned inode."""
        parent = self._dir(parent_ino)
        if name == b".":
            node = parent
        elif name == b"..":
            node = parent.parent or parent
        else:
            if len(name) > MAX_COMPONENT_BYTES:
                raise FsError(errno.ENAMETOOLONG)
            node = self._child(parent, name)
        node.lookups += 1
        return self._attr(node)

    def count_lookup(self, entry: DirEntry) -> None:
        """The adapter calls this for every readdir entry the kernel accepted (readdirplus)."""
        if not entry.is_dot:
            node = self._nodes.get(entry.attr.ino)
            if node is not None:
                node.lookups += 1

    def forget(self, items: Iterable[tuple[int, int]]) -> None:
        for ino, n in items:
            node = self._nodes.get(ino)
            if node is None or node.kind == _ROOT:
                continue
            node.lookups = max(0, node.lookups - n)
            self._maybe_free(node)

    def lookup_count(self, ino: int) -> int:
        node = self._nodes.get(ino)
        return node.lookups if node else 0

    def has_inode(self, ino: int) -> bool:
        return ino in self._nodes

    def getattr(self, ino: int) -> Attr:
        return self._attr(self._node(ino))

    # ---- permissions -------------------------------------------------------------------------
    # The adapter asks these before each operation on behalf of the calling process (the mount has
    # no `default_permissions`: see access.py). Read-only first, like a read-only filesystem, so
    # every user gets EROFS there; then search permission on every ancestor (the path walk); then
    # the inode's own mode bits.

    def permit(self, ino: int, caller: Caller, want: int) -> None:
        """EROFS/EACCES unless `caller` may `want` (access.R|W|X, 0 = exists) on `ino`."""
        node = self._node(ino)
        if want & W:
            self._refuse_read_only(node)
        self._permit_search(node, caller)
        if want and not allowed(self._mode(node), self.uid, self.gid, caller, want):
            raise FsError(errno.EACCES)

    def permit_remove(self, parent_ino: int, name: bytes, caller: Caller) -> None:
        """unlink, rmdir, and the source of a rename: write+search on the directory, and the
        sticky bit's rule."""
        self.permit(parent_ino, caller, W | X)
        if not sticky_allows(self._mode(self._node(parent_ino)), self.uid, caller):
            raise FsError(errno.EPERM)

    def permit_rename(
        self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes, caller: Caller
    ) -> None:
        self.permit_remove(old_parent, old_name, caller)
        self.permit(new_parent, caller, W | X)
        if not sticky_allows(self._mode(self._node(new_parent)), self.uid, caller):
            raise FsError(errno.EPERM)
        if old_parent != new_parent:
            node = self._dir(old_parent).children.get(old_name.decode("utf-8", "replace"))  # type: ignore[union-attr]
            if node is not None and node.kind == _DIR:
                self.permit(node.ino, caller, W)  # a moved directory's ".." changes

    def permit_setattr(
        self,
        ino: int,
        caller: Caller,
        *,
        size: bool,
        mode: bool,
        owner: bool,
        times: bool,
        fh: int | None,
        new_mode: int | None = None,
    ) -> None:
        node = self._node(ino)
        if size or mode or owner or times:
            self._refuse_read_only(node)
        self._permit_search(node, caller)
        writable = allowed(self._mode(node), self.uid, self.gid, caller, W)
        if (mode or owner) and not may_change_owner_fields(self.uid, caller):
            # A write (or O_TRUNC) by a non-owner makes the kernel ask us to drop setuid/setgid
            # (file_remove_privs: a SETATTR with the new mode, on behalf of the writer). That
            # one change is allowed to whoever may write the file; any other chmod is EPERM.
            if owner or new_mode is None or not writable or not self._drops_privs_only(node, new_mode):
                raise FsError(errno.EPERM)
        if size and fh is None and not writable:  # ftruncate was checked when the file was opened
            raise FsError(errno.EACCES)
        if times and not (may_change_owner_fields(self.uid, caller) or writable):
            raise FsError(errno.EACCES)

    @staticmethod
    def _drops_privs_only(node: _Node, new_mode: int) -> bool:
        """`new_mode` is the kernel's kill-priv mode: setuid cleared, and setgid where group-exec
        is set (should_remove_suid), nothing else changed."""
        cur = node.mode & 0o7777
        kill = stat.S_ISUID | (stat.S_ISGID if cur & stat.S_IXGRP else 0)
        new = new_mode & 0o7777
        return new != cur and new == cur & ~kill

    def _permit_search(self, node: _Node, caller: Caller) -> None:
        if caller.root or not node.linked:
            return  # root searches anything; an unlinked inode has no path left to walk
        p = node.parent
        while p is not None:
            if not allowed(self._mode(p), self.uid, self.gid, caller, X):
                raise FsError(errno.EACCES)
            p = p.parent

    def setattr(
        self,
        ino: int,
        *,
        size: int | None = None,
        mode: int | None = None,
        uid: int | None = None,
        gid: int | None = None,
        atime_ns: int | None = None,
        mtime_ns: int | None = None,
        fh: int | None = None,
    ) -> Attr:
        node = self._node(ino)
        self._check_writable_node(node)
        if (uid is not None and uid != self.uid) or (gid is not None and gid != self.gid):
            raise FsError(errno.EPERM)
        t = self.now()
        if size is not None:
            if node.kind != _FILE:
                raise FsError(errno.EISDIR)
            h = self._handles.get(fh) if fh is not None else None
            self._truncate(node, size, t, h if h is not None and h.node is node else None)
        if mode is not None:
            if node.kind == _DIR and (node.mode ^ mode) & 0o111 and node.children:
                for name in node.children:  # cached names may now need a check (Attr.guarded)
                    self._inval_entry(node, name)
                self._wake()
            node.mode = mode & 0o7777
        if atime_ns is not None:
            node.atime_ns = atime_ns
        if mtime_ns is not None:
            node.mtime_ns = mtime_ns
        node.ctime_ns = t
        return self._attr(node)

    def _truncate(self, node: _Node, size: int, t: int, h: _Handle | None = None) -> None:
        """truncate(2) (`h` None) stages at once; ftruncate(2) through handle `h` changes the
        buffer, staged with that handle's close (so a failed writer can still be undone)."""
        if size < 0:
            raise FsError(errno.EINVAL)
        cur = self._cur_size(node)
        try:
            if size > MAX_CONTENT_BYTES:
                raise FsError(errno.EFBIG)
            if size > cur and node.linked and node.store.bytes + size - cur > self.max_bytes:  # type: ignore[union-attr]
                raise FsError(errno.ENOSPC)
        except FsError as e:
            if h is not None:
                self._fail(h, e.errno)
            raise
        if h is not None:
            self._make_dirty(node)
            h.wrote = h.changed = True
        if node.buf is not None:
            # Unflushed writes (or this ftruncate's handle): resize the buffer; a close stages it.
            if size < cur:
                del node.buf[size:]
            else:
                node.buf.extend(bytes(size - cur))
        else:
            data = self._committed(node)
            data = data[:size] if size <= cur else data + bytes(size - cur)
            if node.linked:
                node.mtime_ns = t
                try:
                    self._stage(node, data)  # truncate(1) stages at once
                except FsError as e:
                    # Cutting into a multi-byte character is a legal truncate: the file is
                    # flagged and noticed like any non-UTF-8 content; close/fsync report it.
                    if e.errno != errno.EILSEQ:
                        raise
        if node.linked:
            node.store.bytes += size - cur  # type: ignore[union-attr]
        node.mtime_ns = t

    # ---- directories -------------------------------------------------------------------------

    def opendir(self, ino: int) -> int:
        node = self._dir(ino)
        fh = self._next_fh
        self._next_fh += 1
        self._dir_handles[fh] = _DirHandle(fh, node)
        return fh

    def readdir(self, fh: int, start: int) -> Iterator[DirEntry]:
        """Entries after cursor `start` (0 = from the beginning), lazily.

        Cursors are per-directory insertion sequence numbers, so concurrent creates and deletes
        never make an entry repeat or get skipped. The listing is a snapshot taken when a read
        starts at 0; entries removed since are left out."""
        h = self._dir_handles.get(fh)
        if h is None:
            raise FsError(errno.EBADF)
        d = h.node
        if start == 0 or not h.snapshot:
            h.snapshot = [(n.seq, name, n) for name, n in d.children.items()]  # type: ignore[union-attr]
            h.seqs = [s for s, _, _ in h.snapshot]
        return self._readdir_iter(h, d, start)

    def _readdir_iter(self, h: _DirHandle, d: _Node, start: int) -> Iterator[DirEntry]:
        if start < 1:
            yield DirEntry(b".", self._attr(d), 1, True)
        if start < 2:
            yield DirEntry(b"..", self._attr(d.parent or d), 2, True)
        i = bisect.bisect_right(h.seqs, start)
        snap = h.snapshot
        children = d.children
        for j in range(i, len(snap)):
            seq, name, node = snap[j]
            if children.get(name) is not node or node.seq != seq:  # type: ignore[union-attr]
                continue  # removed or replaced since the snapshot
            yield DirEntry(name.encode(), self._attr(node), seq, False)

    def releasedir(self, fh: int) -> None:
        self._dir_handles.pop(fh, None)

    def mkdir(self, parent_ino: int, name: bytes, mode: int = 0o755) -> Attr:
        parent = self._dir(parent_ino)
        self._check_writable_dir(parent)
        sname = self._new_name(parent, name)
        if sname in parent.children:  # type: ignore[operator]
            raise FsError(errno.EEXIST)
        t = self.now()
        node = self._new_node(_DIR, parent.store, mode & 0o7777, t)  # mkdir(d, 0) is 0000
        self._attach(parent, node, sname)
        self.state.upsert_dir(node.store.info.store_id, node.path, t, node.mode)  # type: ignore[union-attr]
        parent.mtime_ns = parent.ctime_ns = t
        node.lookups += 1
        return self._attr(node)

    def rmdir(self, parent_ino: int, name: bytes) -> None:
        parent = self._dir(parent_ino)
        self._check_writable_dir(parent)
        node = self._child(parent, name)
        if node.kind in _VIRTUAL:
            raise FsError(errno.EPERM)
        if node.kind != _DIR:
            raise FsError(errno.ENOTDIR)
        if node.children:
            raise FsError(errno.ENOTEMPTY)
        self.state.delete_dir(node.store.info.store_id, node.path)  # type: ignore[union-attr]
        self._unlink_node(node)
        parent.mtime_ns = parent.ctime_ns = self.now()

    # ---- files -------------------------------------------------------------------------------

    def _new_handle(self, node: _Node, writable: bool, pid: int = 0) -> _Handle:
        fh = self._next_fh
        self._next_fh += 1
        h = _Handle(fh, node, writable, pid)
        self._handles[fh] = h
        node.open_count += 1
        return h

    def open(self, ino: int, flags: int, pid: int = 0) -> OpenReply:
        """`pid`: the opening process (the failed-writer rule spans a process's new files)."""
        node = self._node(ino)
        if node.kind in _DIR_KINDS:
            raise FsError(errno.EISDIR)
        writable = (flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR)
        if writable or flags & os.O_TRUNC:
            self._refuse_read_only(node)
            if node.kind in _VIRTUAL:
                raise FsError(errno.EACCES)  # what a non-root user gets from 0444 (SEMANTICS.md)
        h = self._new_handle(node, writable, pid)
        if flags & os.O_TRUNC and writable and self._cur_size(node) > 0:
            # O_TRUNC empties the file; staged with the writer's close (no empty state staged first).
            node.store.bytes -= self._cur_size(node)  # type: ignore[union-attr]
            self._make_dirty(node)
            node.buf = bytearray()
            node.mtime_ns = node.ctime_ns = self.now()
            h.wrote = h.changed = True
        # Content is tied to mtime (auto_inval_data) and remote changes invalidate the inode, so
        # the kernel may keep its page cache across opens; not while a buffer is dirty.
        return OpenReply(h.fh, keep_cache=node.buf is None)

    def create(
        self, parent_ino: int, name: bytes, mode: int = 0o644, flags: int = os.O_RDWR, pid: int = 0
    ) -> tuple[OpenReply, Attr]:
        """Create and open a new file (counts one lookup)."""
        parent = self._dir(parent_ino)
        self._check_writable_dir(parent)
        sname = self._new_name(parent, name)
        existing = parent.children.get(sname)  # type: ignore[union-attr]
        if existing is not None:
            if flags & os.O_EXCL or existing.kind != _FILE:
                raise FsError(errno.EEXIST)
            reply = self.open(existing.ino, flags, pid)
            existing.lookups += 1
            return reply, self._attr(existing)
        st = parent.store
        if st.files >= self.max_files:  # type: ignore[union-attr]
            raise FsError(errno.ENOSPC)
        t = self.now()
        node = self._new_node(_FILE, st, mode & 0o7777, t)  # `umask 777; touch f` is 0000
        node.unborn = True
        node.replaces = st.replaced.pop(f"{parent.path}/{sname}", None)  # type: ignore[union-attr]
        self._attach(parent, node, sname)
        st.files += 1  # type: ignore[union-attr]
        # The file exists durably at once (flagged unborn); its content is staged at close.
        self._write_unborn_row(node)
        parent.mtime_ns = parent.ctime_ns = t
        h = self._new_handle(node, True, pid)
        node.buf = bytearray()
        node.creator_fh = h.fh
        h.wrote = True
        node.lookups += 1
        return OpenReply(h.fh, keep_cache=False), self._attr(node)

    def _handle(self, fh: int) -> _Handle:
        h = self._handles.get(fh)
        if h is None:
            raise FsError(errno.EBADF)
        return h

    def read(self, fh: int, off: int, size: int) -> bytes:
        node = self._handle(fh).node
        data = self._content(node)
        return bytes(data[off : off + size])

    def write(self, fh: int, off: int, data: bytes) -> int:
        h = self._handle(fh)
        node = h.node
        self._refuse_read_only(node)
        if not h.writable:
            raise FsError(errno.EBADF)
        end = off + len(data)
        cur = self._cur_size(node)
        grow = max(0, end - cur)
        if end > MAX_CONTENT_BYTES:
            self._fail(h, errno.EFBIG)
            raise FsError(errno.EFBIG)
        if grow and node.linked and node.store.bytes + grow > self.max_bytes:  # type: ignore[union-attr]
            self._fail(h, errno.ENOSPC)
            raise FsError(errno.ENOSPC)
        self._make_dirty(node)
        buf = node.buf
        assert buf is not None
        if off > len(buf):
            buf.extend(bytes(off - len(buf)))
        buf[off:end] = data
        if node.linked:
            node.store.bytes += grow  # type: ignore[union-attr]
        node.mtime_ns = node.ctime_ns = self.now()
        h.wrote = h.changed = True
        return len(data)

    def _stage(self, node: _Node, data: bytes | bytearray) -> None:
        """Commit `data` as the file's content: blob first, then the files row (one commit).

        Content that is not UTF-8 is staged too (it stays in the view) but flagged so it is never
        pushed; the caller's close/fsync then fails with EILSEQ and one notice is written."""
        st = node.store
        data = bytes(data)
        sha = self.state.put_blob(data)
        bad = not _utf8_ok(data)
        self.state.upsert_file(
            st.info.store_id,
            node.path,
            node.memory_id,
            sha,
            len(data),  # type: ignore[union-attr]
            node.mtime_ns,
            node.mode,
            FLAG_BAD_UTF8 if bad else 0,
        )
        node.sha, node.size, node.bad_utf8 = sha, len(data), bad
        node.buf = None
        node.closed = node.unborn
        if bad:
            if node.bad_noticed != sha:
                node.bad_noticed = sha
                self.add_notice(
                    st.info.store_id,
                    "upload-refused",
                    node.path,  # type: ignore[union-attr]
                    "content is not valid UTF-8; kept in this mount only until it is fixed",
                )
            raise FsError(errno.EILSEQ)

    def flush(self, fh: int) -> None:
        """close(): stage what this handle wrote (EILSEQ if it is not UTF-8). A failed handle
        stages nothing: the file returns to its last staged state and close() gets the error."""
        h = self._handle(fh)
        node = h.node
        if h.failed:
            self._give_up(h)
            raise FsError(h.failed)
        if not h.wrote:
            return
        h.wrote = False
        if node.buf is not None and node.linked:
            # For a new file this is durability only: a FLUSH also comes for every close of a
            # copy of the fd (bash's `> f` dup2s and closes the original; a fork + exec closes
            # its O_CLOEXEC copies), while the writer is still at work. It becomes part of what
            # the sync may push at its creating handle's release (_birth_at).
            self._stage(node, node.buf)

    def fsync(self, fh: int, datasync: bool = False) -> None:
        h = self._handle(fh)
        node = h.node
        if node.kind != _FILE or not node.linked:
            return
        if h.failed:
            raise FsError(h.failed)  # nothing of a failed handle is staged, not even by fsync
        if node.buf is not None and h.wrote and not _utf8_ok(node.buf):
            self._fail(h, errno.EILSEQ)  # the writer is told now; its close undoes it (SEMANTICS.md)
            raise FsError(errno.EILSEQ)
        h.wrote = False
        try:
            if node.buf is not None:
                self._stage(node, node.buf)
        finally:
            self.state.durable()  # the content is in state.db with its row
            self._birth_at(h)  # an fsync by its creator: the writer vouches for this state

    def release(self, fh: int) -> None:
        h = self._handles.pop(fh, None)
        if h is None:
            return
        node = h.node
        node.open_count -= 1
        if h.failed:
            self._give_up(h)  # release without a flush (or after one): still undone
        else:
            if h.wrote and node.buf is not None and node.linked:
                try:  # no close() reported this handle's writes (flush normally did)
                    self._stage(node, node.buf)
                except FsError:
                    pass
            self._birth_at(h)
        if node.creator_fh == h.fh:
            node.creator_fh = 0
        self._maybe_free(node)

    def _birth_at(self, h: _Handle) -> None:
        """A new file's creating handle closed (or fsynced) without failing: from now on the sync
        sees it. When the creator failed while another writer had the file open, that writer's
        release does it."""
        node = h.node
        if not node.unborn or not node.linked or h.failed:
            return
        if node.creator_fh == h.fh or (node.creator_fh == 0 and h.changed):
            if node.buf is None:
                node.unborn, node.replaces = False, None
                self.state.note_change(node.store.info.store_id)  # type: ignore[union-attr]

    # ---- failed writers ------------------------------------------------------------------

    def _fail(self, h: _Handle, err: int) -> None:
        """Handle `h` failed: it stages nothing from now on. The failure is its process's: a new
        file that the same process created and still holds open goes with it (sqlite: the
        journal's fsync fails, so the empty database file it created is not kept either)."""
        if h.failed:
            return
        h.failed = err
        if not h.pid:
            return
        for o in self._handles.values():
            n = o.node
            if o is not h and o.pid == h.pid and not o.failed and n.unborn and n.creator_fh == o.fh:
                o.failed, o.cause = err, h.node.path

    def _make_dirty(self, node: _Node) -> None:
        """Give `node` a buffer holding its staged content (remembering the staged mtime)."""
        if node.buf is None:
            node.clean_mtime = node.mtime_ns
            node.buf = bytearray(self._committed(node))

    def _write_unborn_row(self, node: _Node) -> None:
        """The durable row of an unborn file: what a restart must show at its path. The file
        it replaced, if any (a crash mid-`tar x` keeps the memory), else a row a restart drops."""
        if node.closed:
            return  # a close returned: a restart keeps what it staged (the row says so already)
        sid = node.store.info.store_id  # type: ignore[union-attr]
        s = node.replaces
        if s is None:
            self.state.upsert_file(sid, node.path, None, EMPTY_SHA, 0, node.mtime_ns, node.mode, FLAG_UNBORN)
        else:
            flags = FLAG_BAD_UTF8 if s.bad_utf8 else 0
            self.state.upsert_file(sid, node.path, s.memory_id, s.sha, s.size, s.mtime_ns, s.mode, flags)

    def _staged_state(self, node: _Node) -> _Staged | None:
        """What the sync sees of a file now (None: nothing, an unborn file of its own)."""
        if node.unborn:
            return node.replaces
        mtime = node.clean_mtime if node.buf is not None else node.mtime_ns
        return _Staged(node.memory_id, node.sha, node.size, node.mode, mtime, node.bad_utf8)

    def _give_up(self, h: _Handle) -> None:
        """The close of a failed handle: stage nothing; return the file to its last staged state
        unless another handle still has unstaged writes in the shared buffer (its close stages
        them). One notice per handle, when the file is still in the view."""
        h.wrote = False
        node = h.node
        first, h.noticed = not h.noticed, True
        if node.kind != _FILE or not node.linked:
            return  # unlinked while open: nothing of it can be staged anyway
        st = node.store
        sid = st.info.store_id  # type: ignore[union-attr]
        why = f"a write failed ({errno.errorcode.get(h.failed, h.failed)}: {os.strerror(h.failed)})"
        if h.cause:
            why = f"its writer's write to {h.cause} failed ({errno.errorcode.get(h.failed, h.failed)})"
        if any(o is not h and o.node is node and o.wrote for o in self._handles.values()):
            if first:
                self.add_notice(sid, "write-failed", node.path, f"{why}; nothing of that writer was "
                                "saved, but another writer still has the file open and its close "
                                "saves what the file holds then")
            return
        path, parent = node.path, node.parent
        if node.buf is not None:
            st.bytes += node.size - len(node.buf)  # type: ignore[union-attr]
            node.buf = None
            node.mtime_ns = node.clean_mtime
        if node.unborn and node.replaces is None:
            with self.state.transaction():
                self.state.delete_file(sid, path)
            self._inval_entry(parent, node.name)  # type: ignore[arg-type]
            self._unlink_node(node)
            parent.mtime_ns = parent.ctime_ns = self.now()  # type: ignore[union-attr]
            outcome = "the file it created was removed"
        else:
            if node.unborn:
                s = node.replaces
                st.bytes += s.size - node.size  # type: ignore[union-attr]
                node.memory_id, node.sha, node.size, node.bad_utf8 = s.memory_id, s.sha, s.size, s.bad_utf8
                node.mode, node.mtime_ns = s.mode, s.mtime_ns
                node.unborn, node.replaces = False, None
                flags = FLAG_BAD_UTF8 if s.bad_utf8 else 0
                self.state.upsert_file(sid, path, s.memory_id, s.sha, s.size, s.mtime_ns, s.mode, flags)
            self._inval_inode(node)
            outcome = "the file keeps its previous content"
        if first:
            self.add_notice(sid, "write-failed", path, f"{why}; nothing of that writer was saved: {outcome}")
        self._wake()

    def unlink(self, parent_ino: int, name: bytes) -> None:
        parent = self._dir(parent_ino)
        self._check_writable_dir(parent)
        node = self._child(parent, name)
        if node.kind in _VIRTUAL:
            raise FsError(errno.EPERM)
        if node.kind != _FILE:
            raise FsError(errno.EISDIR)
        self.state.delete_file(node.store.info.store_id, node.path)  # type: ignore[union-attr]
        path, staged = node.path, self._staged_state(node)
        self._unlink_node(node)
        if staged is not None:
            node.store.replaced[path] = staged  # type: ignore[union-attr]  (unlink + create: tar x)
        parent.mtime_ns = parent.ctime_ns = self.now()

    @staticmethod
    def _subtree_extent(node: _Node) -> tuple[int, int]:
        """(segments, bytes) the deepest/longest descendant adds below `node`."""
        if node.kind != _DIR:
            return 0, 0
        depth = longest = 0
        base = len(node.path.encode())
        stack = list(node.children.values())  # type: ignore[union-attr]
        while stack:
            n = stack.pop()
            depth = max(depth, n.path.count("/") - node.path.count("/"))
            longest = max(longest, len(n.path.encode()) - base)
            if n.kind == _DIR:
                stack.extend(n.children.values())  # type: ignore[union-attr]
        return depth, longest

    def rename(
        self, parent_old: int, name_old: bytes, parent_new: int, name_new: bytes, flags: int = 0
    ) -> None:
        pold, pnew = self._dir(parent_old), self._dir(parent_new)
        self._check_writable_dir(pold)
        self._check_writable_dir(pnew)
        src = self._child(pold, name_old)
        if src.kind in _VIRTUAL:
            raise FsError(errno.EPERM)
        if pold.store is not pnew.store:
            raise FsError(errno.EXDEV)  # mv falls back to copy + delete
        if flags & RENAME_EXCHANGE:
            raise FsError(errno.EINVAL)
        depth, longest = self._subtree_extent(src)
        sname = self._new_name(pnew, name_new, depth_below=depth, longest_below=longest)
        dst = pnew.children.get(sname)  # type: ignore[union-attr]
        if dst is src:
            return
        if dst is not None and flags & RENAME_NOREPLACE:
            raise FsError(errno.EEXIST)
        if src.kind == _DIR:
            p: _Node | None = pnew
            while p is not None:
                if p is src:
                    raise FsError(errno.EINVAL)  # into its own subtree
                p = p.parent
            if dst is not None:
                if dst.kind != _DIR:
                    raise FsError(errno.ENOTDIR)
                if dst.children:
                    raise FsError(errno.ENOTEMPTY)
        elif dst is not None and dst.kind == _DIR:
            raise FsError(errno.EISDIR)
        sid = src.store.info.store_id  # type: ignore[union-attr]
        old_path = src.path
        new_path = f"{pnew.path}/{sname}"
        t = self.now()
        if src.kind == _FILE and src.unborn and src.replaces is None and dst is not None and dst.kind == _FILE:
            # A new file renamed over a staged one while its writer is still at work: the sync
            # keeps seeing the replaced file there until that writer closes (or fails).
            src.replaces = self._staged_state(dst)
        with self.state.transaction():
            if dst is not None:
                if dst.kind == _FILE:
                    # Editor save: the new file continues the memory it replaces.
                    if src.kind == _FILE and src.memory_id is None and dst.memory_id is not None:
                        src.memory_id = dst.memory_id
                    self.state.delete_file(sid, dst.path)
                else:
                    self.state.delete_dir(sid, dst.path)
            self.state.rename_prefix(sid, old_path, new_path)
            if src.kind == _FILE and src.memory_id is not None and not src.unborn:
                self.state.set_file_memory_id(sid, new_path, src.memory_id)
        if dst is not None:
            self._unlink_node(dst)
        self._detach(src)
        self._attach(pnew, src, sname)
        if src.kind == _FILE and src.unborn:
            self._write_unborn_row(src)
        src.ctime_ns = t
        pold.mtime_ns = pold.ctime_ns = pnew.mtime_ns = pnew.ctime_ns = t

    # ---- things memory files cannot be -------------------------------------------------------

    def _refuse_special(self, parent_ino: int) -> None:
        parent = self._dir(parent_ino)
        self._check_writable_dir(parent)
        raise FsError(errno.EPERM)

    def symlink(self, parent_ino: int, name: bytes, target: bytes) -> Attr:
        self._refuse_special(parent_ino)
        raise AssertionError

    def mknod(self, parent_ino: int, name: bytes, mode: int, rdev: int = 0) -> Attr:
        self._refuse_special(parent_ino)
        raise AssertionError

    def link(self, ino: int, parent_ino: int, name: bytes) -> Attr:
        self._refuse_special(parent_ino)
        raise AssertionError

    def readlink(self, ino: int) -> bytes:
        self._node(ino)
        raise FsError(errno.EINVAL)

    def setxattr(self, ino: int, name: bytes, value: bytes) -> None:
        self._refuse_read_only(self._node(ino))
        raise FsError(errno.ENOTSUP)

    def removexattr(self, ino: int, name: bytes) -> None:
        self.setxattr(ino, name, b"")

    def getxattr(self, ino: int, name: bytes) -> bytes:
        self._node(ino)
        raise FsError(errno.ENODATA)

    def listxattr(self, ino: int) -> list[bytes]:
        self._node(ino)
        return []

    def statfs(self) -> StatFs:
        n = max(1, len(self._stores))
        used_bytes = sum(s.bytes for s in self._stores.values())
        used_files = sum(s.files for s in self._stores.values())
        blocks = n * self.max_bytes // BLOCK_SIZE
        bfree = max(0, blocks - (used_bytes + BLOCK_SIZE - 1) // BLOCK_SIZE)
        files = n * self.max_files
        return StatFs(BLOCK_SIZE, blocks, bfree, files, max(0, files - used_files), MAX_COMPONENT_BYTES)

    # ---- lifecycle ---------------------------------------------------------------------------

    def stop_writes(self) -> None:
        """Every later mutation by the agent fails with EROFS (unmount). Dirty buffers still
        stage at close, and the sync-facing API keeps working (final sync)."""
        self.frozen = True

    @property
    def write_lock(self) -> bool:
        return self.frozen

    # ---- sync-facing API (engine, on the trio thread, never from a handler) -----------------

    def store_ids(self) -> list[str]:
        return list(self._stores)

    def store_info(self, store_id: str) -> StoreInfo:
        return self._store(store_id).info

    def _store(self, store_id: str) -> _Store:
        st = self._stores.get(store_id)
        if st is None:
            raise KeyError(store_id)
        return st

    def local_view(self, store_id: str) -> dict[str, LocalFile]:
        """path -> the committed state (last close/fsync) of every file in the view: what the
        sync may push. A file whose creating writer has not closed it is left out (or shows the
        file it replaced). Calling this is "the sync has seen every unlink so far": a failed
        writer's create after it no longer brings back a file unlinked before it."""
        st = self._store(store_id)
        st.replaced.clear()
        out = {}
        for p, n in st.paths.items():
            if n.kind == _FILE:
                lf = self._local_file(p, n)
                if lf is not None:
                    out[p] = lf
        return out

    def local_file(self, store_id: str, path: str) -> LocalFile | None:
        """One entry of local_view() (without building all of it)."""
        n = self._store(store_id).paths.get(path)
        if n is None or n.kind != _FILE:
            return None
        return self._local_file(path, n)

    @staticmethod
    def _local_file(path: str, n: _Node) -> LocalFile | None:
        if n.unborn:
            s = n.replaces
            return None if s is None else LocalFile(path, s.memory_id, s.sha, s.size, s.bad_utf8)
        return LocalFile(path, n.memory_id, n.sha, n.size, n.bad_utf8)

    def dirty_paths(self, store_id: str) -> set[str]:
        """Files with writes not yet staged by a close/fsync, and new files whose creating
        writer is still at work (unborn): the engine does not apply a pull over them."""
        st = self._store(store_id)
        return {p for p, n in st.paths.items() if n.kind == _FILE and (n.buf is not None or n.unborn)}

    def dir_paths(self, store_id: str) -> set[str]:
        """Every directory of the store's view (not the store root)."""
        st = self._store(store_id)
        return {p for p, n in st.paths.items() if n.kind == _DIR}

    def totals(self, store_id: str) -> tuple[int, int]:
        """(files, bytes) the store's view holds now."""
        st = self._store(store_id)
        return st.files, st.bytes

    def _parse_path(self, st: _Store, path: str) -> tuple[str, str]:
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
        buffer for it. Limits are not checked (Decision 4 is the engine's). `mtime_ns` is the
        memory's updated_at; None means now."""
        st = self._store(store_id)
        if mtime_ns is None:
            mtime_ns = self.now()
        parent_path, name = self._parse_path(st, path)
        content = bytes(content)
        got = self.state.put_blob(content)
        if got != sha:
            raise ValueError(f"content of {path} has sha {got}, not {sha}")
        created: list[_Node] = []
        with self.state.transaction():
            parent = self._ensure_dirs(st, parent_path, mtime_ns, created)
            node = parent.children.get(name)  # type: ignore[union-attr]
            if node is not None and node.kind != _FILE:
                raise FsError(errno.EISDIR, f"{path} is a directory here")
            for d in created:
                self.state.upsert_dir(store_id, d.path, d.mtime_ns, d.mode)
            bad = not _utf8_ok(content)
            mode = node.mode if node is not None else 0o644
            self.state.upsert_file(
                store_id, path, memory_id, sha, len(content), mtime_ns, mode, FLAG_BAD_UTF8 if bad else 0
            )
        if created:
            self._inval_entry(created[0].parent, created[0].name)  # type: ignore[arg-type]
        if node is None:
            node = self._new_node(_FILE, st, 0o644, mtime_ns)
            self._attach(parent, node, name)
            st.files += 1
            st.bytes += len(content)
            if not created:
                self._inval_entry(parent, name)  # a negative dentry may be cached
        else:
            st.bytes += len(content) - self._cur_size(node)
            node.buf = None
            self._inval_inode(node)
        node.memory_id, node.sha, node.size, node.bad_utf8 = memory_id, sha, len(content), bad
        node.unborn, node.replaces = False, None  # the store's content: nothing left to wait for
        node.mtime_ns = node.ctime_ns = mtime_ns
        for h in self._handles.values():
            if h.node is node:
                h.wrote = False  # their unflushed writes were dropped
        self._wake()

    def move_path(self, store_id: str, old: str, new: str) -> None:
        """A rename made on the store, applied here (keeps the inode; replaces a file at `new`)."""
        st = self._store(store_id)
        self._parse_path(st, old)
        new_parent_path, new_name = self._parse_path(st, new)
        node = st.paths.get(old)
        if node is None:
            raise FsError(errno.ENOENT, f"{old} is not in the view")
        if old == new:
            return
        created: list[_Node] = []
        t = self.now()
        old_parent = node.parent
        with self.state.transaction():
            parent = self._ensure_dirs(st, new_parent_path, t, created)
            p: _Node | None = parent
            while p is not None:
                if p is node:
                    raise FsError(errno.EINVAL, f"cannot move {old} into itself")
                p = p.parent
            dst = parent.children.get(new_name)  # type: ignore[union-attr]
            if dst is not None and (dst.kind != _FILE or node.kind != _FILE):
                raise FsError(errno.EEXIST, f"{new} is occupied by a directory")
            for d in created:
                self.state.upsert_dir(store_id, d.path, d.mtime_ns, d.mode)
            if dst is not None:
                self.state.delete_file(store_id, dst.path)
            self.state.rename_prefix(store_id, old, new)
            if dst is not None:
                self._unlink_node(dst)
            self._inval_entry(old_parent, node.name)  # type: ignore[arg-type]
            self._detach(node)
            self._attach(parent, node, new_name)
            self._prune(st, old_parent)  # type: ignore[arg-type]
        if created:
            self._inval_entry(created[0].parent, created[0].name)  # type: ignore[arg-type]
        else:
            self._inval_entry(parent, new_name)
        self._wake()

    def remove_path(self, store_id: str, path: str) -> None:
        """A delete made on the store: gone from the view; directories it leaves empty go too."""
        st = self._store(store_id)
        self._parse_path(st, path)
        node = st.paths.get(path)
        if node is None:
            return
        parent = node.parent
        sid = store_id
        with self.state.transaction():
            if node.kind == _FILE:
                self.state.delete_file(sid, path)
            else:
                for p, n in list(st.paths.items()):
                    if p == path or p.startswith(path + "/"):
                        (self.state.delete_file if n.kind == _FILE else self.state.delete_dir)(sid, p)
            self._inval_entry(parent, node.name)  # type: ignore[arg-type]
            self._unlink_node(node)
            self._prune(st, parent)  # type: ignore[arg-type]
        self._wake()

    def _prune(self, st: _Store, d: _Node) -> None:
        """Remove `d` and its ancestors while they are empty (not the store root)."""
        while d.kind == _DIR and not d.children:
            parent = d.parent
            self.state.delete_dir(st.info.store_id, d.path)
            self._inval_entry(parent, d.name)  # type: ignore[arg-type]
            self._unlink_node(d)
            d = parent  # type: ignore[assignment]

    def set_memory_id(self, store_id: str, path: str, memory_id: str | None) -> None:
        st = self._store(store_id)
        node = st.paths.get(path)
        if node is None or node.kind != _FILE:
            raise FsError(errno.ENOENT, f"{path} is not a file in the view")
        self.state.set_file_memory_id(store_id, path, memory_id)
        node.memory_id = memory_id
        if node.replaces is not None:  # what the sync sees of an unborn file
            s = node.replaces
            node.replaces = _Staged(memory_id, s.sha, s.size, s.mode, s.mtime_ns, s.bad_utf8)

    def add_notice(self, store_id: str, kind: str, path: str, details: str = "") -> str:
        """Append a line to the store's .sync-notices.log (last 100 kept); returns the line."""
        st = self._store(store_id)
        line = f"{rfc3339_now()} {kind} {path} {details}".rstrip()
        line = line.replace("\n", " ")
        self.state.add_notice(store_id, line)
        st.notices.append(line)
        st.notices_blob = self._render_notices(st)
        node = st.notices_node
        node.mtime_ns = node.ctime_ns = max(self.now(), node.mtime_ns + 1)
        self._inval_inode(node)
        self._wake()
        return line

    @staticmethod
    def _render_notices(st: _Store) -> bytes:
        return "".join(line + "\n" for line in st.notices).encode()

    def notices(self, store_id: str) -> list[str]:
        return list(self._store(store_id).notices)

    def path_inode(self, store_id: str, path: str) -> int | None:
        """The inode at a memory path ("" = the store's directory), or None."""
        node = self._store(store_id).paths.get(path)
        return node.ino if node else None

    def content(self, store_id: str, path: str) -> bytes:
        """What a reader sees at `path` now (buffer if dirty)."""
        node = self._store(store_id).paths.get(path)
        if node is None or node.kind != _FILE:
            raise FsError(errno.ENOENT)
        return bytes(self._content(node))

    def committed_content(self, store_id: str, path: str) -> bytes:
        """The staged content at `path` (what a push would send)."""
        node = self._store(store_id).paths.get(path)
        lf = None if node is None or node.kind != _FILE else self._local_file(path, node)
        if lf is None:
            raise FsError(errno.ENOENT)
        try:
            return self.state.get_blob(lf.sha)
        except FileNotFoundError:
            log.error("blob %s of %s is missing from the state dir", lf.sha, path)
            raise FsError(errno.EIO) from None

    def live_shas(self) -> set[str]:
        """Shas in use by the view (for State.gc_blobs(keep=…))."""
        shas = {n.sha for n in self._nodes.values() if n.kind == _FILE}
        shas |= {n.replaces.sha for n in self._nodes.values() if n.kind == _FILE and n.replaces}
        for st in self._stores.values():
            shas |= {s.sha for s in st.replaced.values()}
        return shas
