"""The mount's lifecycle (SEMANTICS.md#d-lifecycle): preflight, session, download, mount, serve, final sync, unmount.

Everything here is orchestration; the filesystem semantics live in core.py and the sync in
memfs/sync. The daemon is one trio program: the FUSE loop, the sync timer, the control socket and
the signal watcher are tasks of one nursery.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import json
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from memfs import limits
from memfs.client import ApiError, StoreClient, Unreachable
from memfs.client.errors import first_failure
from memfs.mount.filesystem import Filesystem
from memfs.mount.mount_table import fuse_mount_at
from memfs.mount.state import State, StateLocked
from memfs.mount.upkeep import StateUpkeep
from memfs.protocol import Deletions, OnConflict
from memfs.records import StoreInfo
from memfs.session import control
from memfs.session.early_fetch import EarlyFetch

# The start-up checks live in preflight.py (light enough for before the fork); this module
# still names them for the callers and tests that import them from here.
from memfs.session.preflight import MOUNT_PARENT as MOUNT_PARENT
from memfs.session.preflight import REQUEST_TIMEOUT, MountError, preflight_root, stores_from_session
from memfs.session.preflight import check_interval as check_interval
from memfs.session.preflight import clear_stale_mount as clear_stale_mount
from memfs.session.sync_only import SYNC_ONLY_SOCKET_ENV, serve_sync_only

if TYPE_CHECKING:
    from memfs.sync.engine import SyncEngine

log = logging.getLogger("memfs.mount")


@dataclass
class MountOptions:
    root: str
    session_id: str
    base_url: str
    token: str | None
    state_dir: Path
    sync_interval: float = limits.DEFAULT_SYNC_INTERVAL
    sync_deletions: Deletions = "enabled"
    on_conflict: OnConflict = "merge"  # SEMANTICS.md#d-merge
    max_files: int = limits.DEFAULT_MAX_FILES
    max_bytes: int = limits.DEFAULT_MAX_BYTES
    uid: int = field(default_factory=os.getuid)
    gid: int = field(default_factory=os.getgid)
    allow_other: bool = False
    flush_timeout: float = limits.FLUSH_TIMEOUT
    request_timeout: float = REQUEST_TIMEOUT
    live: bool = True  # hold a watch when the service has one (SEMANTICS.md#d-when); False: `--live off`
    idle_poll: float = (
        limits.IDLE_POLL_INTERVAL
    )  # the hosted API: polls while nobody uses the mount (SEMANTICS.md#d-no-counter)
    safety_net: float = (
        limits.SAFETY_NET_INTERVAL
    )  # the hosted API: one store's wide feed read at most this often
    full_listing: float = limits.FULL_LISTING_INTERVAL  # the hosted API: one store's full listing
    # A store mounted without a session (SEMANTICS.md#d-store-mount, memfs/session/store_mount.py):
    # `token` is the organisation's API key, the stores come from `find_stores(client, state)`
    # instead of the session, and with `single_store` the one store is the mount root itself.
    api_key: bool = False
    find_stores: Callable[[StoreClient, State], Awaitable[list[StoreInfo]]] | None = None
    single_store: bool = False
    # Whether the mount may start from the state dir when its first download fails (a store
    # mounted at a path before, on a laptop without network); None: it may not.
    start_offline: Callable[[], bool] | None = None
    conflict_who: str | None = None  # whose version a conflict copy holds (default: the session id)

    @classmethod
    def from_flags(cls, args: Any, **given: Any) -> MountOptions:
        """The options the mount flags every mount command shares set (`memfs mount`, and with a
        store, `memfs mount --store`), and `given` (where the mount is, whose, and how found)."""
        return cls(
            sync_interval=args.sync_interval,
            sync_deletions=args.sync_deletions,
            on_conflict=args.on_conflict,
            max_files=args.max_files,
            max_bytes=args.max_bytes,
            uid=args.uid if args.uid is not None else os.getuid(),
            gid=args.gid if args.gid is not None else os.getgid(),
            allow_other=args.allow_other,
            flush_timeout=args.flush_timeout,
            live=args.live != "off",
            idle_poll=args.idle_poll_interval,
            safety_net=args.safety_net_interval,
            full_listing=args.full_listing_interval,
            **given,
        )


# -- the daemon ---------------------------------------------------------------------------------
class Daemon:
    def __init__(self, opts: MountOptions, early: EarlyFetch | None = None):
        self.opts = opts
        self.early = early  # the session, counters and snapshots read while the daemon started
        self.given_root = opts.root  # as the user spelled it (registered too: control.registry_key)
        self.stop_requested = trio.Event()
        self.stop_reason = ""
        self.final: dict[str, Any] | None = None
        self.final_done = trio.Event()  # set once the final sync has a result
        self.final_answered = trio.Event()  # the `memfs unmount` caller got the final result
        self.fs: Filesystem | None = None
        self.engine: Any = None

    async def run(self, on_ready) -> int:
        """Mount, call on_ready(), serve until asked to stop; returns the exit status."""
        try:
            return await self._run(on_ready)
        finally:
            if self.early is not None:
                self.early.close()  # also ends a helper still streaming (it stores blobs only)
                if self.early.state is not None:  # opened for it, never taken (a failed preflight)
                    self.early.state.close()

    async def _run(self, on_ready) -> int:
        opts = self.opts
        preflight_root(opts.root)
        self.given_root = opts.root
        opts.root = os.path.realpath(opts.root)  # resolved once, before it becomes our own mount
        if not opts.token:
            raise MountError(
                "the session has memory stores attached but no sessions token was given: set "
                "ANTHROPIC_WORK_SECRET (a work secret carrying sessions_token) or MEMFS_TOKEN"
            )
        problem = control.socket_path_problem(opts.state_dir)
        if problem:  # before anything is created there: the control socket could never be bound
            raise MountError(problem)
        if self.early is not None and self.early.state is not None:
            state = self.early.state  # opened and locked before the early download stored into it
            self.early.state = None  # closed below, as one opened here
        else:
            try:
                state = State(opts.state_dir)
            except OSError as exc:
                raise MountError(
                    f"cannot create the state dir {opts.state_dir}: {exc.strerror}; choose a writable --state-dir"
                ) from exc
            try:
                state.lock(opts.root)
            except StateLocked as exc:
                raise MountError(f"the state dir {opts.state_dir} is in use by a live mount: {exc}") from exc
        try:
            return await self._run_locked(state, on_ready)
        except BaseExceptionGroup as group:
            # A MountError raised inside the nursery arrives wrapped: give the caller the message.
            mount_errors, rest = group.split(MountError)
            if mount_errors is not None and rest is None:
                raise first_failure(mount_errors) from group
            raise
        finally:
            if self.early is not None:
                self.early.close()  # no helper writes into a closed state dir
            state.close()

    async def _run_locked(self, state: State, on_ready) -> int:
        from memfs.mount.runner import run_mount
        from memfs.sync.engine import EngineOptions, SyncEngine, TickFailed
        from memfs.sync.ports import StoreApi

        opts = self.opts
        early = self.early
        async with StoreClient(
            opts.base_url, opts.token or "", timeout=opts.request_timeout, api_key=opts.api_key
        ) as client:
            # The first download's listing connections are opened while the session is read (by
            # the early download's helper, or here): a store service without counters is then
            # listed from its first page on connections already open (a round trip each for TCP
            # and TLS, on the path to the mount being ready). With counters, two idle connections.
            stores = await _alongside(client.warm, self._stores(client, state))
            for s in stores:
                state.set_store(s.store_id, s.name, s.slug, s.access)
            state.set_meta("session_id", opts.session_id)
            # What `memfs status|flush` without a daemon need of a store mounted without a session.
            state.set_meta("layout", "single" if opts.single_store else None)
            state.set_meta("conflict_who", opts.conflict_who)
            state.set_meta("base_url", opts.base_url)
            state.set_meta("root", opts.root)
            # What decides "not on the store" offline (`memfs status` after a crash, `memfs flush`).
            state.set_meta("sync_deletions", opts.sync_deletions)
            state.set_meta("on_conflict", opts.on_conflict)
            state.set_meta("max_files", str(opts.max_files))
            state.set_meta("max_bytes", str(opts.max_bytes))
            fs = Filesystem(
                state, stores, max_files=opts.max_files, max_bytes=opts.max_bytes, uid=opts.uid, gid=opts.gid
            )
            if opts.single_store:
                from memfs.mount.single_store import mount_store_at_root

                mount_store_at_root(fs, opts.state_dir)
            self.fs = fs
            store: StoreApi = client  # the engine's port (memfs/sync/ports.py): mypy checks the client has it
            options = EngineOptions(
                interval=opts.sync_interval,
                deletions=opts.sync_deletions,
                max_files=opts.max_files,
                max_bytes=opts.max_bytes,
                live=opts.live,
                idle_poll=opts.idle_poll,
                safety_net=opts.safety_net,
                full_listing=opts.full_listing,
                on_conflict=opts.on_conflict,
                conflict_who=opts.conflict_who
                or opts.session_id,  # a conflict copy's name says whose version it holds
            )
            engine = SyncEngine(store, state, fs, stores, options)
            self.engine = engine
            try:
                started = time.monotonic()
                if client.offers_counters is False:  # the daemon read the session: no counters offered
                    engine.has_counter = False  # not asked (SEMANTICS.md#d-no-counter)
                counters, prefetched = await self._early_reads(client, engine, stores)
                # What the daemon holds now (its imports: trio, httpx, pyfuse3, the engine) stays
                # for its life: out of the collector's generations, so that the collections the
                # download's thousands of containers set off do not walk it all again (the
                # store's apply, 2,000 memories: 45-120 ms with it, 31-47 ms without).
                gc.freeze()
                await engine.initial(counters, prefetched)
                if early is not None:
                    early.close()
                    log.info("%s", early.describe(len(stores)))
                totals = [fs.totals(st.store_id) for st in stores]
                files, size = sum(t[0] for t in totals), sum(t[1] for t in totals)
                log.info(
                    "downloaded %d store(s), %d file(s), %.1f MiB in %.2fs",
                    len(stores),
                    files,
                    size / 2**20,
                    time.monotonic() - started,
                )
                _release_freed_memory()
            except (ApiError, Unreachable, TickFailed) as exc:  # TickFailed: what initial() raises
                if not (opts.start_offline and opts.start_offline()):
                    raise MountError(
                        f"cannot download the memory stores from {opts.base_url}: {exc}"
                    ) from exc
                # A store this state dir mounted before: its last view is served, and the ticks
                # catch up once the service answers (SEMANTICS.md#d-store-mount, offline start).
                log.warning("cannot reach the store service (%s): serving the state dir's last view", exc)
                engine.start_offline()

            async with trio.open_nursery() as nursery:
                await nursery.start(
                    self._serve_mount,
                    functools.partial(run_mount, fs, opts.root, allow_other=opts.allow_other),
                )
                control.register(opts.root, opts.state_dir, os.getpid(), given=self.given_root)
                try:
                    await nursery.start(self._control_server)
                    await nursery.start(serve_sync_only, self, os.environ.get(SYNC_ONLY_SOCKET_ENV))
                    nursery.start_soon(self._signals)
                    nursery.start_soon(engine.timer)
                    # The state dir's WAL checkpoints and blob sweeps, never during a tick or push.
                    upkeep = StateUpkeep(state, fs.live_shas, lambda: engine.busy)
                    nursery.start_soon(upkeep.run)
                    log.info("mounted %d store(s) at %s", len(stores), opts.root)
                    on_ready(stores)
                    await self.stop_requested.wait()
                    log.info("stopping (%s): final sync", self.stop_reason)
                    fs.stop_writes()
                    self.final = await engine.final_sync(opts.flush_timeout)
                    self.final_done.set()
                    if self.stop_reason == "unmount requested":
                        with trio.move_on_after(2):
                            await self.final_answered.wait()
                finally:
                    nursery.cancel_scope.cancel()
        # `memfs unmount` with every change on the store leaves nothing for `memfs status|flush`
        # to find: the registry entry goes (else /run/memfs keeps one per root ever mounted).
        # After a signal, or with changes left, it stays: status reads the state dir through it.
        if self.stop_reason == "unmount requested" and not self.final.get("pending"):
            try:
                control.unregister(opts.root, opts.state_dir, given=self.given_root)
            except (control.RegistryRefused, OSError) as exc:
                log.warning("could not remove the registry entry of %s: %s", opts.root, exc)
        pending = self.final["pending"] if self.final else -1
        if pending:
            from memfs.session.offline import describe_not_on_store

            named = "; ".join(describe_not_on_store(self.final or {}))
            log.error(
                "%s change(s) are not on the store service; they are kept in the state dir %s: %s "
                "(staged ones: `memfs flush --state-dir %s`)",
                pending if pending > 0 else "some",
                opts.state_dir,
                named or "the final sync did not run",
                opts.state_dir,
            )
            return 3
        log.info("every change is on the store service")
        return 0

    async def _early_reads(
        self, client: StoreClient, engine: SyncEngine, stores: list[StoreInfo]
    ) -> tuple[dict[str, int] | None, dict[str, Any] | None]:
        """What the early download read for the first download (early_fetch.py): the stores'
        counters, and in a fresh state dir each store's snapshot; (None, None) without it. The
        client's pacer hears the service's limit as the helper's answers said."""
        early = self.early
        if early is None:
            return None, None
        counters = await trio.to_thread.run_sync(early.counters, abandon_on_cancel=True)
        # none offered (the session's answer), or the helper's read was answered 404/405
        if early.has_counter() is False:
            engine.has_counter = False  # not asked again (SEMANTICS.md#d-no-counter)
        said, times = early.limits()
        now = trio.current_time()
        # The helper's clock is the system's: its request's times on the pacer's. The mirror then
        # counts the refill since the service answered it (a token per 50 ms at the hosted rate).
        sent, answered = (now - (time.monotonic() - t) for t in times) if times else (now, now)
        client.pacer.heard("read", said.get, sent, answered)
        if not early.fresh:
            return counters, None
        return counters, {s.store_id: early.snapshot(s.store_id) for s in stores}

    async def _stores(self, client: StoreClient, state: State) -> list[StoreInfo]:
        """The stores to mount: the session's, or (no session) the ones `find_stores` names."""
        opts = self.opts
        if opts.find_stores is not None:
            return await opts.find_stores(client, state)
        session = None
        if self.early is not None:  # read while this process imported: asked again when it failed
            session = await trio.to_thread.run_sync(self.early.session, abandon_on_cancel=True)
        if session is None:
            try:
                session = await client.get_session(opts.session_id)
            except ApiError as exc:
                raise MountError(
                    f"cannot read session {opts.session_id} from {opts.base_url}: {exc}"
                ) from exc
            except Unreachable as exc:
                raise MountError(f"the store service at {opts.base_url} is unreachable: {exc}") from exc
        return stores_from_session(session, opts.root)

    async def _serve_mount(self, run, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            await run(task_status=task_status)
        except RuntimeError as exc:  # from pyfuse3.init: the kernel refused the mount
            if os.geteuid() != 0:  # libfuse went through fusermount3, which said why in the log
                raise MountError(
                    f"cannot mount FUSE at {self.opts.root}: {exc}; as a user, memfs mounts through "
                    "fusermount3 (package fuse3), which needs /dev/fuse readable and writable by you and "
                    f"a passwd entry for uid {os.geteuid()} (fusermount3 said why, just before, in the mount's log)"
                ) from exc
            raise MountError(
                f"cannot mount FUSE at {self.opts.root}: {exc}; memfs needs /dev/fuse and CAP_SYS_ADMIN "
                "(in a container: --cap-add SYS_ADMIN --device /dev/fuse --security-opt apparmor=unconfined)"
            ) from exc
        # The FUSE session ended under us (`fusermount3 -u` from outside): stop, with a final sync.
        self.request_stop("unmounted from outside")

    def request_stop(self, reason: str) -> None:
        if not self.stop_requested.is_set():
            self.stop_reason = reason
            self.stop_requested.set()

    async def _signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                self.request_stop(signal.Signals(signum).name)

    async def _control_server(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        sock_path = self.opts.state_dir / control.SOCKET_NAME
        try:
            sock_path.unlink()
        except FileNotFoundError:
            pass
        listener_sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await listener_sock.bind(str(sock_path))
        os.chmod(sock_path, 0o600)
        listener_sock.listen(16)
        listener = trio.SocketListener(listener_sock)
        task_status.started()
        try:
            await trio.serve_listeners(self._handle_control, [listener])
        finally:
            try:
                sock_path.unlink()
            except FileNotFoundError:
                pass

    async def _handle_control(self, stream: trio.SocketStream) -> None:
        """JSON lines: each request line gets one answer line, in order, until the client closes
        (control.py: a client pipelines a ping in front of its request; a DaemonClient keeps the
        connection for many requests)."""
        async with stream:
            buf = b""
            while True:
                while b"\n" not in buf:
                    try:
                        chunk = await stream.receive_some(65536)
                    except trio.BrokenResourceError:
                        return
                    if not chunk:
                        return
                    buf += chunk
                line, buf = buf.split(b"\n", 1)
                request: Any = {}  # whatever the line decodes to: a bad request may be any JSON
                try:
                    request = json.loads(line)
                    answer = await self._answer(request)
                except Exception as exc:  # a bad request must never take the daemon down
                    log.exception("control request failed")
                    answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                try:
                    await stream.send_all(json.dumps(answer).encode() + b"\n")
                except trio.BrokenResourceError:
                    return
                finally:
                    if isinstance(request, dict) and request.get("op") == "unmount":
                        self.final_answered.set()

    async def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "ping":  # answered from the event loop at once: "alive", whatever a tick is doing
            return {"ok": True, "pong": True, "pid": os.getpid()}
        if op == "sync":
            return await self.engine.sync_now(
                force=bool(request.get("force")), wait=bool(request.get("wait"))
            )
        if op == "write_through":
            return await self.write_through(request.get("path"))
        if op == "status":
            status = self.engine.status(self.opts.root)
            if self.opts.single_store:  # the store is the mount root itself
                for s in status["stores"]:
                    s["mount_path"] = self.opts.root
            return {"ok": True, "pid": os.getpid(), "root": self.opts.root, **status}
        if op == "unmount":
            if request.get("flush_timeout") is not None:
                self.opts.flush_timeout = float(request["flush_timeout"])
            self.request_stop("unmount requested")
            await self.final_done.wait()
            return {
                "ok": True,
                "state_dir": str(self.opts.state_dir),
                "root": self.opts.root,
                **(self.final or {}),
            }
        return {"ok": False, "error": f"unknown request {op!r}"}

    async def write_through(self, path: object) -> dict[str, Any]:
        """The worker's `write`/`edit` of a memory file (SEMANTICS.md#d-merge): push it now and
        say what became of it. `path`: the file's absolute path in the mount."""
        if not isinstance(path, str) or not os.path.isabs(path):
            return {"ok": False, "error": "write_through needs the file's absolute path"}
        # The worker names the file by its real path. Only the root's parent is resolved: a stat of
        # the mount point itself would be a FUSE request to this very loop, which is busy here.
        given = os.path.normpath(self.opts.root)
        root = os.path.join(os.path.realpath(os.path.dirname(given)), os.path.basename(given))
        rel = os.path.relpath(os.path.normpath(path), root)
        slug, _, inner = rel.partition(os.sep)
        if self.opts.single_store and not rel.startswith(".."):
            slug, inner = self.engine.stores[0].slug, rel
        store = next((s for s in self.engine.stores if s.slug == slug), None)
        if rel.startswith("..") or store is None or not inner:
            return {"ok": False, "error": f"{path} is not a memory file of a store mounted at {root}"}
        return await self.engine.write_through(store.store_id, "/" + inner)


def _release_freed_memory() -> None:
    """Give the heap the initial download freed back to the system: glibc keeps it otherwise, and
    the daemon's resident size would stay at the download's peak for the whole session."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


async def _alongside(background: Callable[[], Awaitable[None]], body: Awaitable[Any]) -> Any:
    """`body`'s result, with `background()` (which never raises: `StoreClient.warm`) running
    beside it until it ends; an exception of `body` comes out as itself, not in a group."""
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(background)
            try:
                return await body
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # the body's alone: `background` never raises
        raise first_failure(group) from None


def wait_until_unmounted(root: str, timeout: float, *, resolve: bool = True) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fuse_mount_at(root, resolve=resolve) is None:
            return True
        time.sleep(0.05)
    return False
