"""A throwaway PostgreSQL cluster for tests: Debian's binaries, a temp dir, a unix socket, no TCP.

PostgreSQL refuses to run as root, so as root the cluster runs as the unprivileged user
`memfs-pg` (created when missing) through `runuser`. Its directory is a fresh `/tmp/memfs-pg-*`
owned by that user — not pytest's tmp_path, whose parents are private to root. The server only
listens on a socket in that directory (`listen_addresses=''`): nothing else on the machine can
reach it, and no port can clash. `stop()` always runs (fixture teardown, and atexit should the
test process die), and removes the directory.

The cluster is made with the ICU locale en-US, whose order is not byte order: a backend that
forgot `COLLATE "C"` sorts paths wrongly here, and the contract suite says so.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from urllib.parse import quote

USER = "memfs-pg"
_live: set[PostgresCluster] = set()


@atexit.register
def _stop_leftovers() -> None:
    for cluster in list(_live):
        cluster.stop()


def bin_dir() -> Path | None:
    """The newest /usr/lib/postgresql/*/bin with initdb, or None when PostgreSQL is not installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def _ensure_user() -> None:
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell",
             "/usr/sbin/nologin", USER],
            check=True,
        )  # fmt: skip


class PostgresCluster:
    def __init__(self) -> None:
        bins = bin_dir()
        if bins is None:
            raise RuntimeError("PostgreSQL is not installed (scripts/_env.sh ensure_postgresql installs it)")
        self.bin = bins
        self.as_root = os.geteuid() == 0
        if self.as_root:
            _ensure_user()
        self.dir = Path(tempfile.mkdtemp(prefix="memfs-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        if self.as_root:
            ent = pwd.getpwnam(USER)
            os.chown(self.dir, ent.pw_uid, ent.pw_gid)
        self.started = False
        _live.add(self)
        try:
            self._run(
                "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                "--locale-provider=icu", "--icu-locale=en-US", "--locale=C.UTF-8",
            )  # fmt: skip
            opts = (
                f"-k {self.dir} -c listen_addresses='' -c fsync=off -c full_page_writes=off "
                "-c max_connections=200 -c shared_buffers=32MB"
            )
            self._run(
                "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "-t", "60", "start"
            )
            self.started = True
        except BaseException:
            self.stop()
            raise

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess:
        cmd = [str(self.bin / tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", USER, "--", *cmd]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=self.dir, timeout=120)
        if r.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed ({r.returncode}): {r.stderr or r.stdout}\n{log[-2000:]}")
        return r

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@/{dbname}?host={quote(str(self.dir), safe='')}"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.split("/")[3].split("?")[0]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self.started:
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop")
            except Exception:
                pid_file = self.data / "postmaster.pid"
                if pid_file.exists():  # pg_ctl could not stop it: the postmaster must not outlive us
                    pid = int(pid_file.read_text().split()[0])
                    try:
                        os.kill(pid, 9)
                    except ProcessLookupError:
                        pass
            self.started = False
        shutil.rmtree(self.dir, ignore_errors=True)
        _live.discard(self)
