"""The view's durable rows: files, directories and notice lines, per store (the `files`, `dirs`
and `notices` tables). The filesystem core writes them as it stages, and rebuilds its tree from
them at start."""

from __future__ import annotations

from dataclasses import dataclass

from memfs.limits import NOTICES_KEPT
from memfs.mount.statedb import StateDb

FLAG_BAD_UTF8 = 1  # files.flags bit: content is not UTF-8, never pushed
FLAG_UNBORN = 2  # files.flags bit: created by a writer that has not closed it; dropped at restart


@dataclass(frozen=True, slots=True)
class FileState:
    """A file's committed state (what its last close staged): a row of `files`, keyed by its path,
    which a restart shows again; and a node's `replaces`, the state a failed writer returns the
    path to. The path is not in it: a row's is its key, a node's is where the node stands now."""

    memory_id: str | None
    sha: str
    size: int
    mtime_ns: int
    mode: int
    flags: int

    @property
    def bad_utf8(self) -> bool:
        return bool(self.flags & FLAG_BAD_UTF8)

    @property
    def unborn(self) -> bool:
        return bool(self.flags & FLAG_UNBORN)


@dataclass(frozen=True, slots=True)
class DirRow:
    path: str
    mtime_ns: int
    mode: int


class ViewRows(StateDb):
    # ---- files (the local view) ------------------------------------------------------------

    def load_files(self, store_id: str) -> dict[str, FileState]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT path, memory_id, sha, size, mtime_ns, mode, flags FROM files "
                "WHERE store_id=? ORDER BY path",
                (store_id,),
            ).fetchall()
        return {r[0]: FileState(*r[1:]) for r in rows}

    def upsert_file(
        self,
        store_id: str,
        path: str,
        memory_id: str | None,
        sha: str,
        size: int,
        mtime_ns: int,
        mode: int = 0o644,
        flags: int = 0,
    ) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO files(store_id, path, memory_id, sha, size, mtime_ns, mode, flags) "
                "VALUES(?,?,?,?,?,?,?,?)",
                (store_id, path, memory_id, sha, size, mtime_ns, mode, flags),
            )

    def upsert_files(
        self, store_id: str, rows: list[tuple[str, str | None, str, int, int, int, int]]
    ) -> None:
        """upsert_file for many (path, memory_id, sha, size, mtime_ns, mode, flags), one statement."""
        self._bump(store_id)
        with self.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO files(store_id, path, memory_id, sha, size, mtime_ns, mode, flags) "
                "VALUES(?,?,?,?,?,?,?,?)",
                ((store_id, *r) for r in rows),
            )

    def delete_file(self, store_id: str, path: str) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute("DELETE FROM files WHERE store_id=? AND path=?", (store_id, path))

    def set_file_memory_id(self, store_id: str, path: str, memory_id: str | None) -> None:
        self._bump(store_id)
        with self.transaction() as db:
            db.execute(
                "UPDATE files SET memory_id=? WHERE store_id=? AND path=?", (memory_id, store_id, path)
            )

    def rename_prefix(self, store_id: str, old: str, new: str) -> None:
        """Move `old` and everything below it (files and dirs) to `new`, in one transaction."""
        self._bump(store_id)
        n = len(old)
        with self.transaction() as db:
            for table in ("files", "dirs"):
                db.execute(
                    f"UPDATE {table} SET path = ? || substr(path, ?) "
                    "WHERE store_id=? AND (path=? OR substr(path, 1, ?)=?)",
                    (new, n + 1, store_id, old, n + 1, old + "/"),
                )

    # ---- dirs ------------------------------------------------------------------------------

    def load_dirs(self, store_id: str) -> dict[str, DirRow]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT path, mtime_ns, mode FROM dirs WHERE store_id=? ORDER BY path", (store_id,)
            ).fetchall()
        return {r[0]: DirRow(*r) for r in rows}

    def upsert_dir(self, store_id: str, path: str, mtime_ns: int, mode: int = 0o755) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO dirs(store_id, path, mtime_ns, mode) VALUES(?,?,?,?)",
                (store_id, path, mtime_ns, mode),
            )

    def upsert_dirs(self, store_id: str, rows: list[tuple[str, int, int]]) -> None:
        """upsert_dir for many (path, mtime_ns, mode), one statement."""
        with self.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO dirs(store_id, path, mtime_ns, mode) VALUES(?,?,?,?)",
                ((store_id, *r) for r in rows),
            )

    def delete_dir(self, store_id: str, path: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM dirs WHERE store_id=? AND path=?", (store_id, path))

    # ---- notices ---------------------------------------------------------------------------

    def add_notice(self, store_id: str, line: str) -> None:
        """Append one line; only the last NOTICES_KEPT lines per store are kept."""
        with self.transaction() as db:
            (top,) = db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM notices WHERE store_id=?", (store_id,)
            ).fetchone()
            db.execute("INSERT INTO notices(store_id, seq, line) VALUES(?,?,?)", (store_id, top + 1, line))
            db.execute("DELETE FROM notices WHERE store_id=? AND seq<=?", (store_id, top + 1 - NOTICES_KEPT))

    def notices(self, store_id: str) -> list[str]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT line FROM notices WHERE store_id=? ORDER BY seq", (store_id,)
            ).fetchall()
        return [r[0] for r in rows]
