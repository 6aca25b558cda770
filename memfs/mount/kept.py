"""Kept copies: content the agent lost (a conflict, a delete on the store) saved as plain files
under kept/<store>/<UTC time>-<n>/<path>, outside the database so a person can pick them up."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from memfs.mount.statedb import StateDb


def _utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class KeptCopies(StateDb):
    _keep_counter = 0

    def keep_copy(self, store_id: str, path: str, data: bytes) -> Path:
        """Keep content the agent lost (conflict, store delete): kept/<store>/<UTC time>-<n>/<path>.

        Written durably (fsync) since it exists exactly because it is nowhere else."""
        with self._mutex:
            self._keep_counter += 1
            n = self._keep_counter
        rel = path.lstrip("/") or "unnamed"
        target = self.kept_dir / store_id / f"{_utc_stamp()}-{n}" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".tmp-{os.getpid()}-{n}"
        # 0600: content the agent lost, under a private state dir (memfs/private_files.py) too
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(bytes(data))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)
        return target
