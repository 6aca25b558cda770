"""A "sandbox" for end-to-end tests: one root + one state dir + the real `memfs` commands.

Two Sandbox objects on one machine behave like two hosts sharing a store service. Every Sandbox
is torn down with `close()`, which always leaves its root unmounted and its daemon dead.
`SandboxWorld` is a test world (tests/support/world.py) made on a real `memfs serve`, with the
sandboxes that mount its session; the `api`, `world` and `mounted` fixtures hand them to tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tests.support import logcheck
from tests.support.api import Api
from tests.support.mounts import force_unmount
from tests.support.mounts import mounted_at as is_mounted
from tests.support.proxy import Proxy
from tests.support.seed import seed_database
from tests.support.service import ServiceProcess
from tests.support.world import StoreSpec, World, notes_and_handbook

__all__ = ["Sandbox", "SandboxWorld", "is_mounted"]


class Sandbox:
    """`python`: the interpreter its `memfs` commands run from (another venv's, to test an install)."""

    def __init__(
        self,
        base: Path,
        name: str,
        *,
        base_url: str,
        session_id: str,
        work_secret: str,
        python: str = sys.executable,
    ):
        self.python = python
        self.dir = base / name
        self.root = self.dir / "root"
        self.state_dir = self.dir / "state"
        self.root.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_SESSION_ID": session_id,
            "ANTHROPIC_WORK_SECRET": work_secret,
            "MEMFS_RUNTIME_DIR": str(self.dir / "run"),
        }
        self.env.pop("MEMFS_TOKEN", None)
        logcheck.watch(self.state_dir / "memfs.log", f"memfs mount ({self.state_dir}/memfs.log)")

    # -- commands ---------------------------------------------------------------------------
    def memfs(self, *args: str, timeout: float = 60, check: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [self.python, "-m", "memfs", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"memfs {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def mount(self, *extra: str, check: bool = True, timeout: float = 90) -> subprocess.CompletedProcess:
        args = [
            "mount",
            "--root",
            str(self.root),
            "--state-dir",
            str(self.state_dir),
            "--sync-interval",
            "5",
            *extra,
        ]
        return self.memfs(*args, check=check, timeout=timeout)

    def sync(self, *, force: bool = True, wait: bool = True, check: bool = True) -> dict:
        args = ["sync", "--root", str(self.root), "--json"]
        if force:
            args.append("--force")
        if wait:
            args.append("--wait")
        proc = self.memfs(*args, check=check, timeout=90)
        try:
            return json.loads(proc.stdout)
        except ValueError:
            return {"ok": False, "stdout": proc.stdout, "stderr": proc.stderr}

    def status(self) -> dict:
        proc = self.memfs("status", "--root", str(self.root), "--json")
        if proc.returncode != 0:  # with what the daemon was doing meanwhile (its log's end)
            log = self.state_dir / "memfs.log"
            tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else []
            raise AssertionError(
                f"memfs status exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}\n"
                "the daemon's log, its end:\n" + "\n".join(tail)
            )
        return json.loads(proc.stdout)

    def unmount(self, *, check: bool = True, timeout: float = 90) -> subprocess.CompletedProcess:
        return self.memfs("unmount", "--root", str(self.root), check=check, timeout=timeout)

    def daemon_pid(self) -> int | None:
        try:
            return int(json.loads((self.state_dir / "lock").read_text())["pid"])
        except (OSError, ValueError, KeyError):
            return None

    def kill9(self) -> None:
        pid = self.daemon_pid()
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _wait_dead(pid)

    def notices(self, slug: str) -> list[str]:
        return (self.root / slug / ".sync-notices.log").read_text().splitlines()

    # -- teardown ---------------------------------------------------------------------------
    def close(self) -> None:
        """Always leaves the root unmounted and the daemon gone, also after a failed test."""
        if is_mounted(self.root):
            try:
                self.memfs("unmount", "--root", str(self.root), "--flush-timeout", "5", timeout=40)
            except subprocess.TimeoutExpired:
                pass
        self.kill9()
        force_unmount(self.root)


def _wait_dead(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        # A zombie child of ours would never vanish: reap it if it is ours.
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)


class SandboxWorld(World):
    """A world (default: notes_and_handbook()) made on `service` through its admin `api`, and the
    sandboxes that mount its session. `close()` closes every sandbox, then runs `on_close` (what the
    world's maker owns: its service, its Api), last added first. `premade`: the specs' stores that
    are on the service already (name -> store id; world.py's `_steps`). `base_url`: what its
    sandboxes mount through by default (a relay in front of the service; default: the service)."""

    def __init__(
        self,
        service,
        api: Api,
        tmp: Path,
        specs: Sequence[StoreSpec] = (),
        premade: Mapping[str, str] | None = None,
        *,
        base_url: str | None = None,
    ):
        self.service, self.api, self.tmp = service, api, tmp
        self.base_url = base_url  # None: the service's, as it is when a sandbox is made
        self.sandboxes: list[Sandbox] = []
        self.proxies: list[Proxy] = []
        self.on_close: list[Callable[[], object]] = []
        self.build(api, specs or notes_and_handbook(), premade)

    @classmethod
    def serving(
        cls,
        tmp: Path,
        specs: Sequence[StoreSpec] = (),
        *,
        service: ServiceProcess | None = None,
        premade: Mapping[str, str] | None = None,
        base_url: str | None = None,
        **service_kw,
    ) -> SandboxWorld:
        """A world on `service`, or on a `memfs serve` of its own (ServiceProcess(tmp / "service",
        **service_kw)) that is stopped with it, through an Api of its own, closed with it. The specs
        `in_database` are written into its own service's database before it starts; those in
        `premade` (name -> store id) are on `service` already. `base_url`: as the constructor's."""
        seeded = _seed_database(tmp / "service", specs, service_kw) if service is None else {}
        assert service is None or not any(s.in_database for s in specs), "a running service's database"
        premade = {**(premade or {}), **seeded}
        own = ServiceProcess(tmp / "service", **service_kw) if service is None else None
        svc = service or own
        assert svc is not None
        api = Api(svc.base_url, svc.admin_key)
        try:
            world = cls(svc, api, tmp, specs, premade, base_url=base_url)
        except BaseException:
            api.close()
            if own is not None:
                own.stop()
            raise
        world.on_close += [own.stop] if own is not None else []
        world.on_close.append(api.close)
        return world

    def sandbox(
        self,
        name: str = "a",
        session: dict | None = None,
        *,
        base_url: str | None = None,
        python: str = sys.executable,
        **env: str,
    ) -> Sandbox:
        """A sandbox of this world's session (or of `session`), against the world's `base_url` (or
        this `base_url`), its commands run by `python`, with `env` added to its environment."""
        s = session or self.session
        box = Sandbox(
            self.tmp,
            name,
            base_url=base_url or self.base_url or self.service.base_url,
            session_id=s["id"],
            work_secret=s["work_secret"],
            python=python,
        )
        box.env.update(env)
        self.sandboxes.append(box)
        return box

    def proxy(self, **kw) -> Proxy:
        """A fault-injecting proxy (tests/support/proxy.py) in front of the service: a sandbox made
        with base_url=proxy.url mounts through it. Its faults are cleared before the sandboxes close
        (their final syncs go through), and it closes after them."""
        p = Proxy(self.service.base_url, **kw)
        self.proxies.append(p)
        return p

    def close(self) -> None:
        try:
            for p in self.proxies:
                p.clear()
            for box in self.sandboxes:
                box.close()
        finally:
            for p in self.proxies:
                p.close()
            for close in reversed(self.on_close):
                close()


def _seed_database(workdir: Path, specs: Sequence[StoreSpec], service_kw: dict) -> dict[str, str]:
    """The specs `in_database` written into the database the service at `workdir` will open (its
    `db_path` set in `service_kw`): their name -> store id."""
    big = {s.name: dict(s.seed) for s in specs if s.in_database}
    if not big:
        return {}
    db = service_kw.setdefault("db_path", workdir / "data" / "store.db")
    Path(db).parent.mkdir(parents=True, exist_ok=True)
    return seed_database(Path(db), big)


@pytest.fixture
def api(service) -> Iterator[Api]:
    client = Api(service.base_url, service.admin_key)
    yield client
    client.close()


@pytest.fixture
def world(service, api, tmp_path) -> Iterator[SandboxWorld]:
    w = SandboxWorld(service, api, tmp_path)
    try:
        yield w
    finally:
        w.close()


@pytest.fixture
def mounted(world) -> Sandbox:
    box = world.sandbox("a")
    box.mount()
    return box
