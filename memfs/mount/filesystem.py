"""The filesystem façade: every FUSE operation as a method taking and returning plain Python
values and raising `FsError(errno)` (DESIGN.md "Filesystem core"). `fuse_ops.py` only converts
types; no pyfuse3 here, so every semantic can be tested without a kernel.

This module holds the operations themselves (lookups, attributes, directories, files, rename);
each job they share is an object of its own, built here and handed what it needs:

- the node tree (tree.py, nodes.py) and the open handles (handles.py);
- the checks: who may do what (permissions.py), which names may enter a directory (names.py);
- staging, what a close or fsync makes durable (staging.py), and the failed-writer undo
  (failed_writers.py);
- the notices log (notices.py), the sync engine's side (sync_view.py) and the kernel
  invalidation queue (invalidation.py).

The view (names, attributes) lives in memory; a read touches SQLite only for content that is not
in the state dir's LRU cache (blobs.py). Namespace changes stage at once.
"""

from __future__ import annotations

import bisect
import errno
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from memfs.limits import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, MAX_COMPONENT_BYTES, MAX_CONTENT_BYTES
from memfs.mount.access import Caller
from memfs.mount.failed_writers import FailedWriters
from memfs.mount.handles import HandleTable
from memfs.mount.invalidation import Invalidation, InvalidationQueue
from memfs.mount.names import check_replace, new_name, subtree_extent
from memfs.mount.nodes import (
    DIR_KINDS,
    VIRTUAL_KINDS,
    DirHandle,
    DirLike,
    DirNode,
    FileHandle,
    FileNode,
    Node,
    RootNode,
)
from memfs.mount.notices import NoticeLog
from memfs.mount.permissions import Permissions
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
from memfs.mount.staging import Staging, utf8_ok
from memfs.mount.state import State
from memfs.mount.sync_view import SyncView
from memfs.mount.tree import Tree
from memfs.records import LocalFile, StoreInfo


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
        # Kernel invalidations requested by the sync-facing API; fuse_ops drains them outside handlers.
        self.inval = InvalidationQueue()
        self.last_activity = 0.0  # time.monotonic() of the last FUSE request (set by the adapter)
        self.state.put_blob(b"")  # every new file starts as the empty blob
        t = self.now()
        self.tree = Tree(state, self.uid, self.gid, t)
        for info in stores:
            self.tree.load_store(info, t)
        self.handles = HandleTable()
        self.checks = Permissions(self.tree)
        self.notice_log = NoticeLog(self.tree, state, self.inval, now)
        self.staging = Staging(self.tree, state, self.notice_log)
        self.failed_writers = FailedWriters(self.tree, state, self.handles, self.inval, self.notice_log, now)
        self.sync_view = SyncView(self.tree, state, self.handles, self.inval, now)

    @property
    def frozen(self) -> bool:
        """stop_writes() was called."""
        return self.checks.frozen

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

    def invalidations_done(self, n: int) -> None:
        """The adapter reports that `n` queued invalidations reached the kernel."""
        self.inval.done(n)

    async def wait_invalidated(self, timeout: float = 5.0) -> bool:
        """Wait until every invalidation queued so far reached the kernel (call this before telling
        anyone that remote changes are visible). True when done; immediately True when nothing is
        mounted (no adapter drains the queue)."""
        return await self.inval.wait(timeout)

    # ---- who may do what (permissions.py), as the adapter asks it ---------------------------

    def permit(self, ino: int, caller: Caller, want: int) -> None:
        self.checks.permit(ino, caller, want)

    def permit_remove(self, parent_ino: int, name: bytes, caller: Caller) -> None:
        self.checks.permit_remove(parent_ino, name, caller)

    def permit_rename(
        self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes, caller: Caller
    ) -> None:
        self.checks.permit_rename(old_parent, old_name, new_parent, new_name, caller)

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
        self.checks.permit_setattr(
            ino, caller, size=size, mode=mode, owner=owner, times=times, fh=fh, new_mode=new_mode
        )

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
        self.checks.check_writable_node(node)
        if (uid is not None and uid != self.uid) or (gid is not None and gid != self.gid):
            raise FsError(errno.EPERM)
        t = self.now()
        if size is not None:
            if not isinstance(node, FileNode):
                raise FsError(errno.EISDIR)
            h = self.handles.find(fh)
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
                self.failed_writers.fail(h, e.errno or errno.EIO)
            raise
        if h is not None:
            self.staging.make_dirty(node)
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
                    self.staging.stage(node, data)  # truncate(1) stages at once
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
        return self.handles.open_dir(node)

    def readdir(self, fh: int, start: int) -> Iterator[DirEntry]:
        """Entries after cursor `start` (0 = from the beginning), lazily.

        Cursors are per-directory insertion sequence numbers, so concurrent creates and deletes
        never make an entry repeat or get skipped. The listing is a snapshot taken when a read
        starts at 0; entries removed since are left out."""
        h = self.handles.dir(fh)
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
        self.handles.close_dir(fh)

    def mkdir(self, parent_ino: int, name: bytes, mode: int = 0o755) -> Attr:
        parent = self.tree.dir(parent_ino)
        self.checks.check_writable_dir(parent)
        sname = new_name(parent, name)
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
        self.checks.check_writable_dir(parent)
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

    def open(self, ino: int, flags: int, pid: int = 0) -> OpenReply:
        """`pid`: the opening process (the failed-writer rule spans a process's new files)."""
        node = self.tree.node(ino)
        if isinstance(node, DIR_KINDS):
            raise FsError(errno.EISDIR)
        writable = (flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR)
        if writable or flags & os.O_TRUNC:
            self.checks.refuse_read_only(node)
            if isinstance(node, VIRTUAL_KINDS):
                raise FsError(errno.EACCES)  # what a non-root user gets from 0444 (SEMANTICS.md)
        h = self.handles.open_file(node, writable, pid, append=bool(flags & os.O_APPEND))
        if flags & os.O_TRUNC and writable and isinstance(node, FileNode) and self.tree.cur_size(node) > 0:
            # O_TRUNC empties the file; staged with the writer's close (no empty state staged first).
            node.store.bytes -= self.tree.cur_size(node)
            self.staging.make_dirty(node)
            node.buf = bytearray()
            node.mtime_ns = node.ctime_ns = self.now()
            h.wrote = h.changed = True
        # Content is tied to mtime (auto_inval_data) and remote changes invalidate the inode, so
        # the kernel may keep its page cache across opens; not while a buffer is dirty, and not
        # while a change's invalidation is still on its way to the kernel: the old pages it holds
        # would be read before it arrives and the new content after (a torn read), up to the old
        # size. Then the open drops the pages (no keep_cache) and the attributes (stale_attr).
        stale = self.inval.stale(node.ino)
        keep = (not isinstance(node, FileNode) or node.buf is None) and not stale
        return OpenReply(h.fh, keep_cache=keep, stale_attr=stale)

    def create(
        self, parent_ino: int, name: bytes, mode: int = 0o644, flags: int = os.O_RDWR, pid: int = 0
    ) -> tuple[OpenReply, Attr]:
        """Create and open a new file (counts one lookup)."""
        parent = self.tree.dir(parent_ino)
        self.checks.check_writable_dir(parent)
        sname = new_name(parent, name)
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
        self.staging.write_unborn_row(node)
        parent.mtime_ns = parent.ctime_ns = t
        h = self.handles.open_file(node, True, pid, append=bool(flags & os.O_APPEND))
        node.buf = bytearray()
        node.creator_fh = h.fh
        h.wrote = True
        node.lookups += 1
        return OpenReply(h.fh, keep_cache=False), self.tree.attr(node)

    def read(self, fh: int, off: int, size: int) -> bytes:
        node = self.handles.file(fh).node
        data = self.tree.content(node)
        return bytes(data[off : off + size])

    def write(self, fh: int, off: int, data: bytes) -> int:
        h = self.handles.file(fh)
        node = h.node
        self.checks.refuse_read_only(node)
        if not h.writable or not isinstance(node, FileNode):  # (open refuses writers of a virtual file)
            raise FsError(errno.EBADF)
        cur = self.tree.cur_size(node)
        if h.append:
            off = cur  # O_APPEND: the end as the mount knows it (FileHandle.append says why)
        end = off + len(data)
        grow = max(0, end - cur)
        if end > MAX_CONTENT_BYTES:
            self.failed_writers.fail(h, errno.EFBIG)
            raise FsError(errno.EFBIG)
        if grow and node.linked and node.store.bytes + grow > self.max_bytes:
            self.failed_writers.fail(h, errno.ENOSPC)
            raise FsError(errno.ENOSPC)
        self.staging.make_dirty(node)
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

    def flush(self, fh: int) -> None:
        """close(): stage what this handle wrote (EILSEQ if it is not UTF-8). A failed handle
        stages nothing: the file returns to its last staged state and close() gets the error."""
        h = self.handles.file(fh)
        node = h.node
        if not isinstance(node, FileNode):
            return  # a reader of a virtual file: nothing to stage
        if h.failed:
            self.failed_writers.give_up(h)
            raise FsError(h.failed)
        if not h.wrote:
            return
        h.wrote = False
        if node.buf is not None and node.linked:
            # For a new file this is durability only: a FLUSH also comes for every close of a
            # copy of the fd (bash's `> f` dup2s and closes the original; a fork + exec closes
            # its O_CLOEXEC copies), while the writer is still at work. It becomes part of what
            # the sync may push at its creating handle's release (Staging.birth_at).
            self.staging.stage(node, node.buf)

    def fsync(self, fh: int, datasync: bool = False) -> None:
        h = self.handles.file(fh)
        node = h.node
        if not isinstance(node, FileNode) or not node.linked:
            return
        if h.failed:
            raise FsError(h.failed)  # nothing of a failed handle is staged, not even by fsync
        if node.buf is not None and h.wrote and not utf8_ok(node.buf):
            self.failed_writers.fail(
                h, errno.EILSEQ
            )  # the writer is told now; its close undoes it (SEMANTICS.md)
            raise FsError(errno.EILSEQ)
        h.wrote = False
        try:
            if node.buf is not None:
                self.staging.stage(node, node.buf)
        finally:
            self.state.durable()  # the content is in state.db with its row
            self.staging.birth_at(h)  # an fsync by its creator: the writer vouches for this state

    def release(self, fh: int) -> None:
        h = self.handles.close_file(fh)
        if h is None:
            return
        node = h.node
        if isinstance(node, FileNode):
            if h.failed:
                self.failed_writers.give_up(h)  # release without a flush (or after one): still undone
            else:
                if h.wrote and node.buf is not None and node.linked:
                    try:  # no close() reported this handle's writes (flush normally did)
                        self.staging.stage(node, node.buf)
                    except FsError:
                        pass
                self.staging.birth_at(h)
            if node.creator_fh == h.fh:
                node.creator_fh = 0
        self.tree.maybe_free(node)

    def unlink(self, parent_ino: int, name: bytes) -> None:
        parent = self.tree.dir(parent_ino)
        self.checks.check_writable_dir(parent)
        node = self.tree.child(parent, name)
        if isinstance(node, VIRTUAL_KINDS):
            raise FsError(errno.EPERM)
        if not isinstance(node, FileNode):
            raise FsError(errno.EISDIR)
        self.state.delete_file(node.store.info.store_id, node.path)
        path, staged = node.path, self.staging.staged_state(node)
        self.tree.unlink_node(node)
        if staged is not None:
            node.store.replaced[path] = staged  # (unlink + create: tar x)
        parent.mtime_ns = parent.ctime_ns = self.now()

    def rename(
        self, parent_old: int, name_old: bytes, parent_new: int, name_new: bytes, flags: int = 0
    ) -> None:
        pold, pnew = self.tree.dir(parent_old), self.tree.dir(parent_new)
        src = self._rename_source(pold, pnew, name_old, flags)
        depth, longest = subtree_extent(src)
        sname = new_name(pnew, name_new, depth_below=depth, longest_below=longest)
        dst = pnew.children.get(sname)
        if dst is src:
            return
        if dst is not None and flags & RENAME_NOREPLACE:
            raise FsError(errno.EEXIST)
        check_replace(src, dst, pnew)
        t = self.now()
        if isinstance(src, FileNode) and src.unborn and src.replaces is None and isinstance(dst, FileNode):
            # A new file renamed over a staged one while its writer is still at work: the sync
            # keeps seeing the replaced file there until that writer closes (or fails).
            src.replaces = self.staging.staged_state(dst)
        self._rename_rows(src, dst, f"{pnew.path}/{sname}")
        if dst is not None:
            self.tree.unlink_node(dst)
        self.tree.detach(src)
        self.tree.attach(pnew, src, sname)
        if isinstance(src, FileNode) and src.unborn:
            self.staging.write_unborn_row(src)
        src.ctime_ns = t
        pold.mtime_ns = pold.ctime_ns = pnew.mtime_ns = pnew.ctime_ns = t

    def _rename_source(self, pold: DirLike, pnew: DirLike, name_old: bytes, flags: int) -> FileNode | DirNode:
        """What a rename from `pold` to `pnew` moves, when it may move at all."""
        self.checks.check_writable_dir(pold)
        self.checks.check_writable_dir(pnew)
        assert not isinstance(pold, RootNode) and not isinstance(pnew, RootNode)  # (EROFS above)
        src = self.tree.child(pold, name_old)
        if not isinstance(src, (FileNode, DirNode)):  # the virtual files of a store root
            raise FsError(errno.EPERM)
        if pold.store is not pnew.store:
            raise FsError(errno.EXDEV)  # mv falls back to copy + delete
        if flags & RENAME_EXCHANGE:
            raise FsError(errno.EINVAL)
        return src

    def _rename_rows(self, src: FileNode | DirNode, dst: Node | None, new_path: str) -> None:
        """The rename in state.db, in one commit: what it replaces goes, `src`'s rows move."""
        sid = src.store.info.store_id
        with self.state.transaction():
            if isinstance(dst, FileNode):
                # Editor save: the new file continues the memory it replaces.
                if isinstance(src, FileNode) and src.memory_id is None and dst.memory_id is not None:
                    src.memory_id = dst.memory_id
                self.state.delete_file(sid, dst.path)
            elif isinstance(dst, DirNode):
                self.state.delete_dir(sid, dst.path)
            self.state.rename_prefix(sid, src.path, new_path)
            if isinstance(src, FileNode) and src.memory_id is not None and not src.unborn:
                self.state.set_file_memory_id(sid, new_path, src.memory_id)

    # ---- the sync engine's View port (sync_view.py) and the notices -------------------------

    def local_view(self, store_id: str) -> dict[str, LocalFile]:
        return self.sync_view.local_view(store_id)

    def local_file(self, store_id: str, path: str) -> LocalFile | None:
        return self.sync_view.local_file(store_id, path)

    def dirty_paths(self, store_id: str) -> set[str]:
        return self.sync_view.dirty_paths(store_id)

    def open_paths(self, store_id: str) -> set[str]:
        return self.sync_view.open_paths(store_id)

    def dir_paths(self, store_id: str) -> set[str]:
        return self.sync_view.dir_paths(store_id)

    def totals(self, store_id: str) -> tuple[int, int]:
        return self.sync_view.totals(store_id)

    def apply_remote(
        self, store_id: str, path: str, memory_id: str | None, sha: str, content: bytes, mtime_ns: int | None
    ) -> None:
        self.sync_view.apply_remote(store_id, path, memory_id, sha, content, mtime_ns)

    def apply_stored(
        self, store_id: str, path: str, memory_id: str | None, sha: str, size: int, mtime_ns: int | None
    ) -> None:
        self.sync_view.apply_stored(store_id, path, memory_id, sha, size, mtime_ns)

    def apply_stored_many(
        self, store_id: str, items: list[tuple[str, str | None, str, int, int | None]]
    ) -> None:
        self.sync_view.apply_stored_many(store_id, items)

    def move_path(self, store_id: str, old: str, new: str) -> None:
        self.sync_view.move_path(store_id, old, new)

    def remove_path(self, store_id: str, path: str) -> None:
        self.sync_view.remove_path(store_id, path)

    def set_memory_id(self, store_id: str, path: str, memory_id: str | None) -> None:
        self.sync_view.set_memory_id(store_id, path, memory_id)

    def live_shas(self) -> set[str]:
        return self.sync_view.live_shas()

    def add_notice(self, store_id: str, kind: str, path: str, details: str = "") -> str:
        return self.notice_log.add(store_id, kind, path, details)

    def store_archived(self, store_id: str) -> None:
        """The store was archived (SEMANTICS.md#d-archived): from now on every mutation in it is
        EROFS, as in a read_only store; its files stay readable and what is staged stays staged."""
        st = self.tree.store(store_id)
        st.archived = True
        self.inval.inode(st.root)  # its mode (0555 now) is read again
        self.inval.wake()

    def notices(self, store_id: str) -> list[str]:
        return self.notice_log.lines(store_id)

    # ---- things memory files cannot be -------------------------------------------------------

    def _refuse_special(self, parent_ino: int) -> None:
        parent = self.tree.dir(parent_ino)
        self.checks.check_writable_dir(parent)
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
        self.checks.refuse_read_only(self.tree.node(ino))
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
        self.checks.freeze()
