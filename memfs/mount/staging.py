"""Staging: what a file's close or fsync makes durable, and what the sync may then push.

`flush`/`fsync` stage a file's content: the blob, then the `files` row, in one commit. A file
created by a writer that has not closed it yet is "unborn": it is in the view for the agent but
not in what the sync sees (`staged_state`), and its durable row says what a restart must show
at its path. The creating handle's close (or fsync) makes it born (`birth_at`).
"""

from __future__ import annotations

import errno

from memfs.mount.blobs import EMPTY_SHA
from memfs.mount.nodes import FileHandle, FileNode
from memfs.mount.notices import NoticeLog
from memfs.mount.replies import FsError
from memfs.mount.state import State
from memfs.mount.tree import Tree
from memfs.mount.view_rows import FLAG_BAD_UTF8, FLAG_UNBORN, FileState


def utf8_ok(data: bytes | bytearray) -> bool:
    try:
        bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class Staging:
    def __init__(self, tree: Tree, state: State, notices: NoticeLog):
        self.tree, self.state, self.notices = tree, state, notices

    def stage(self, node: FileNode, data: bytes | bytearray) -> None:
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
                self.notices.add(
                    st.info.store_id,
                    "upload-refused",
                    node.path,
                    "content is not valid UTF-8; kept in this mount only until it is fixed",
                )
            raise FsError(errno.EILSEQ)

    def make_dirty(self, node: FileNode) -> None:
        """Give `node` a buffer holding its staged content (remembering the staged mtime)."""
        if node.buf is None:
            node.clean_mtime = node.mtime_ns
            node.buf = bytearray(self.tree.committed(node))

    def write_unborn_row(self, node: FileNode) -> None:
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

    @staticmethod
    def staged_state(node: FileNode) -> FileState | None:
        """What the sync sees of a file now (None: nothing, an unborn file of its own)."""
        if node.unborn:
            return node.replaces
        mtime = node.clean_mtime if node.buf is not None else node.mtime_ns
        flags = FLAG_BAD_UTF8 if node.bad_utf8 else 0
        return FileState(node.memory_id, node.sha, node.size, mtime, node.mode, flags)

    def birth_at(self, h: FileHandle) -> None:
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
