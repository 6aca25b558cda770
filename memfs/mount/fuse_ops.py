"""Thin pyfuse3 adapter over `filesystem.Filesystem`: type conversion, error mapping, invalidations.

Every handler is wrapped so that an unexpected exception is logged and becomes EIO: an exception
other than FUSEError escaping a handler would end pyfuse3.main() and kill the mount. Handlers are
synchronous underneath (the core never blocks on the network), so each runs to completion on the
trio thread.
"""

from __future__ import annotations

import errno
import functools
import logging
import time
from collections.abc import Callable

import pyfuse3
import trio

from memfs.mount import replies
from memfs.mount.access import Caller, R, W, X, open_wants
from memfs.mount.filesystem import Filesystem
from memfs.mount.replies import Attr, FsError

log = logging.getLogger("memfs.mount.fuse")

# Entry/attr cache lifetime in the kernel (docs/SEMANTICS.md#d-kernel-cache). Long, because every
# change the mount makes outside a request of the node (a pull, a notice, a failed writer's undo)
# invalidates it actively; the lifetime only bounds how long an invalidation that never reached
# the kernel could show a stale name or size. Revisits within it cost no LOOKUP/GETATTR.
TIMEOUT = 60.0


_monotonic = time.monotonic
FUSEError = pyfuse3.FUSEError


def _unexpected(name: str, args: tuple) -> pyfuse3.FUSEError:
    log.exception("%s%r failed unexpectedly; answering EIO", name, args[:-1] if args else ())
    return FUSEError(errno.EIO)


def _handler(fn: Callable) -> Callable:
    # On every request's path: no work here that the request does not need (no logging call, no
    # attribute chain; a try block costs nothing until something raises).
    name = fn.__name__

    @functools.wraps(fn)
    async def wrapper(self: FuseOps, *args):
        self.fs.last_activity = _monotonic()  # the sync timer waits for a quiet mount (SEMANTICS.md#d-when)
        try:
            return fn(self, *args)
        except FsError as e:
            raise FUSEError(e.errno or errno.EIO) from None  # FsError always has one
        except FUSEError:
            raise
        except Exception:
            raise _unexpected(name, args) from None

    return wrapper


class FuseOps(pyfuse3.Operations):
    enable_writeback_cache = False  # the kernel would own size/mtime and ignore remote changes
    supports_dot_lookup = True

    def __init__(self, fs: Filesystem, *, timeout: float = TIMEOUT):
        super().__init__()
        self.fs = fs
        self.timeout = timeout
        self._wakeup = trio.Event()
        fs.on_invalidate = self._wake

    def _wake(self) -> None:
        self._wakeup.set()

    # ---- conversion ------------------------------------------------------------------------

    def _entry(self, a: Attr) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = a.ino
        e.generation = 0
        e.entry_timeout = 0 if a.guarded else self.timeout
        e.attr_timeout = self.timeout
        e.st_mode = a.mode
        e.st_nlink = a.nlink
        e.st_uid = a.uid
        e.st_gid = a.gid
        e.st_rdev = 0
        e.st_size = a.size
        e.st_blksize = replies.BLOCK_SIZE
        e.st_blocks = a.blocks
        e.st_atime_ns = a.atime_ns
        e.st_mtime_ns = a.mtime_ns
        e.st_ctime_ns = a.ctime_ns
        return e

    def _opened(self, inode: int, reply: replies.OpenReply) -> pyfuse3.FileInfo:
        """An open's answer. When a change's invalidation of the file has not reached the kernel
        yet (`OpenReply.stale_attr`), its attributes are dropped here, in the handler: an
        attributes-only invalidation takes none of the locks an open holds (no page is touched,
        there is no writeback cache), so unlike the queue's page invalidations it cannot
        deadlock on the request it answers. The kernel then asks the size again before the
        opener's first read, and the reply's missing keep_cache drops the old pages."""
        if reply.stale_attr:
            _invalidate_batch([("inode", inode, True)])
        return self._info(reply)

    @staticmethod
    def _info(reply: replies.OpenReply) -> pyfuse3.FileInfo:
        return pyfuse3.FileInfo(
            fh=reply.fh, direct_io=reply.direct_io, keep_cache=reply.keep_cache, nonseekable=False
        )

    @staticmethod
    def _caller(ctx: pyfuse3.RequestContext) -> Caller:
        return Caller(ctx.uid, ctx.gid, ctx.pid)

    # ---- handlers --------------------------------------------------------------------------
    # Each handler that the kernel would have permission-checked under `default_permissions` asks
    # the core first (fs.permit*): the mount runs without that option (see access.py).

    @_handler
    def lookup(self, parent_inode, name, ctx):
        self.fs.permit(parent_inode, self._caller(ctx), X)
        return self._entry(self.fs.lookup(parent_inode, name))

    async def forget(self, inode_list):
        try:  # must not raise: there is no request to answer
            self.fs.forget(inode_list)
        except Exception:
            log.exception("forget failed")

    @_handler
    def getattr(self, inode, ctx):
        return self._entry(self.fs.getattr(inode))

    @_handler
    def setattr(self, inode, attr, fields, fh, ctx):
        self.fs.permit_setattr(
            inode,
            self._caller(ctx),
            size=fields.update_size,
            mode=fields.update_mode,
            owner=fields.update_uid or fields.update_gid,
            times=fields.update_atime or fields.update_mtime,
            fh=fh,
            new_mode=attr.st_mode if fields.update_mode else None,  # a writer's kill-suid request
        )
        return self._entry(
            self.fs.setattr(
                inode,
                size=attr.st_size if fields.update_size else None,
                mode=attr.st_mode if fields.update_mode else None,
                uid=attr.st_uid if fields.update_uid else None,
                gid=attr.st_gid if fields.update_gid else None,
                atime_ns=attr.st_atime_ns if fields.update_atime else None,
                mtime_ns=attr.st_mtime_ns if fields.update_mtime else None,
                fh=fh,
            )
        )

    @_handler
    def access(self, inode, mode, ctx):
        # access(2), faccessat(2), chdir(2): the same check an operation would get, so `test -w`
        # in a read_only store answers EROFS like a read-only filesystem does.
        self.fs.permit(inode, self._caller(ctx), mode)
        return True

    @_handler
    def readlink(self, inode, ctx):
        return self.fs.readlink(inode)

    @_handler
    def mknod(self, parent_inode, name, mode, rdev, ctx):
        self.fs.permit(parent_inode, self._caller(ctx), W | X)
        return self._entry(self.fs.mknod(parent_inode, name, mode, rdev))

    @_handler
    def mkdir(self, parent_inode, name, mode, ctx):
        self.fs.permit(parent_inode, self._caller(ctx), W | X)
        return self._entry(self.fs.mkdir(parent_inode, name, mode))

    @_handler
    def unlink(self, parent_inode, name, ctx):
        self.fs.permit_remove(parent_inode, name, self._caller(ctx))
        self.fs.unlink(parent_inode, name)

    @_handler
    def rmdir(self, parent_inode, name, ctx):
        self.fs.permit_remove(parent_inode, name, self._caller(ctx))
        self.fs.rmdir(parent_inode, name)

    @_handler
    def symlink(self, parent_inode, name, target, ctx):
        self.fs.permit(parent_inode, self._caller(ctx), W | X)
        return self._entry(self.fs.symlink(parent_inode, name, target))

    @_handler
    def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        if flags & ~(pyfuse3.RENAME_NOREPLACE | pyfuse3.RENAME_EXCHANGE):
            # RENAME_WHITEOUT (or a flag to come): a store has no whiteouts. Done as a plain
            # rename, the caller (an overlayfs) would believe a whiteout is in place; EINVAL is
            # the kernel's answer for a flag a filesystem does not support.
            raise FUSEError(errno.EINVAL)
        self.fs.permit_rename(parent_inode_old, name_old, parent_inode_new, name_new, self._caller(ctx))
        f = 0
        if flags & pyfuse3.RENAME_NOREPLACE:
            f |= replies.RENAME_NOREPLACE
        if flags & pyfuse3.RENAME_EXCHANGE:
            f |= replies.RENAME_EXCHANGE
        self.fs.rename(parent_inode_old, name_old, parent_inode_new, name_new, f)

    @_handler
    def link(self, inode, new_parent_inode, new_name, ctx):
        self.fs.permit(new_parent_inode, self._caller(ctx), W | X)
        return self._entry(self.fs.link(inode, new_parent_inode, new_name))

    @_handler
    def open(self, inode, flags, ctx):
        self.fs.permit(inode, self._caller(ctx), open_wants(flags))
        return self._opened(inode, self.fs.open(inode, flags, ctx.pid))

    @_handler
    def read(self, fh, off, size):
        return self.fs.read(fh, off, size)

    @_handler
    def write(self, fh, off, buf):
        return self.fs.write(fh, off, buf)

    async def flush(self, fh):
        # One coroutine, not the wrapper's two: a FLUSH comes with every close(), also of every
        # file `grep -r` reads (a reader's flush stages nothing and queues nothing).
        fs = self.fs
        fs.last_activity = _monotonic()
        queued = fs.inval.pushed
        try:
            fs.flush(fh)
        except FsError as e:
            raise FUSEError(e.errno or errno.EIO) from None
        except FUSEError:
            raise
        except Exception:
            raise _unexpected("flush", (fh, None)) from None
        finally:
            if fs.inval.pushed != queued:
                # A failed writer was undone (its new file removed, or the old content back):
                # close() returns once the kernel has dropped what it cached of that writer, so
                # an `ls` or `cat` right after it never shows the undone state. Awaited, not run
                # here: the invalidator's thread does it. Bounded, because the mount serves
                # FUSE requests from one task (runner.MAX_TASKS): should another process's
                # request in that directory hold the lock the invalidation needs, it is read
                # only after this returns, and the invalidation lands right after it.
                await fs.wait_invalidated(1.0)

    @_handler
    def release(self, fh):
        self.fs.release(fh)

    @_handler
    def fsync(self, fh, datasync):
        self.fs.fsync(fh, datasync)

    @_handler
    def opendir(self, inode, ctx):
        self.fs.permit(inode, self._caller(ctx), R)
        return self.fs.opendir(inode)

    @_handler
    def readdir(self, fh, start_id, token):
        reply, to_entry, count = pyfuse3.readdir_reply, self._entry, self.fs.count_lookup
        for entry in self.fs.readdir(fh, start_id):
            if not reply(token, entry.name, to_entry(entry.attr), entry.cursor):
                break  # the kernel's buffer is full: this entry was not taken, don't count it
            count(entry)

    @_handler
    def releasedir(self, fh):
        self.fs.releasedir(fh)

    @_handler
    def fsyncdir(self, fh, datasync):
        self.fs.state.durable()

    @_handler
    def statfs(self, ctx):
        s = self.fs.statfs()
        d = pyfuse3.StatvfsData()
        d.f_bsize = d.f_frsize = s.bsize
        d.f_blocks = s.blocks
        d.f_bfree = d.f_bavail = s.bfree
        d.f_files = s.files
        d.f_ffree = d.f_favail = s.ffree
        d.f_namemax = s.namemax
        return d

    @_handler
    def setxattr(self, inode, name, value, ctx):
        self.fs.setxattr(inode, name, value)

    @_handler
    def getxattr(self, inode, name, ctx):
        # memfs keeps no extended attributes. ENOSYS, answered once, makes the kernel answer every
        # later getxattr itself (EOPNOTSUPP) without a round trip to this process: `ls -l` asks
        # two or three names per entry, and every write() asks for security.capability
        # (file_remove_privs). See docs/PERFORMANCE.md.
        try:
            self.fs.getxattr(inode, name)  # ENOENT for an inode we do not know
        except FsError as e:
            if e.errno != errno.ENODATA:
                raise
        raise pyfuse3.FUSEError(errno.ENOSYS)

    @_handler
    def listxattr(self, inode, ctx):
        return self.fs.listxattr(inode)

    @_handler
    def removexattr(self, inode, name, ctx):
        self.fs.removexattr(inode, name)

    @_handler
    def create(self, parent_inode, name, mode, flags, ctx):
        self.fs.permit(parent_inode, self._caller(ctx), W | X)
        reply, attr = self.fs.create(parent_inode, name, mode, flags, ctx.pid)
        return self._opened(attr.ino, reply), self._entry(attr)

    # ---- kernel cache invalidation -----------------------------------------------------------

    async def invalidator(self) -> None:
        """Drain the core's invalidation queue, outside every handler (never deadlocks them).

        The kernel calls may block until a related request finishes, so they run in a worker
        thread while the trio thread keeps serving requests."""
        q = self.fs.invalidations
        while True:
            if not q:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                continue
            batch = []
            while q:
                batch.append(q.popleft())
            await trio.to_thread.run_sync(_invalidate_batch, batch, abandon_on_cancel=True)
            self.fs.invalidations_done(len(batch))


def _invalidate_batch(batch: list[tuple]) -> None:
    for item in batch:
        try:
            if item[0] == "entry":
                pyfuse3.invalidate_entry(item[1], item[2])
            else:
                pyfuse3.invalidate_inode(item[1], attr_only=item[2])
        except (FileNotFoundError, OSError) as e:
            # ENOENT: the kernel never saw that name/inode; anything else: not worth dying for.
            if getattr(e, "errno", None) != errno.ENOENT:
                log.debug("invalidation %r failed: %s", item, e)
        except Exception:
            log.exception("invalidation %r failed", item)
