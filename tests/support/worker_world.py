"""Fixtures for the worker tests: a real `memfs serve`, a real mount, the fake platform, the real SDKs
(Python's in this process, TypeScript's under node), and `worker`: either one, for a scenario both run."""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from memfs.worker.daemon_link import SOCKET_ENV
from tests.support.api import Api
from tests.support.fake_platform import FakePlatform, PlatformServer, Step, Work
from tests.support.sandbox import SandboxWorld
from tests.support.world import notes_and_handbook

RW, RO = "work-notes", "team-handbook"
WORKER_WORLD = notes_and_handbook(
    {"/notes/todo.md": "# TODO\n- buy milk\n", "/profile.md": "name: agent\nlikes: grep\n"},
    {"/handbook/style.md": "Write short sentences.\n"},
)


@dataclass
class ItemRun:
    """What one item's run did, as the fake platform saw it, and what the worker said: its log
    (Python: memfs.worker's records; TypeScript: node's output) and, for an item that failed, why."""

    work: Work
    session_id: str
    platform: FakePlatform
    output: str = ""
    error: str | None = None

    @property
    def session(self):
        return self.platform.sessions[self.session_id]

    def results(self) -> list[dict]:
        return list(self.session.results)

    def texts(self) -> list[str]:
        return [" ".join(b.get("text", "") for b in r.get("content") or []) for r in self.results()]


class WorkerWorld(SandboxWorld):
    """The worker's world (WORKER_WORLD), mounted in one sandbox, and the fake platform serving it."""

    def __init__(self, service, api: Api, tmp_path: Path, monkeypatch):
        super().__init__(service, api, tmp_path, WORKER_WORLD)
        self.box = self.sandbox("sandbox")
        monkeypatch.setenv("MEMFS_RUNTIME_DIR", self.box.env["MEMFS_RUNTIME_DIR"])
        self.workdir = tmp_path / "workdir"
        self.workdir.mkdir()
        self.platform = FakePlatform(ttl_seconds=2)
        self.server = PlatformServer(self.platform).__enter__()
        self.on_close.append(lambda: self.server.__exit__(None, None, None))

    @property
    def root(self) -> Path:
        return self.box.root

    def memory(self, slug: str, path: str) -> str:
        return str(self.root / slug / path.lstrip("/"))

    def mount(self, *extra: str) -> None:
        self.box.mount(*extra)

    def item(self, script: list[Step], **kw) -> Work:
        resources = self.session["resources"]
        return self.server.call(
            lambda: self.platform.add_session(
                session_id=self.session["id"], resources=resources, script=script, token=self.token, **kw
            )
        )

    def item_env(self, work: Work, *, clear: tuple[str, ...] = ("ANTHROPIC_",)) -> dict[str, str]:
        """What `ant beta:worker poll --on-work` hands a worker process for `work`, over this
        process's environment less the names starting with `clear`."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(clear)}
        env.update(
            {
                "ANTHROPIC_BASE_URL": self.server.base_url,
                "ANTHROPIC_WORK_ID": work.id,
                "ANTHROPIC_ENVIRONMENT_ID": work.environment_id,
                "ANTHROPIC_SESSION_ID": work.session_id,
                "ANTHROPIC_WORK_SECRET": work.secret,
                "MEMFS_RUNTIME_DIR": self.box.env["MEMFS_RUNTIME_DIR"],
            }
        )
        return env

    def client(self):
        from anthropic import AsyncAnthropic

        return AsyncAnthropic(
            base_url=self.server.base_url,
            api_key="platform-key-unused",
            max_retries=0,
            _strict_response_validation=True,
        )

    def run_item(
        self,
        script: list[Step],
        *,
        tools=None,
        timeout: float = 60,
        worker_options: dict | None = None,
        fails: type[BaseException] | None = None,
        **kw,
    ) -> ItemRun:
        """The unchanged EnvironmentWorker.handle_item() for one scripted session; with `fails`, the
        item must fail with that exception (its message is the run's `error`)."""
        from anthropic.lib.environments import EnvironmentWorker

        from memfs.worker import memfs_tools

        work = self.item(script, **kw)

        async def main():
            # Closed in this loop: a client left to the garbage collector closes its pool on a
            # closed loop, and asyncio logs "Task exception was never retrieved" in a later test.
            async with self.client() as client:
                worker = EnvironmentWorker(
                    client,
                    memory_sync_interval=None,
                    workdir=self.workdir,
                    max_idle=2,
                    tools=tools if tools is not None else memfs_tools(root=self.root),
                    **(worker_options or {}),
                )
                with_timeout = asyncio.wait_for(
                    worker.handle_item(
                        work_id=work.id,
                        environment_id=work.environment_id,
                        session_id=self.session["id"],
                        work_secret=work.secret,
                    ),
                    timeout,
                )
                await with_timeout

        run = ItemRun(work, self.session["id"], self.platform)
        log = _Said()
        logging.getLogger("memfs.worker").addHandler(log)
        try:
            asyncio.run(main())
        except BaseException as exc:
            wanted = [e for e in _leaves(exc) if fails is not None and isinstance(e, fails)]
            if not wanted:
                raise
            run.error = str(wanted[0])
        finally:
            logging.getLogger("memfs.worker").removeHandler(log)
        assert fails is None or run.error is not None, f"the item did not fail with {fails}"
        run.output = "\n".join(log.lines)
        return run


class _Said(logging.Handler):
    """The messages of the records it sees (the wworld fixture lets memfs.worker's INFO through)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


# ---- the TypeScript worker (workers/typescript) -------------------------------------------------

# scripts/sdk-check points this at a copy of the package with the newest @anthropic-ai/sdk
PACKAGE = Path(
    os.environ.get("MEMFS_TS_PACKAGE") or Path(__file__).resolve().parents[2] / "workers" / "typescript"
)


@pytest.fixture(scope="session")
def ts_package() -> Path:
    """The package, built once per test process (its dependencies installed with `npm ci` when
    missing). Under pytest-xdist every worker process builds it: the install and the build hold
    an exclusive lock on a file beside the package, so that one worker's `npm ci` (which empties
    node_modules first) or `tsc` (which rewrites dist/) never runs while another's reads them;
    a dist/ newer than every input is not built again (the first worker built it)."""
    npm = shutil.which("npm")
    assert npm and shutil.which("node"), "node and npm are needed (scripts/test installs them)"
    with open(PACKAGE.parent / f".{PACKAGE.name}.build-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (PACKAGE / "node_modules" / "@anthropic-ai" / "sdk").is_dir():
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=PACKAGE, check=True, timeout=300)
        if not _built(PACKAGE):
            subprocess.run([npm, "run", "build"], cwd=PACKAGE, check=True, timeout=120)
    return PACKAGE


def _built(package: Path) -> bool:
    """dist/ holds a build of the package's sources as they are now (as `make` decides)."""
    outputs = [package / "dist" / "index.js", package / "dist" / "index.d.ts"]
    inputs = [*(package / "src").rglob("*.ts"), package / "tsconfig.json", package / "package-lock.json"]
    if not all(p.is_file() for p in outputs):
        return False
    return min(p.stat().st_mtime for p in outputs) > max(p.stat().st_mtime for p in inputs)


def run_ts_item(
    wworld: WorkerWorld,
    package: Path,
    script: list[Step],
    timeout: float = 90,
    max_concurrent_calls: int = 2,
    prefix: tuple[str, ...] = (),
) -> tuple[ItemRun, subprocess.CompletedProcess]:
    """One scripted session served by node; (the run, the process). The worker runs calls of
    different threads `max_concurrent_calls` at a time (test/run-item.js); `prefix`: a command the
    worker runs under (setpriv)."""
    work = wworld.item(script)
    env = wworld.item_env(work)
    env.update(
        {
            "MEMFS_TEST_ROOT": str(wworld.root),
            "MEMFS_TEST_WORKDIR": str(wworld.workdir),
            "MEMFS_TEST_MAX_CONCURRENT_CALLS": str(max_concurrent_calls),
        }
    )
    # As `ant beta:worker poll --on-work` would run it in production: through `memfs worker-launch`.
    launch = [sys.executable, "-m", "memfs", "worker-launch", "--"]
    node = [str(package / "node_modules" / ".bin" / "node"), str(package / "test" / "run-item.js")]
    proc = subprocess.run([*prefix, *launch, *node], env=env, capture_output=True, text=True, timeout=timeout)
    return ItemRun(work, work.session_id, wworld.platform, output=proc.stdout + proc.stderr), proc


# ---- either worker, for the scenarios both run ------------------------------------------------


@dataclass
class Worker:
    """One of the two official workers, unchanged, serving a scripted item of the world: `python`
    (EnvironmentWorker.handle_item() + memfs_tools()) or `typescript` (node: the SDK's
    EnvironmentWorker + memfsTools(), workers/typescript, through `memfs worker-launch`)."""

    name: str
    world: WorkerWorld
    package: Path | None = None

    def run(
        self,
        script: list[Step],
        *,
        max_concurrent_calls: int | None = None,
        fails: type[BaseException] | None = None,
        timeout: float = 90,
    ) -> ItemRun:
        """The item's run, within `timeout` seconds (`max_concurrent_calls`: calls of different
        threads at once, default each worker's own); with `fails`, the item must fail (Python: with
        that exception; node: exit 1)."""
        if self.package is None:
            options = {"max_concurrent_calls": max_concurrent_calls} if max_concurrent_calls else {}
            return self.world.run_item(script, worker_options=options, fails=fails, timeout=timeout)
        run, proc = run_ts_item(
            self.world, self.package, script, max_concurrent_calls=max_concurrent_calls or 2, timeout=timeout
        )
        if fails is None:
            assert proc.returncode == 0, run.output
        else:
            assert proc.returncode == 1, run.output
            run.error = proc.stderr
        return run


@pytest.fixture(params=["python", "typescript"])
def worker(request, wworld) -> Worker:
    package = request.getfixturevalue("ts_package") if request.param == "typescript" else None
    return Worker(request.param, wworld, package)


@pytest.fixture
def wworld(service, api, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="memfs.worker")
    w = WorkerWorld(service, api, tmp_path, monkeypatch)
    try:
        yield w
    finally:
        w.close()


@pytest.fixture(params=["control", "sync-only"])
def via(request, wworld, monkeypatch) -> str:
    """The mounted daemon, reached through its full control socket or its sync-only socket."""
    if request.param == "sync-only":
        path = wworld.tmp / "sync" / "sync.sock"
        wworld.box.env[SOCKET_ENV] = str(path)
        monkeypatch.setenv(SOCKET_ENV, str(path))
    else:
        monkeypatch.delenv(SOCKET_ENV, raising=False)
    wworld.mount()
    return request.param


class SocketSpy:
    """A unix socket in front of the daemon's control socket that records every request the worker
    sends (the worker is pointed at it with MEMFS_SYNC_SOCKET, as the sandbox image does)."""

    def __init__(self, path: Path, state_dir: Path):
        import socketserver
        import threading

        from memfs.session import control

        self.path = path
        self.requests: list[dict] = []
        spy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):  # many lines per connection: the worker holds its connection
                for line in self.rfile:
                    request = json.loads(line)
                    spy.requests.append(request)
                    try:
                        answer = control.call(state_dir, request, timeout=60)
                    except control.NoDaemon:
                        return  # close without answering, as a dead daemon would
                    self.wfile.write(json.dumps(answer).encode() + b"\n")
                    self.wfile.flush()

        self.server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def syncs(self) -> list[tuple[bool, bool]]:
        return [(bool(r.get("force")), bool(r.get("wait"))) for r in self.requests if r.get("op") == "sync"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def spy(wworld, monkeypatch):
    s = SocketSpy(wworld.tmp / "spy.sock", wworld.box.state_dir)
    monkeypatch.setenv("MEMFS_SYNC_SOCKET", str(s.path))
    yield s
    s.close()
