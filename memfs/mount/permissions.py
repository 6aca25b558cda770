"""Who may do what to which node: the checks the adapter asks before each operation, and the
read-only rules every mutation applies (access.py holds the mode-bit rules themselves).

The adapter asks these on behalf of the calling process (the mount has no
`default_permissions`: see access.py). Read-only first, like a read-only filesystem, so every user
gets EROFS there; then search permission on every ancestor (the path walk); then the inode's own
mode bits.
"""

from __future__ import annotations

import errno
import stat

from memfs.mount.access import Caller, W, X, allowed, may_change_owner_fields, sticky_allows
from memfs.mount.nodes import VIRTUAL_KINDS, DirLike, DirNode, Node, RootNode, StoreRootNode
from memfs.mount.replies import FsError
from memfs.mount.tree import Tree


class Permissions:
    """The permit_* checks the adapter asks, and the read-only rules every mutation applies."""

    def __init__(self, tree: Tree):
        self.tree = tree
        self.frozen = False  # stop_writes() was called: every mutation by the agent is EROFS

    def freeze(self) -> None:
        """From now on every mutation by the agent is EROFS (the mount is stopping)."""
        self.frozen = True

    def refuse_read_only(self, node: Node) -> None:
        """EROFS for the root, anything in a read_only (or archived) store, and everything after stop_writes()."""
        if self.frozen or isinstance(node, RootNode) or node.store.read_only:
            raise FsError(errno.EROFS)

    def check_writable_dir(self, d: DirLike) -> None:
        self.refuse_read_only(d)
        if not d.linked:
            raise FsError(errno.ENOENT)

    def check_writable_node(self, node: Node) -> None:
        if isinstance(node, StoreRootNode):  # a store's own directory is fixed (mode, name, existence)
            raise FsError(errno.EROFS)
        self.refuse_read_only(node)
        if isinstance(node, VIRTUAL_KINDS):
            raise FsError(errno.EPERM)

    def permit(self, ino: int, caller: Caller, want: int) -> None:
        """EROFS/EACCES unless `caller` may `want` (access.R|W|X, 0 = exists) on `ino`."""
        tree = self.tree
        node = tree.node(ino)
        if want & W:
            self.refuse_read_only(node)
        self._permit_search(node, caller)
        if want and not allowed(tree.mode(node), tree.uid, tree.gid, caller, want):
            raise FsError(errno.EACCES)

    def permit_remove(self, parent_ino: int, name: bytes, caller: Caller) -> None:
        """unlink, rmdir, and the source of a rename: write+search on the directory, and the
        sticky bit's rule."""
        self.permit(parent_ino, caller, W | X)
        if not sticky_allows(self.tree.mode(self.tree.node(parent_ino)), self.tree.uid, caller):
            raise FsError(errno.EPERM)

    def permit_rename(
        self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes, caller: Caller
    ) -> None:
        self.permit_remove(old_parent, old_name, caller)
        self.permit(new_parent, caller, W | X)
        if not sticky_allows(self.tree.mode(self.tree.node(new_parent)), self.tree.uid, caller):
            raise FsError(errno.EPERM)
        if old_parent != new_parent:
            node = self.tree.dir(old_parent).children.get(old_name.decode("utf-8", "replace"))
            if isinstance(node, DirNode):
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
        tree = self.tree
        node = tree.node(ino)
        if size or mode or owner or times:
            self.refuse_read_only(node)
        self._permit_search(node, caller)
        writable = allowed(tree.mode(node), tree.uid, tree.gid, caller, W)
        if (mode or owner) and not may_change_owner_fields(tree.uid, caller):
            # A write (or O_TRUNC) by a non-owner makes the kernel ask us to drop setuid/setgid
            # (file_remove_privs: a SETATTR with the new mode, on behalf of the writer). That
            # one change is allowed to whoever may write the file; any other chmod is EPERM.
            if owner or new_mode is None or not writable or not self._drops_privs_only(node, new_mode):
                raise FsError(errno.EPERM)
        if size and fh is None and not writable:  # ftruncate was checked when the file was opened
            raise FsError(errno.EACCES)
        if times and not (may_change_owner_fields(tree.uid, caller) or writable):
            raise FsError(errno.EACCES)

    @staticmethod
    def _drops_privs_only(node: Node, new_mode: int) -> bool:
        """`new_mode` is the kernel's kill-priv mode: setuid cleared, and setgid where group-exec
        is set (should_remove_suid), nothing else changed."""
        cur = node.mode & 0o7777
        kill = stat.S_ISUID | (stat.S_ISGID if cur & stat.S_IXGRP else 0)
        new = new_mode & 0o7777
        return new != cur and new == cur & ~kill

    def _permit_search(self, node: Node, caller: Caller) -> None:
        if caller.root or not node.linked:
            return  # root searches anything; an unlinked inode has no path left to walk
        tree = self.tree
        p = node.parent
        while p is not None:
            if not allowed(tree.mode(p), tree.uid, tree.gid, caller, X):
                raise FsError(errno.EACCES)
            p = p.parent
