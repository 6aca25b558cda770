"""The filesystem façade: every FUSE operation as a method taking and returning plain Python
values and raising `FsError(errno)` (DESIGN.md "Filesystem core"). `fuse_ops.py` only converts
types; no pyfuse3 here, so every semantic can be tested without a kernel.

The parts: the node kinds (nodes.py) in a tree (tree.py); the permission checks the adapter asks
(permissions.py); the sync engine's side (sync_view.py); the kernel invalidation queue
(invalidation.py). This module holds the operations themselves: lookups, attributes,
directories, files and their handles, rename, and the failed-writer rule.

Staging: `flush`/`fsync` stage a file's content (blob, then the `files` row, in one commit).
Namespace changes stage at once. The view (names, attributes) lives in memory; a read touches
SQLite only for content that is not in the state dir's LRU cache (blobs.py).

Failed writers (docs/SEMANTICS.md): a handle whose write or truncate failed (EFBIG, ENOSPC) or
whose fsync found content that is not UTF-8 stages nothing, ever; at its close the file returns
to its last staged state. A file created by a writer that has not closed it yet is "unborn": it
is in the view for the agent but not in `local_view()` (what the sync may push), and a restart
drops it (its writer never closed it).
"""

from __future__ import annotations

import bisect
import errno
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from memfs.limits import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_FILES,
    MAX_COMPONENT_BYTES,
    MAX_CONTENT_BYTES,
    MAX_PATH_BYTES,
    MAX_SEGMENTS,
    RESERVED_NAMES,
    PathError,
    check_component_bytes,
)
from memfs.mount.blobs import EMPTY_SHA
from memfs.mount.invalidation import Invalidation, InvalidationQueue
from memfs.mount.nodes import (
    DIR_KINDS,
    VIRTUAL_KINDS,
    DirHandle,
    DirLike,
    DirNode,
    FileHandle,
    FileNode,
    MarkerNode,
    Node,
    NoticesNode,
    RootNode,
    StoreRootNode,
)
from memfs.mount.permissions import PermissionChecks
from memfs.mount.replies import (
    BLOCK_SIZE,
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    Attr,
    DirEntry,
    FsError,
    OpenReply,
    StatFs,
)
from memfs.mount.state import State
from memfs.mount.sync_view import SyncFacing, utf8_ok
from memfs.mount.tree import Tree
from memfs.mount.view_rows import FLAG_BAD_UTF8, FLAG_UNBORN, FileState
from memfs.records import StoreInfo


class Filesystem(PermissionChecks, SyncFacing):
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
        # Kernel invalidations requested by the sync-facing API; fuse_ops drains them outside handlers.
        self.inval = InvalidationQueue()
        self.last_activity = 0.0  # time.monotonic() of the last FUSE request (set by the adapter)
        self._handles: dict[int, FileHandle] = {}
        self._dir_handles: dict[int, DirHandle] = {}
        self._next_fh = 1
        self.state.put_blob(b"")  # every new file starts as the empty blob
        t = self.now()
        self.tree = Tree(state, self.uid, self.gid, t)
        for info in stores:
            self.tree.load_store(info, t)

    # ---- the invalidation queue, as the adapter sees it --------------------------------------

    @property
    def invalidations(self) -> deque[Invalidation]:
        return self.inval.items

    @property
    def on_invalidate(self) -> Callable[[], None] | None:
        return self.inval.on_invalidate

    @on_invalidate.setter
    def on_invalidate(self, wake: Callable[[], None] | None) -> None:
        self.inval.on_invalidate = wake  # set by the adapter while mounted

    @property
    def invalidations_queued(self) -> int:
        """How many invalidations were ever queued (the adapter compares two readings)."""
        return self.inval.pushed

    def invalidations_done(self, n: int) -> None:
        """The adapter reports that `n` queued invalidations reached the kernel."""
        self.inval.done(n)

    async def wait_invalidated(self, timeout: float = 5.0) -> bool:
        """Wait until every invalidation queued so far reached the kernel (call this before telling
        anyone that remote changes are visible). True when done; immediately True when nothing is
        mounted (no adapter drains the queue)."""
        return await self.inval.wait(timeout)

    # ---- names -------------------------------------------------------------------------------

    def _new_name(self, parent: DirLike, raw: bytes, *, depth_below: int = 0, longest_below: int = 0) -> str:
        """Validate a name for a new entry in `parent`; return it decoded.

        `depth_below`/`longest_below`: for a directory being moved, how many segments and bytes its
        deepest/longest descendant adds, so a move can't push a descendant past the path limits."""
        try:
            name = check_component_bytes(raw)
        except PathError as e:
            raise FsError(errno.ENAMETOOLONG if e.too_long else errno.EINVAL) from None
        if isinstance(parent, StoreRootNode) and name in RESERVED_NAMES:
            raise FsError(errno.EPERM)
        path = f"{parent.path}/{name}"
        # A path deeper than the store allows is "too long" too (see SEMANTICS.md).
        if (
            len(path.encode()) + longest_below > MAX_PATH_BYTES
            or path.count("/") + depth_below > MAX_SEGMENTS
        ):
            raise FsError(errno.ENAMETOOLONG)
        return name

    # ---- lookup / attributes -----------------------------------------------------------------

    def lookup(self, parent_ino: int, name: bytes) -> Attr:
        """Counts one kernel lookup of the returned inode."""
        parent = self.tree.dir(parent_ino)
        node: Node
        if name == b".":
            node = parent
        elif name == b"..":
            node = parent.parent or parent
        else:
            if len(name) > MAX_COMPONENT_BYTES:
                raise FsError(errno.ENAMETOOLONG)
            node = self.tree.child(parent, name)
        node.lookups += 1
        return self.tree.attr(node)

    def count_lookup(self, entry: DirEntry) -> None:
        """The adapter calls this for every readdir entry the kernel accepted (readdirplus)."""
        if not entry.is_dot:
            node = self.tree.nodes.get(entry.attr.ino)
            if node is not None:
                node.lookups += 1

    def forget(self, items: Iterable[tuple[int, int]]) -> None:
        for ino, n in items:
            node = self.tree.nodes.get(ino)
            if node is None or isinstance(node, RootNode):
                continue
            node.lookups = max(0, node.lookups - n)
            self.tree.maybe_free(node)

    def lookup_count(self, ino: int) -> int:
        node = self.tree.nodes.get(ino)
        return node.lookups if node else 0

    def has_inode(self, ino: int) -> bool:
        return ino in self.tree.nodes

    def getattr(self, ino: int) -> Attr:
        return self.tree.attr(self.tree.node(ino))

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
        node = self.tree.node(ino)
        self.check_writable_node(node)
        if (uid is not None and uid != self.uid) or (gid is not None and gid != self.gid):
            raise FsError(errno.EPERM)
        t = self.now()
        if size is not None:
            if not isinstance(node, FileNode):
                raise FsError(errno.EISDIR)
            h = self._handles.get(fh) if fh is not None else None
            self._truncate(node, size, t, h if h is not None and h.node is node else None)
        if mode is not None:
            if isinstance(node, DirNode) and (node.mode ^ mode) & 0o111 and node.children:
                for name in node.children:  # cached names may now need a check (Attr.guarded)
                    self.inval.entry(node, name)
                self.inval.wake()
            node.mode = mode & 0o7777
        if atime_ns is not None:
            node.atime_ns = atime_ns
        if mtime_ns is not None:
            node.mtime_ns = mtime_ns
        node.ctime_ns = t
        return self.tree.attr(node)

    def _truncate(self, node: FileNode, size: int, t: int, h: FileHandle | None = None) -> None:
        """truncate(2) (`h` None) stages at once; ftruncate(2) through handle `h` changes the
        buffer, staged with that handle's close (so a failed writer can still be undone)."""
        if size < 0:
            raise FsError(errno.EINVAL)
        cur = self.tree.cur_size(node)
        try:
            if size > MAX_CONTENT_BYTES:
                raise FsError(errno.EFBIG)
            if size > cur and node.linked and node.store.bytes + size - cur > self.max_bytes:
                raise FsError(errno.ENOSPC)
        except FsError as e:
            if h is not None:
                self._fail(h, e.errno or errno.EIO)
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
            data = self.tree.committed(node)
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
            node.store.bytes += size - cur
        node.mtime_ns = t

    # ---- directories -------------------------------------------------------------------------

    def opendir(self, ino: int) -> int:
        node = self.tree.dir(ino)
        fh = self._next_fh
        self._next_fh += 1
        self._dir_handles[fh] = DirHandle(fh, node)
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
            h.snapshot = [(n.seq, name, n) for name, n in d.children.items()]
            h.seqs = [s for s, _, _ in h.snapshot]
        return self._readdir_iter(h, d, start)

    def _readdir_iter(self, h: DirHandle, d: DirLike, start: int) -> Iterator[DirEntry]:
        if start < 1:
            yield DirEntry(b".", self.tree.attr(d), 1, True)
        if start < 2:
            yield DirEntry(b"..", self.tree.attr(d.parent or d), 2, True)
        i = bisect.bisect_right(h.seqs, start)
        snap = h.snapshot
        children = d.children
        attr = self.tree.attr
        guarded = self.tree.guards(d)  # every entry's parent is d
        for j in range(i, len(snap)):
            seq, name, node = snap[j]
            if children.get(name) is not node or node.seq != seq:
                continue  # removed or replaced since the snapshot
            yield DirEntry(name.encode(), attr(node, guarded), seq, False)

    def releasedir(self, fh: int) -> None:
        self._dir_handles.pop(fh, None)

    def mkdir(self, parent_ino: int, name: bytes, mode: int = 0o755) -> Attr:
        parent = self.tree.dir(parent_ino)
        self.check_writable_dir(parent)
        sname = self._new_name(parent, name)
        if sname in parent.children:
            raise FsError(errno.EEXIST)
        t = self.now()
        assert not isinstance(parent, RootNode)  # check_writable_dir refused it (EROFS)
        node = self.tree.new_dir(parent.store, mode & 0o7777, t)  # mkdir(d, 0) is 0000
        self.tree.attach(parent, node, sname)
        self.state.upsert_dir(node.store.info.store_id, node.path, t, node.mode)
        parent.mtime_ns = parent.ctime_ns = t
        node.lookups += 1
        return self.tree.attr(node)

    def rmdir(self, parent_ino: int, name: bytes) -> None:
        parent = self.tree.dir(parent_ino)
        self.check_writable_dir(parent)
        node = self.tree.child(parent, name)
        if isinstance(node, VIRTUAL_KINDS):
            raise FsError(errno.EPERM)
        if not isinstance(node, DirNode):
            raise FsError(errno.ENOTDIR)
        if node.children:
            raise FsError(errno.ENOTEMPTY)
        self.state.delete_dir(node.store.info.store_id, node.path)
        self.tree.unlink_node(node)
        parent.mtime_ns = parent.ctime_ns = self.now()

    # ---- files -------------------------------------------------------------------------------

    def _new_handle(
        self, node: FileNode | MarkerNode | NoticesNode, writable: bool, pid: int = 0
    ) -> FileHandle:
        fh = self._next_fh
        self._next_fh += 1
        h = FileHandle(fh, node, writable, pid)
        self._handles[fh] = h
        node.open_count += 1
        return h

    def open(self, ino: int, flags: int, pid: int = 0) -> OpenReply:
        """`pid`: the opening process (the failed-writer rule spans a process's new files)."""
        node = self.tree.node(ino)
        if isinstance(node, DIR_KINDS):
            raise FsError(errno.EISDIR)
        writable = (flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR)
        if writable or flags & os.O_TRUNC:
            self.refuse_read_only(node)
            if isinstance(node, VIRTUAL_KINDS):
                raise FsError(errno.EACCES)  # what a non-root user gets from 0444 (SEMANTICS.md)
        h = self._new_handle(node, writable, pid)
        if flags & os.O_TRUNC and writable and isinstance(node, FileNode) and self.tree.cur_size(node) > 0:
            # O_TRUNC empties the file; staged with the writer's close (no empty state staged first).
            node.store.bytes -= self.tree.cur_size(node)
            self._make_dirty(node)
            node.buf = bytearray()
            node.mtime_ns = node.ctime_ns = self.now()
            h.wrote = h.changed = True
        # Content is tied to mtime (auto_inval_data) and remote changes invalidate the inode, so
        # the kernel may keep its page cache across opens; not while a buffer is dirty.
        return OpenReply(h.fh, keep_cache=not isinstance(node, FileNode) or node.buf is None)

    def create(
        self, parent_ino: int, name: bytes, mode: int = 0o644, flags: int = os.O_RDWR, pid: int = 0
    ) -> tuple[OpenReply, Attr]:
        """Create and open a new file (counts one lookup)."""
        parent = self.tree.dir(parent_ino)
        self.check_writable_dir(parent)
        sname = self._new_name(parent, name)
        existing = parent.children.get(sname)
        if existing is not None:
            if flags & os.O_EXCL or not isinstance(existing, FileNode):
                raise FsError(errno.EEXIST)
            reply = self.open(existing.ino, flags, pid)
            existing.lookups += 1
            return reply, self.tree.attr(existing)
        assert not isinstance(parent, RootNode)  # check_writable_dir refused it (EROFS)
        st = parent.store
        if st.files >= self.max_files:
            raise FsError(errno.ENOSPC)
        t = self.now()
        node = self.tree.new_file(st, mode & 0o7777, t)  # `umask 777; touch f` is 0000
        node.unborn = True
        node.replaces = st.replaced.pop(f"{parent.path}/{sname}", None)
        self.tree.attach(parent, node, sname)
        st.files += 1
        # The file exists durably at once (flagged unborn); its content is staged at close.
        self._write_unborn_row(node)
        parent.mtime_ns = parent.ctime_ns = t
        h = self._new_handle(node, True, pid)
        node.buf = bytearray()
        node.creator_fh = h.fh
        h.wrote = True
        node.lookups += 1
        return OpenReply(h.fh, keep_cache=False), self.tree.attr(node)

    def _handle(self, fh: int) -> FileHandle:
        h = self._handles.get(fh)
        if h is None:
            raise FsError(errno.EBADF)
        return h

    def read(self, fh: int, off: int, size: int) -> bytes:
        node = self._handle(fh).node
        data = self.tree.content(node)
        return bytes(data[off : off + size])

    def write(self, fh: int, off: int, data: bytes) -> int:
        h = self._handle(fh)
        node = h.node
        self.refuse_read_only(node)
        if not h.writable or not isinstance(node, FileNode):  # (open refuses writers of a virtual file)
            raise FsError(errno.EBADF)
        end = off + len(data)
        cur = self.tree.cur_size(node)
        grow = max(0, end - cur)
        if end > MAX_CONTENT_BYTES:
            self._fail(h, errno.EFBIG)
            raise FsError(errno.EFBIG)
        if grow and node.linked and node.store.bytes + grow > self.max_bytes:
            self._fail(h, errno.ENOSPC)
            raise FsError(errno.ENOSPC)
        self._make_dirty(node)
        buf = node.buf
        assert buf is not None
        if off > len(buf):
            buf.extend(bytes(off - len(buf)))
        buf[off:end] = data
        if node.linked:
            node.store.bytes += grow
        node.mtime_ns = node.ctime_ns = self.now()
        h.wrote = h.changed = True
        return len(data)

    def _stage(self, node: FileNode, data: bytes | bytearray) -> None:
        """Commit `data` as the file's content: blob first, then the files row (one commit).

        Content that is not UTF-8 is staged too (it stays in the view) but flagged so it is never
        pushed; the caller's close/fsync then fails with EILSEQ and one notice is written."""
        st = node.store
        data = bytes(data)
        sha = self.state.put_blob(data)
        bad = not utf8_ok(data)
        self.state.upsert_file(
            st.info.store_id,
            node.path,
            node.memory_id,
            sha,
            len(data),
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
                    node.path,
                    "content is not valid UTF-8; kept in this mount only until it is fixed",
                )
            raise FsError(errno.EILSEQ)

    def flush(self, fh: int) -> None:
        """close(): stage what this handle wrote (EILSEQ if it is not UTF-8). A failed handle
        stages nothing: the file returns to its last staged state and close() gets the error."""
        h = self._handle(fh)
        node = h.node
        if not isinstance(node, FileNode):
            return  # a reader of a virtual file: nothing to stage
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
        if not isinstance(node, FileNode) or not node.linked:
            return
        if h.failed:
            raise FsError(h.failed)  # nothing of a failed handle is staged, not even by fsync
        if node.buf is not None and h.wrote and not utf8_ok(node.buf):
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
        if isinstance(node, FileNode):
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
        self.tree.maybe_free(node)

    def _birth_at(self, h: FileHandle) -> None:
        """A new file's creating handle closed (or fsynced) without failing: from now on the sync
        sees it. When the creator failed while another writer had the file open, that writer's
        release does it."""
        node = h.node
        if not isinstance(node, FileNode) or not node.unborn or not node.linked or h.failed:
            return
        if node.creator_fh == h.fh or (node.creator_fh == 0 and h.changed):
            if node.buf is None:
                node.unborn, node.replaces = False, None
                self.state.note_change(node.store.info.store_id)

    # ---- failed writers ------------------------------------------------------------------

    def _fail(self, h: FileHandle, err: int) -> None:
        """Handle `h` failed: it stages nothing from now on. The failure is its process's: a new
        file that the same process created and still holds open goes with it (sqlite: the
        journal's fsync fails, so the empty database file it created is not kept either)."""
        if h.failed:
            return
        h.failed = err
        if not h.pid or not isinstance(h.node, FileNode):
            return
        for o in self._handles.values():
            n = o.node
            if (
                o is not h
                and o.pid == h.pid
                and not o.failed
                and isinstance(n, FileNode)
                and n.unborn
                and n.creator_fh == o.fh
            ):
                o.failed, o.cause = err, h.node.path

    def _make_dirty(self, node: FileNode) -> None:
        """Give `node` a buffer holding its staged content (remembering the staged mtime)."""
        if node.buf is None:
            node.clean_mtime = node.mtime_ns
            node.buf = bytearray(self.tree.committed(node))

    def _write_unborn_row(self, node: FileNode) -> None:
        """The durable row of an unborn file: what a restart must show at its path. The file
        it replaced, if any (a crash mid-`tar x` keeps the memory), else a row a restart drops."""
        if node.closed:
            return  # a close returned: a restart keeps what it staged (the row says so already)
        sid = node.store.info.store_id
        s = node.replaces
        if s is None:
            self.state.upsert_file(sid, node.path, None, EMPTY_SHA, 0, node.mtime_ns, node.mode, FLAG_UNBORN)
        else:
            self.state.upsert_file(sid, node.path, s.memory_id, s.sha, s.size, s.mtime_ns, s.mode, s.flags)

    def _staged_state(self, node: FileNode) -> FileState | None:
        """What the sync sees of a file now (None: nothing, an unborn file of its own)."""
        if node.unborn:
            return node.replaces
        mtime = node.clean_mtime if node.buf is not None else node.mtime_ns
        flags = FLAG_BAD_UTF8 if node.bad_utf8 else 0
        return FileState(node.memory_id, node.sha, node.size, mtime, node.mode, flags)

    def _give_up(self, h: FileHandle) -> None:
        """The close of a failed handle: stage nothing; return the file to its last staged state
        unless another handle still has unstaged writes in the shared buffer (its close stages
        them). One notice per handle, when the file is still in the view."""
        h.wrote = False
        node = h.node
        first, h.noticed = not h.noticed, True
        if not isinstance(node, FileNode) or not node.linked:
            return  # unlinked while open: nothing of it can be staged anyway
        st = node.store
        sid = st.info.store_id
        why = f"a write failed ({errno.errorcode.get(h.failed, h.failed)}: {os.strerror(h.failed)})"
        if h.cause:
            why = f"its writer's write to {h.cause} failed ({errno.errorcode.get(h.failed, h.failed)})"
        if any(o is not h and o.node is node and o.wrote for o in self._handles.values()):
            if first:
                self.add_notice(
                    sid,
                    "write-failed",
                    node.path,
                    f"{why}; nothing of that writer was "
                    "saved, but another writer still has the file open and its close "
                    "saves what the file holds then",
                )
            return
        path, parent, s = node.path, Tree.parent_of(node), node.replaces
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
            outcome = "the file it created was removed"
        else:
            if node.unborn and s is not None:
                st.bytes += s.size - node.size
                node.memory_id, node.sha, node.size, node.bad_utf8 = s.memory_id, s.sha, s.size, s.bad_utf8
                node.mode, node.mtime_ns = s.mode, s.mtime_ns
                node.unborn, node.replaces = False, None
                self.state.upsert_file(sid, path, s.memory_id, s.sha, s.size, s.mtime_ns, s.mode, s.flags)
            self.inval.inode(node)
            outcome = "the file keeps its previous content"
        if first:
            self.add_notice(sid, "write-failed", path, f"{why}; nothing of that writer was saved: {outcome}")
        self.inval.wake()

    def unlink(self, parent_ino: int, name: bytes) -> None:
        parent = self.tree.dir(parent_ino)
        self.check_writable_dir(parent)
        node = self.tree.child(parent, name)
        if isinstance(node, VIRTUAL_KINDS):
            raise FsError(errno.EPERM)
        if not isinstance(node, FileNode):
            raise FsError(errno.EISDIR)
        self.state.delete_file(node.store.info.store_id, node.path)
        path, staged = node.path, self._staged_state(node)
        self.tree.unlink_node(node)
        if staged is not None:
            node.store.replaced[path] = staged  # (unlink + create: tar x)
        parent.mtime_ns = parent.ctime_ns = self.now()

    @staticmethod
    def _subtree_extent(node: Node) -> tuple[int, int]:
        """(segments, bytes) the deepest/longest descendant adds below `node`."""
        if not isinstance(node, DirNode):
            return 0, 0
        depth = longest = 0
        base = len(node.path.encode())
        stack = list(node.children.values())
        while stack:
            n = stack.pop()
            if not isinstance(n, (FileNode, DirNode)):
                continue  # (a store root's virtual files are not below any directory that moves)
            depth = max(depth, n.path.count("/") - node.path.count("/"))
            longest = max(longest, len(n.path.encode()) - base)
            if isinstance(n, DirNode):
                stack.extend(n.children.values())
        return depth, longest

    def rename(
        self, parent_old: int, name_old: bytes, parent_new: int, name_new: bytes, flags: int = 0
    ) -> None:
        pold, pnew = self.tree.dir(parent_old), self.tree.dir(parent_new)
        self.check_writable_dir(pold)
        self.check_writable_dir(pnew)
        assert not isinstance(pold, RootNode) and not isinstance(pnew, RootNode)  # (EROFS above)
        src = self.tree.child(pold, name_old)
        if not isinstance(src, (FileNode, DirNode)):  # the virtual files of a store root
            raise FsError(errno.EPERM)
        if pold.store is not pnew.store:
            raise FsError(errno.EXDEV)  # mv falls back to copy + delete
        if flags & RENAME_EXCHANGE:
            raise FsError(errno.EINVAL)
        depth, longest = self._subtree_extent(src)
        sname = self._new_name(pnew, name_new, depth_below=depth, longest_below=longest)
        dst = pnew.children.get(sname)
        if dst is src:
            return
        if dst is not None and flags & RENAME_NOREPLACE:
            raise FsError(errno.EEXIST)
        if isinstance(src, DirNode):
            p: DirLike | None = pnew
            while p is not None:
                if p is src:
                    raise FsError(errno.EINVAL)  # into its own subtree
                p = p.parent
            if dst is not None:
                if not isinstance(dst, DirNode):
                    raise FsError(errno.ENOTDIR)
                if dst.children:
                    raise FsError(errno.ENOTEMPTY)
        elif dst is not None and isinstance(dst, DirNode):
            raise FsError(errno.EISDIR)
        sid = src.store.info.store_id
        old_path = src.path
        new_path = f"{pnew.path}/{sname}"
        t = self.now()
        if (
            isinstance(src, FileNode)
            and src.unborn
            and src.replaces is None
            and dst is not None
            and isinstance(dst, FileNode)
        ):
            # A new file renamed over a staged one while its writer is still at work: the sync
            # keeps seeing the replaced file there until that writer closes (or fails).
            src.replaces = self._staged_state(dst)
        with self.state.transaction():
            if dst is not None:
                if isinstance(dst, FileNode):
                    # Editor save: the new file continues the memory it replaces.
                    if isinstance(src, FileNode) and src.memory_id is None and dst.memory_id is not None:
                        src.memory_id = dst.memory_id
                    self.state.delete_file(sid, dst.path)
                elif isinstance(dst, DirNode):
                    self.state.delete_dir(sid, dst.path)
            self.state.rename_prefix(sid, old_path, new_path)
            if isinstance(src, FileNode) and src.memory_id is not None and not src.unborn:
                self.state.set_file_memory_id(sid, new_path, src.memory_id)
        if dst is not None:
            self.tree.unlink_node(dst)
        self.tree.detach(src)
        self.tree.attach(pnew, src, sname)
        if isinstance(src, FileNode) and src.unborn:
            self._write_unborn_row(src)
        src.ctime_ns = t
        pold.mtime_ns = pold.ctime_ns = pnew.mtime_ns = pnew.ctime_ns = t

    # ---- things memory files cannot be -------------------------------------------------------

    def _refuse_special(self, parent_ino: int) -> None:
        parent = self.tree.dir(parent_ino)
        self.check_writable_dir(parent)
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
        self.tree.node(ino)
        raise FsError(errno.EINVAL)

    def setxattr(self, ino: int, name: bytes, value: bytes) -> None:
        self.refuse_read_only(self.tree.node(ino))
        raise FsError(errno.ENOTSUP)

    def removexattr(self, ino: int, name: bytes) -> None:
        self.setxattr(ino, name, b"")

    def getxattr(self, ino: int, name: bytes) -> bytes:
        self.tree.node(ino)
        raise FsError(errno.ENODATA)

    def listxattr(self, ino: int) -> list[bytes]:
        self.tree.node(ino)
        return []

    def statfs(self) -> StatFs:
        n = max(1, len(self.tree.stores))
        used_bytes = sum(s.bytes for s in self.tree.stores.values())
        used_files = sum(s.files for s in self.tree.stores.values())
        blocks = n * self.max_bytes // BLOCK_SIZE
        bfree = max(0, blocks - (used_bytes + BLOCK_SIZE - 1) // BLOCK_SIZE)
        files = n * self.max_files
        return StatFs(BLOCK_SIZE, blocks, bfree, files, max(0, files - used_files), MAX_COMPONENT_BYTES)

    # ---- lifecycle ---------------------------------------------------------------------------

    def stop_writes(self) -> None:
        """Every later mutation by the agent fails with EROFS (unmount). Dirty buffers still
        stage at close, and the sync-facing API keeps working (final sync)."""
        self.frozen = True
