"""The sync engine's rung of the test ladder: service, filesystem core and engine in one trio run.

No kernel, no subprocess, no socket. `InProcessService` is the real service app (`create_app` over
SQLite in a temp dir) reached through httpx's in-memory ASGI transport; `FaultTransport` sits in
front of it and records every request, and answers chosen ones itself (a status with headers, or
a dropped connection) or runs a hook first (a second writer acting between two of the engine's
requests). `EngineMount` is what `memfs mount` wires together (session/daemon.py): a State, the
kernel-free `Filesystem` and the real `SyncEngine` over a `StoreClient` on that transport, plus
the path-level helpers (tests/support/fs_shell.py); `EngineWorld` is a test world
(tests/support/world.py) made on the in-process service with the engine mounts of its session. The engine takes the client at its
`StoreApi` port (memfs/sync/ports.py), as in production, through a `FailingStore`
(tests/support/stores.py) that passes every call on until a test puts a fault on one. The engine is driven only through
its public surface (constructor, initial(), sync_now(), status(), not_on_store()).

Every method that talks to the service is async: call them from a `@pytest.mark.trio` test.
"""

from __future__ import annotations

import email.utils
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from memfs.client import StoreClient
from memfs.limits import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES
from memfs.mount.filesystem import Filesystem
from memfs.mount.state import State
from memfs.records import StoreInfo
from memfs.service import rules
from memfs.service.app import create_app
from memfs.service.database import open_storage
from memfs.service.hosted import HostedOptions
from memfs.sync.engine import EngineOptions, SyncEngine
from memfs.sync.ports import StoreApi
from tests.support.fs_shell import FsShell
from tests.support.stores import FailingStore
from tests.support.world import World, notes_and_handbook

BASE_URL = "http://memfs.test"  # never resolved: the transport answers in process
ADMIN_KEY = "test-admin-key-0123456789"
MEMORY_BETA = {"anthropic-beta": "agent-memory-2026-07-22"}
SESSIONS_BETA = {"anthropic-beta": "managed-agents-2026-04-01"}
MEMORY_BY_ID = r"/memories/mem_[^/]+$"  # a FaultTransport path: one memory, by its id


# ---- faults -------------------------------------------------------------------------------------


@dataclass
class Fault:
    """One rule of a FaultTransport: requests matching `method` and the `path` regex (searched in
    the URL's path) get `status` (with `headers` and an API error body) instead of the service's
    answer, or a dropped connection when `drop`, or first run `before` and then go to the service.
    `times`: how many matching requests it takes (None: all of them)."""

    method: str
    path: str
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False
    before: Callable[[httpx.Request], Awaitable[None]] | None = None
    times: int | None = 1
    hits: int = 0

    def matches(self, request: httpx.Request) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        return request.method == self.method and re.search(self.path, request.url.path) is not None


class FaultTransport(httpx.AsyncBaseTransport):
    """Forwards to `inner`, recording `(method, path)` of every request; faults come first."""

    def __init__(self, inner: httpx.AsyncBaseTransport):
        self.inner = inner
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []

    def add(self, method: str, path: str, **kw: Any) -> Fault:
        fault = Fault(method, path, **kw)
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        self.faults.clear()
        self.requests.clear()

    def count(self, method: str, path: str = "") -> int:
        return sum(1 for m, p in self.requests if m == method and re.search(path, p))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path))
        for fault in self.faults:
            if not fault.matches(request):
                continue
            fault.hits += 1
            if fault.drop:
                raise httpx.RemoteProtocolError("connection dropped (injected)", request=request)
            if fault.before is not None:
                await fault.before(request)
                break
            body = {
                "type": "error",
                "error": {"type": "injected_error", "message": f"injected {fault.status}"},
            }
            return httpx.Response(fault.status or 500, headers=fault.headers, json=body, request=request)
        return await self.inner.handle_async_request(request)


# ---- the service ----------------------------------------------------------------------------------


class ServedTransport(httpx.ASGITransport):
    """The app in process, answering as `memfs serve` does behind uvicorn: with a `Date` header
    (uvicorn adds it; the app does not), which a first download's feed position is taken from
    (memfs/sync/feed.py `listed_position`)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        resp = await super().handle_async_request(request)
        if "date" not in resp.headers:
            resp.headers["date"] = email.utils.formatdate(usegmt=True)
        return resp


class InProcessService:
    """The real service app on SQLite in `workdir`, and an admin client for the test's own writes
    (what another writer or the operator does; never through the FaultTransport)."""

    def __init__(
        self,
        workdir: Path,
        *,
        max_memories: int = 1000,
        extensions: bool = True,
        hosted: HostedOptions | None = None,
    ):
        """`hosted`: the emulator's switches (memfs/service/hosted.py), e.g. the hosted API's 409
        to a repeated update and the test 503s; with `extensions` False, `memfs serve --hosted-api`."""
        self.storage = open_storage(Path(workdir) / "store.db")
        self.app = create_app(self.storage, ADMIN_KEY, max_memories, extensions=extensions, hosted=hosted)
        self.transport = ServedTransport(app=self.app)
        self.admin = httpx.AsyncClient(
            transport=self.transport, base_url=BASE_URL, headers={"x-api-key": ADMIN_KEY, **MEMORY_BETA}
        )

    async def aclose(self) -> None:
        await self.admin.aclose()
        self.storage.close()

    async def _ok(self, resp: httpx.Response) -> Any:
        if resp.status_code >= 400:
            raise AssertionError(
                f"{resp.request.method} {resp.request.url} -> {resp.status_code}: {resp.text}"
            )
        return resp.json() if resp.content else None

    async def create_store(self, name: str) -> str:
        return (await self._ok(await self.admin.post("/v1/memory_stores", json={"name": name})))["id"]

    async def create_session(self, stores: list[tuple[str, str]]) -> dict:
        """A session with these (store id, access) attached: its record (with its work secret)."""
        resources = [{"type": "memory_store", "memory_store_id": s, "access": a} for s, a in stores]
        return await self._ok(
            await self.admin.post("/v1/sessions", json={"resources": resources}, headers=SESSIONS_BETA)
        )

    async def create(self, store: str, path: str, content: str) -> dict:
        return await self._ok(
            await self.admin.post(
                f"/v1/memory_stores/{store}/memories", json={"path": path, "content": content}
            )
        )

    async def update(self, store: str, memory_id: str, **body: Any) -> dict:
        return await self._ok(
            await self.admin.post(f"/v1/memory_stores/{store}/memories/{memory_id}", json=body)
        )

    async def delete(self, store: str, memory_id: str) -> None:
        await self._ok(await self.admin.delete(f"/v1/memory_stores/{store}/memories/{memory_id}"))

    async def memories(self, store: str) -> dict[str, dict]:
        """path -> memory (full view)."""
        out: dict[str, dict] = {}
        page = None
        for _ in range(1000):  # bounded: 20 per page
            params: dict[str, str | int] = {"view": "full", "limit": 20, **({"page": page} if page else {})}
            body = await self._ok(await self.admin.get(f"/v1/memory_stores/{store}/memories", params=params))
            out.update({m["path"]: m for m in body["data"] if m["type"] == "memory"})
            page = body.get("next_page")
            if not page:
                break
        return out

    async def contents(self, store: str) -> dict[str, str]:
        return {p: m["content"] for p, m in (await self.memories(store)).items()}


# ---- the mount, minus the kernel ---------------------------------------------------------------


class EngineMount(FsShell):
    """A State, the kernel-free Filesystem and the real SyncEngine, wired as the daemon wires them.
    Paths are root-relative: "/notes/a.md" is memory /a.md of the store whose slug is "notes"."""

    def __init__(
        self,
        state_dir: Path,
        service: InProcessService,
        token: str,
        stores: list[StoreInfo],
        *,
        interval: float = 60.0,
        deletions: str = "enabled",
        max_files: int = DEFAULT_MAX_FILES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        on_conflict: str = "merge",
    ):
        self.state_dir = Path(state_dir)
        self.on_conflict = on_conflict
        self.service = service
        self.token = token
        self.stores = stores
        self.options = dict(interval=interval, deletions=deletions, max_files=max_files, max_bytes=max_bytes)
        self.transport = FaultTransport(service.transport)  # faults in HTTP, before the client
        self.client = StoreClient(BASE_URL, token, transport=self.transport)
        self.store = FailingStore(self.client)  # faults at the port, after it
        store: StoreApi = self.store
        self.state = State(self.state_dir)
        for s in stores:
            self.state.set_store(s.store_id, s.name, s.slug, s.access)
        self.fs = Filesystem(self.state, stores, max_files=max_files, max_bytes=max_bytes)
        self.engine = SyncEngine(
            store,
            self.state,
            self.fs,
            stores,
            EngineOptions(**self.options, on_conflict=on_conflict),  # type: ignore[arg-type]
        )

    async def aclose(self) -> None:
        await self.client.aclose()
        self.state.close()

    async def restart(self) -> EngineMount:
        """What a restart of `memfs mount` on the same state dir sees (this one is closed)."""
        await self.aclose()
        return EngineMount(
            self.state_dir,
            self.service,
            self.token,
            self.stores,
            on_conflict=self.on_conflict,
            **self.options,  # type: ignore[arg-type]
        )

    async def sync(self, **kw: Any) -> dict[str, Any]:
        """`memfs sync --force --wait` unless told otherwise."""
        kw.setdefault("force", True)
        kw.setdefault("wait", True)
        return await self.engine.sync_now(**kw)

    def store_status(self, slug: str) -> dict[str, Any]:
        return next(s for s in self.engine.status()["stores"] if s["slug"] == slug)

    def notices(self, slug: str) -> list[str]:
        store = next(s for s in self.stores if s.slug == slug)
        return self.fs.notices(store.store_id)


def single_requests(m: EngineMount) -> None:
    """Push one request per change, as against the hosted API or a service without the batch route
    (the engine learns that from the first batch answered 404/405): the faults below aim at the
    single requests. The batch path's answers are tested through real mounts in
    tests/e2e/test_write_burst.py (per-item 409, refusals, a failed batch)."""
    m.engine.pusher.has_batch = False


# ---- the engine rung's world --------------------------------------------------------------------


class EngineWorld(World):
    """A world (tests/support/world.py) on an in-process service and the engine mounts of its
    session, each closed at close()."""

    def __init__(self, svc: InProcessService, tmp: Path):
        self.svc, self.tmp = svc, tmp
        self.mounts: list[EngineMount] = []

    async def setup(
        self, notes: dict[str, str], handbook: dict[str, str] | None = None, *, download: bool = True, **opts
    ) -> EngineMount:
        """Two stores, notes (read_write, slug "notes") and handbook (read_only, slug "handbook"),
        seeded with these files, and a mount of both (`opts`: EngineMount's) after its first sync
        (`download` False: before it, for a test that sets faults for it first)."""
        await self.abuild(self.svc, notes_and_handbook(notes, handbook or {}, names=("Notes", "Handbook")))
        self.stores = [StoreInfo(s, spec.name, spec.slug, spec.access) for s, spec in self.made()]
        m = self.mount(self.stores, **opts)
        if download:
            await m.engine.initial()
        return m

    def mount(self, stores: list[StoreInfo], **opts) -> EngineMount:
        m = EngineMount(self.tmp / "state", self.svc, self.token, stores, **opts)
        self.mounts.append(m)
        return m

    async def close(self) -> None:
        for m in self.mounts:
            await m.aclose()


# ---- fixtures: the rungs' in-process services and the engine's world ----------------------------


@asynccontextmanager
async def _serving(workdir: Path, **kw: Any) -> AsyncIterator[InProcessService]:
    s = InProcessService(workdir, **kw)
    try:
        yield s
    finally:
        await s.aclose()


@pytest.fixture
async def svc(tmp_path) -> AsyncIterator[InProcessService]:
    """`memfs serve` in process."""
    async with _serving(tmp_path / "service") as s:
        yield s


@pytest.fixture
async def hosted(tmp_path) -> AsyncIterator[InProcessService]:
    """The service without its extensions (no counter, no changes, no snapshot:
    SEMANTICS.md#d-no-counter), as `memfs serve --hosted-api`: a tick reads each store's version feed."""
    async with _serving(tmp_path / "hosted", extensions=False) as s:
        yield s


@pytest.fixture
async def emulator(tmp_path) -> AsyncIterator[InProcessService]:
    """The hosted API's emulator with its test switches: a repeated update answered 409, and the
    unavailable header's injected answers (memfs/service/hosted.py)."""
    hosted = HostedOptions(repeat_conflicts=True, unavailable=True)
    async with _serving(tmp_path / "hosted", extensions=False, hosted=hosted) as s:
        yield s


@pytest.fixture
def changes_fetched(monkeypatch) -> None:
    """The changes feed carries no content: every change is past its answer's budget, as in a pull
    of more than 2 MiB of changes (memfs/service/rules.py CHANGES_CONTENT_BUDGET), or from a service
    without view=full. The pull then fetches each changed memory by id: for a test that acts
    between the changes and the fetch (a hook or a fault on `MEMORY_BY_ID`)."""
    monkeypatch.setattr(rules, "CHANGES_CONTENT_BUDGET", 0)


@pytest.fixture
async def world(svc, tmp_path) -> AsyncIterator[EngineWorld]:
    w = EngineWorld(svc, tmp_path)
    try:
        yield w
    finally:
        await w.close()
