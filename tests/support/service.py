"""A real `memfs serve` subprocess for tests: free loopback port, temp db, known admin key."""

from __future__ import annotations

import atexit
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support import logcheck

MEMORY_BETA = "agent-memory-2026-07-22"
SESSIONS_BETA = "managed-agents-2026-04-01"
_LISTENING = re.compile(r"listening on (https?://\S+)")
_live: set[ServiceProcess] = set()


@atexit.register
def _kill_leftovers() -> None:  # a crashed test run must not leave servers behind
    for svc in list(_live):
        svc.kill()


class ServiceProcess:
    def __init__(
        self,
        workdir: Path,
        *,
        admin_key: str = "test-admin-key-0123456789",
        db_path: Path | None = None,
        db_url: str | None = None,
        max_memories: int | None = None,
        port: int = 0,
        start: bool = True,
        hosted_api: bool = False,
        org_limits: str | None = "off",
        extra_args: tuple[str, ...] = (),
        console: bool = False,
    ):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.admin_key = admin_key
        self.db_path = Path(db_path) if db_path else self.workdir / "data" / "store.db"
        self.db_url = db_url  # e.g. postgresql://…: used instead of db_path when given
        self.max_memories = max_memories
        self.hosted_api = hosted_api
        # `--org-limits` with --hosted-api: "off" by default, so a test that seeds or bursts through
        # the emulator meets no 429 it did not ask for; None: the emulator's own defaults (1200,300).
        # Ignored when extra_args name --org-limits.
        self.org_limits = org_limits
        self.extra_args = tuple(extra_args)  # more `memfs serve` flags
        self.console = console
        self.port = port
        self.base_url = ""
        self.proc: subprocess.Popen | None = None
        self._starts = 0
        self.stderr_path = self.workdir / "serve.stderr"
        if start:
            self.start()

    def start(self, timeout: float = 20.0) -> None:
        self._starts += 1
        out_path = self.workdir / f"serve-{self._starts}.stdout"
        self.stderr_path = self.workdir / f"serve-{self._starts}.stderr"
        cmd = [sys.executable, "-m", "memfs", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--db", self.db_url or str(self.db_path), "--admin-key", self.admin_key]
        if self.max_memories is not None:
            cmd += ["--max-memories", str(self.max_memories)]
        if self.hosted_api:
            cmd.append("--hosted-api")
            if self.org_limits is not None and "--org-limits" not in self.extra_args:
                cmd += ["--org-limits", self.org_limits]
        cmd += self.extra_args
        if self.console:
            cmd.append("--console")
        env = {k: v for k, v in os.environ.items() if k != "MEMFS_ADMIN_KEY"}
        with open(out_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=self.workdir, env=env)
        _live.add(self)
        logcheck.watch(self.stderr_path, f"memfs serve ({self.stderr_path})")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = _LISTENING.search(out_path.read_text(errors="replace"))
            if m:
                self.base_url = m.group(1)
                self.port = int(self.base_url.rsplit(":", 1)[1])  # restarts reuse the port
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"memfs serve did not start (exit {self.proc.returncode}):\n{self.stderr()}")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM and wait (SIGKILL if it hangs). Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        _live.discard(self)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        _live.discard(self)

    def restart(self) -> None:
        self.stop()
        self.start()

    # --- admin helpers ---------------------------------------------------------------------------

    def admin_client(self, beta: str = MEMORY_BETA) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, headers={"x-api-key": self.admin_key, "anthropic-beta": beta}, timeout=30
        )

    def create_store(self, name: str, **fields) -> dict:
        with self.admin_client() as c:
            r = c.post("/v1/memory_stores", json={"name": name, **fields})
        assert r.status_code == 200, r.text
        return r.json()

    def create_session(self, stores: list[tuple[str, str]]) -> dict:
        resources = [{"type": "memory_store", "memory_store_id": s, "access": a} for s, a in stores]
        with self.admin_client(SESSIONS_BETA) as c:
            r = c.post("/v1/sessions", json={"resources": resources})
        assert r.status_code == 200, r.text
        return r.json()
