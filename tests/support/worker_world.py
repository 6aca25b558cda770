"""Fixtures for the worker tests: a real `memfs serve`, a real mount, the fake platform, the real SDK."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import pytest

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
    """What one handle_item() did, as the fake platform saw it."""

    work: Work
    session_id: str
    platform: FakePlatform

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

    def client(self):
        from anthropic import AsyncAnthropic

        return AsyncAnthropic(
            base_url=self.server.base_url,
            api_key="platform-key-unused",
            max_retries=0,
            _strict_response_validation=True,
        )

    def run_item(
        self, script: list[Step], *, tools=None, timeout: float = 60, worker_options: dict | None = None, **kw
    ) -> ItemRun:
        """The unchanged EnvironmentWorker.handle_item() for one scripted session."""
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

        asyncio.run(main())
        return ItemRun(work, self.session["id"], self.platform)


@pytest.fixture
def wworld(service, api, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="memfs.worker")
    w = WorkerWorld(service, api, tmp_path, monkeypatch)
    try:
        yield w
    finally:
        w.close()


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
