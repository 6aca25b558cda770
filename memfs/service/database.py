"""`--db` → the service's storage: the one place that picks a backend from the URL.

- `sqlite:///PATH` (SQLAlchemy's spelling: `sqlite:///data/store.db` is relative,
  `sqlite:////var/lib/memfs/store.db` absolute) or a bare path: the SQLite backend; the file's
  directory is created if missing.
- `postgresql://…` (or `postgres://…`): the PostgreSQL backend, any libpq connection URL.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from memfs.private_files import private_dir, private_file
from memfs.service.rules import StoreService

SQLITE_SCHEME = "sqlite:///"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class DatabaseUrlError(ValueError):
    pass


def sqlite_path(db: str | os.PathLike) -> Path | None:
    """The SQLite file `db` names, or None when it names another database."""
    db = os.fspath(db)
    if db.startswith(SQLITE_SCHEME):
        return Path(db[len(SQLITE_SCHEME) :])
    if db.startswith(POSTGRES_SCHEMES):
        return None
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", db):
        raise DatabaseUrlError(
            f"--db {redacted(db)}: unknown database URL scheme; use sqlite:///PATH, a file path, or postgresql://…"
        )
    return Path(db)


def redacted(db: str) -> str:
    """The URL without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", db)


def open_storage(db: str | os.PathLike) -> StoreService:
    path = sqlite_path(db)
    if path is not None:
        from memfs.service.sqlite_backend import SqliteBackend

        if not path.parent.exists():
            private_dir(path.parent)  # a directory made for the database: only its owner's
        private_file(path)  # every store's content, private whatever the umask (and its -wal, -shm)
        return StoreService(SqliteBackend(path))
    from memfs.service.postgres_backend import PostgresBackend

    return StoreService(PostgresBackend(os.fspath(db)))
