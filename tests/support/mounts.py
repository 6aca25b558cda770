"""Real FUSE mounts for tests: run them in a subprocess, always unmount in teardown.

A bug in the filesystem must not wedge pytest: the mount is served by another process, every
shell command against it runs with a timeout, and teardown escalates `fusermount3 -u` → `-uz` →
SIGKILL until nothing is left mounted.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memfs.mount.mount_table import mounted_at
from tests.support import logcheck

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
SYSTEM_PYTHON = "/usr/bin/python3"


def force_unmount(path: str | os.PathLike[str], *, timeout: float = 10.0) -> None:
    """Unmount `path` whatever state it is in: `fusermount3 -u`, then lazy `-uz`."""
    p = os.fspath(path)
    for args in (["fusermount3", "-u", p], ["fusermount3", "-uz", p], ["umount", "-l", p]):
        if not mounted_at(p):
            return
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            subprocess.run(args, capture_output=True, timeout=timeout)
        deadline = time.monotonic() + 2
        while mounted_at(p) and time.monotonic() < deadline:
            time.sleep(0.05)


@dataclass(frozen=True)
class User:
    """An unprivileged identity to run shell tools as (setpriv, from util-linux)."""

    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    def argv(self) -> list[str]:
        groups = ["--groups", ",".join(map(str, self.groups))] if self.groups else ["--clear-groups"]
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", *groups, "--"]


def open_dir(prefix: str) -> Path:
    """A fresh directory every user can reach (pytest's tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def sh(
    cmd: str,
    cwd: str | os.PathLike[str] | None = None,
    *,
    timeout: float = 30.0,
    check: bool = False,
    env: dict | None = None,
    user: User | None = None,
) -> subprocess.CompletedProcess:
    """Run a bash command (with a timeout, so a wedged mount fails the test instead of hanging),
    as root or, with `user`, as that unprivileged user."""
    e = {**os.environ, "LC_ALL": "C.UTF-8", "PY": PYTHON, **(env or {})}
    argv = ["bash", "-c", cmd]
    if user is not None:
        argv = user.argv() + argv
        e["PY"] = SYSTEM_PYTHON  # ours may live under /root, out of an unprivileged user's reach
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=e)
    if check and out.returncode != 0:
        raise AssertionError(f"{cmd!r} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


class DevMount:
    """`python -m memfs.mount.devmount` in a subprocess."""

    def __init__(
        self,
        root: Path,
        state_dir: Path,
        stores: Sequence[str],
        *,
        extra: Sequence[str] = (),
        log_path: Path | None = None,
    ):
        self.root = Path(root)
        self.state_dir = Path(state_dir)
        self.stores = list(stores)  # "ID:SLUG:ACCESS"
        self.extra = list(extra)
        self.log_path = log_path or self.state_dir.parent / f"devmount-{self.root.name}.log"
        self.proc: subprocess.Popen | None = None
        self._out = b""

    def argv(self) -> list[str]:
        argv = [
            PYTHON,
            "-m",
            "memfs.mount.devmount",
            "--state-dir",
            str(self.state_dir),
            "--root",
            str(self.root),
        ]
        for s in self.stores:
            argv += ["--store", s]
        return argv + self.extra

    def start(self, timeout: float = 20.0) -> DevMount:
        self.root.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        logcheck.watch(self.log_path, f"devmount ({self.log_path})")
        stdin = subprocess.PIPE if "--stdin-commands" in self.extra else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            self.argv(),
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        log.close()
        try:
            line = self._readline(timeout)
        except TimeoutError:
            line = ""
        if line != "ready":
            self.close()
            raise RuntimeError(f"devmount did not become ready ({line!r}); log:\n{self.log()}")
        assert mounted_at(self.root), "ready was printed but nothing is mounted"
        return self

    def _readline(self, timeout: float) -> str:
        """One stdout line of the daemon ('' at EOF); TimeoutError when none comes in time."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._out:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no line from devmount")
            r, _, _ = select.select([fd], [], [], min(left, 0.2))
            if r:
                chunk = os.read(fd, 4096)
                if not chunk:
                    return ""
                self._out += chunk
        line, self._out = self._out.split(b"\n", 1)
        return line.decode()

    def command(self, timeout: float = 10.0, **cmd: object) -> None:
        """Run one sync-facing API call in the daemon (needs extra=["--stdin-commands"])."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()
        answer = self._readline(timeout)
        if answer != "ok":
            raise AssertionError(f"{cmd}: {answer}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def stop(self, timeout: float = 15.0) -> int | None:
        """Graceful stop (SIGTERM: stop writes, unmount, exit 0). Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        code = self.proc.poll()
        self.close()
        return code

    def kill(self) -> None:
        """SIGKILL the daemon (a crash); clears the dead mount."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.close()

    def close(self) -> None:
        """Always leaves nothing mounted and no process behind."""
        if mounted_at(self.root):
            force_unmount(self.root)
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(10)
            for pipe in (self.proc.stdout, self.proc.stdin):
                if pipe:
                    with contextlib.suppress(OSError):
                        pipe.close()
        if mounted_at(self.root):
            force_unmount(self.root)


@pytest.fixture
def devmounts(tmp_path) -> Iterator[list[DevMount]]:
    """A list to register DevMounts in; every one is torn down, also on failure."""
    mounts: list[DevMount] = []
    yield mounts
    for m in mounts:
        m.close()
    leftover = [str(m.root) for m in mounts if mounted_at(m.root)]
    assert not leftover, f"still mounted: {leftover}"


def store_files(top: Path) -> dict[str, bytes]:
    """A mounted store's files as the store names them ("/" + path under the store root), with
    their bytes; the reserved names at the store root (`.sync-notices.log` and the like) left out."""
    from memfs.limits import RESERVED_NAMES

    return {
        "/" + str(p.relative_to(top)): p.read_bytes()
        for p in sorted(top.rglob("*"))
        if p.is_file() and not (p.parent == top and p.name in RESERVED_NAMES)
    }


@contextlib.contextmanager
def state_db(state_dir: Path) -> Iterator[Any]:
    """The state dir's database, read-only (a sqlite3 connection), closed on leaving."""
    import sqlite3

    conn = sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True)
    try:
        yield conn
    finally:
        conn.close()
