"""Files and directories that hold memory content or a credential: private whatever the umask
(docs/OPERATIONS.md#security).

A state dir holds every store's content (state.db, kept/ copies) and its log names paths; the
service's database holds every store. Created 0700/0600 here, and tightened when memfs finds one
of its own left wider by an earlier version. SQLite gives a database's -wal and -shm files the
mode of the database file, so creating the database 0600 first keeps those private too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def _tighten(path: str | os.PathLike[str], private: int) -> None:
    st = os.stat(path)
    if st.st_uid == os.geteuid() and st.st_mode & 0o077:
        os.chmod(path, st.st_mode & private)


def private_dir(path: str | os.PathLike[str]) -> Path:
    """mkdir -p path, the last directory 0700 (its parents as the umask says)."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True, mode=0o700)
    _tighten(p, 0o700)
    return p


def private_file(path: str | os.PathLike[str]) -> None:
    """Create path 0600 if missing (never truncated); tighten it, and a database's side files."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    _tighten(path, 0o600)
    for suffix in SQLITE_SIDE_FILES:
        try:
            _tighten(f"{os.fspath(path)}{suffix}", 0o600)
        except FileNotFoundError:
            pass


def open_private_append(path: str | os.PathLike[str]) -> int:
    """A log file opened for appending, created 0600 (and tightened if it was wider)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    _tighten(path, 0o600)
    return fd


def open_private_rw(path: str | os.PathLike[str]) -> int:
    """A file of ours opened read-write, created 0600 if missing (never truncated), tightened to
    0600 if it was wider (by an earlier version), on every open. Never through a symlink
    (`O_NOFOLLOW`: ELOOP) and never anything but a regular file, so the chmod is of the file opened
    (`fchmod`), not of what a link planted in its place points to."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{os.fspath(path)} is not a regular file")
        if st.st_uid == os.geteuid() and st.st_mode & 0o077:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd
