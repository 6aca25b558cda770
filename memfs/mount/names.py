"""The checks on a name before it enters a directory, and on what a rename may replace.

Pure: they read the nodes and raise FsError(errno); nothing changes here.
"""

from __future__ import annotations

import errno

from memfs.limits import MAX_PATH_BYTES, MAX_SEGMENTS, RESERVED_NAMES, PathError, check_component_bytes
from memfs.mount.nodes import DirLike, DirNode, FileNode, Node, StoreRootNode
from memfs.mount.replies import FsError


def new_name(parent: DirLike, raw: bytes, *, depth_below: int = 0, longest_below: int = 0) -> str:
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
    if len(path.encode()) + longest_below > MAX_PATH_BYTES or path.count("/") + depth_below > MAX_SEGMENTS:
        raise FsError(errno.ENAMETOOLONG)
    return name


def subtree_extent(node: Node) -> tuple[int, int]:
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


def check_replace(src: FileNode | DirNode, dst: Node | None, new_parent: DirLike) -> None:
    """rename(2)'s rules on what `src` may become and replace: a directory not into its own
    subtree, and only over an empty directory; a file never over a directory."""
    if isinstance(src, DirNode):
        p: DirLike | None = new_parent
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
