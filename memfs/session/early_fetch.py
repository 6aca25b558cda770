"""The mount's early download (SEMANTICS.md#d-first-download, docs/PERFORMANCE.md "mount-ready").

A mount's start is two serial halves of about the same CPU: importing trio, httpx, pyfuse3 and
the engine (~0.4 s, all of it needed before the mount is ready), and reading the session and each
store's snapshot, parsing, hashing and storing it. This module overlaps them on the second core:
right after the daemon is forked (before pyfuse3 and the engine are imported), it forks a helper process that reads the
session and the counters (unless the session's answer said the service has none), and once the daemon holds the state dir's lock and has found it fresh
(no counter, no file, no baseline: a new sandbox), streams every store's snapshot into state.db's
blobs as it arrives, and sends the daemon what the plan needs: (counter, entries, shas) per store.
A service without counters (the hosted API) has no snapshot: the helper says so (the daemon then
does not ask the counters again): the daemon lists each store, and its listing says where the
store's version feed stands (memfs/sync/feed.py `listed_position`), so there is nothing more to
read early.
The engine's first pull takes that instead of asking (memfs/sync/remote.py `StoreReader.prefetched`).

The helper is a use of the store client, nothing of its own: its requests are `StoreClient`'s
(memfs/client/api.py: the same transport, so the environment's proxy, CA and URL as the daemon's
client, the same headers, timeouts and retries), its snapshots the client's streamed snapshot with
the mount's sink (memfs/client/snapshot_stream.py `StreamedSnapshot`), its writes the state dir's
own (memfs/mount/state.py `State.put_blobs`). This module holds only the process: the fork, the
pipe its answers come back on, and its end with the daemon.

A process, not a thread: the helper's parsing (orjson, UTF-8) needs a GIL, and the daemon's
imports hold its own; threads of one process would take turns. The daemon imports trio and httpx
(the client) just before it forks the helper, which inherits them; pyfuse3 and the engine it
imports while the helper streams.

What it never changes: the view. It writes only blobs (content by its verified sha256, which
nothing refers to until the plan does), into a state dir whose lock the daemon holds. Anything
that goes wrong (an HTTP error, auth, a broken or short stream, a timeout, the helper dying) only
means "not fetched early": the daemon then asks as it always did, with the same retries and the
same error messages. It does not run for a root with a mount on it (the daemon's preflight clears
a dead one and logs it, after logging is set up), nor at all with `MEMFS_EARLY_DOWNLOAD=off`.
"""

from __future__ import annotations

import os
import pickle
import struct
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memfs import limits

if TYPE_CHECKING:
    from memfs.client.api import StoreClient
    from memfs.mount.state import State

EARLY_ENV = "MEMFS_EARLY_DOWNLOAD"  # "off": every mount starts the old way (comparisons, tests)
_FRAME = struct.Struct("<I")
# Snapshots streamed at once: stores then end one after another, and the daemon places each (plan,
# 2,000 files: ~0.13 s) while the helper streams the next, instead of placing all 8 at the end.
EARLY_STREAMS = 4

Snapshot = tuple[int, list, set]  # counter, entries (snapshot_stream.SnapshotEntry), shas stored


class EarlyFetch:
    """The daemon's end of the helper: what it sent, waited for per key from any thread."""

    def __init__(self, pid: int, go_fd: int, results_fd: int):
        self.pid = pid
        self._go_fd: int | None = go_fd
        self._results_fd = results_fd
        self._results: dict[tuple[str, ...], Any] = {}
        self.reasons: dict[str, str] = {}  # what was not fetched early, and why (for the log)
        self.state: Any = None  # the state dir, opened and locked (memfs.mount.state.State)
        self.fresh = False  # the state dir had nothing: the snapshots are streamed
        self.taken: set[str] = set()  # stores whose early snapshot the first pull took
        self._done = False
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="memfs-early", daemon=True)
        self._reader.start()

    # -- the helper's messages ------------------------------------------------------------------
    def _read(self) -> None:
        try:
            with os.fdopen(self._results_fd, "rb") as pipe:
                while head := pipe.read(_FRAME.size):
                    if len(head) < _FRAME.size:
                        break
                    data = pipe.read(_FRAME.unpack(head)[0])
                    key, value, reason = pickle.loads(data)
                    with self._cond:
                        self._results[key] = value
                        if reason:
                            self.reasons[":".join(key)] = reason
                        self._cond.notify_all()
        except Exception as exc:  # whatever the pipe held: not fetched early, asked anew
            self.reasons.setdefault("helper", f"{type(exc).__name__}: {exc}")
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _wait(self, *key: str, pop: bool = False) -> Any:
        with self._cond:
            while key not in self._results and not self._done:
                self._cond.wait()
            return self._results.pop(key, None) if pop else self._results.get(key)

    def session(self) -> dict[str, Any] | None:
        """The session as the service answered it (200), or None: the daemon asks itself."""
        return self._wait("session")

    def counters(self) -> dict[str, int] | None:
        return self._wait("counters")

    def has_counter(self) -> bool | None:
        """After `counters()`: False when the service has no counters (the session's answer did
        not offer them, or the helper's read was answered 404/405: the hosted API), so the daemon
        does not ask; None when not known (the read failed,
        or was not made): the daemon asks itself, as it always did."""
        with self._cond:
            return self._results.get(("has_counter",))

    def limits(self) -> tuple[dict[str, str], tuple[float, float] | None]:
        """The `anthropic-ratelimit-requests-*` headers of the helper's last answer (the counters',
        else the session's), for the client's pacer (memfs/client/budget.py `Pacer.heard`): its
        first request is then paced like the rest. Empty when the service sent none. With them:
        when that request was sent and its answer came (time.monotonic()), or None."""
        return self._wait("limits") or ({}, None)

    def snapshot(self, store_id: str) -> _Take:
        return _Take(self, store_id)

    def describe(self, stores: int) -> str:
        """One log line: what the first download took from the early download, and what not."""
        why = "; ".join(f"{k}: {v}" for k, v in sorted(self.reasons.items()))
        return f"early download: {len(self.taken)} of {stores} store(s) streamed while the mount started" + (
            f" (not early: {why})" if why else ""
        )

    # -- control ------------------------------------------------------------------------------
    def go(self, ok: bool) -> None:
        """Let the helper stream the snapshots into the state dir (the daemon holds its lock and
        found it fresh), or tell it to stop after the session and counters."""
        if self._go_fd is None:
            return
        try:
            os.write(self._go_fd, b"1" if ok else b"0")
        except OSError:
            pass  # the helper is gone: its messages say what it got
        finally:
            os.close(self._go_fd)
            self._go_fd = None

    def close(self) -> None:
        """End the helper (at once, if it still runs: what it stored is blobs only) and reap it."""
        self.go(False)
        import signal

        try:
            pid, _status = os.waitpid(self.pid, os.WNOHANG)
            if pid == 0:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self._reader.join(timeout=5)
        with self._cond:
            self._results.clear()  # the daemon keeps this object for the session: not what it read


class _Take:
    """One store's early snapshot, for `StoreReader.prefetched` (memfs/sync/remote.py `Prefetched`)."""

    def __init__(self, fetch: EarlyFetch, store_id: str):
        self.fetch = fetch
        self.store_id = store_id

    def take(self) -> Snapshot | None:
        got = self.fetch._wait("snapshot", self.store_id, pop=True)  # held once: 2,000 entries a store
        if got is not None:
            self.fetch.taken.add(self.store_id)
        return got


def begin(root: str, state_dir: Path, session_id: str, base_url: str, token: str | None, *,
          timeout: float) -> EarlyFetch | None:  # fmt: skip
    """Start the early download, in the forked daemon before its heavy imports; None when it does
    not apply (then, or on any failure here, the daemon starts exactly as without it: it runs its
    own preflight and opens the state dir, with the error messages it always gave)."""
    from memfs.mount.mount_table import fuse_mount_at
    from memfs.session.preflight import MountError, preflight_root

    if os.environ.get(EARLY_ENV) == "off" or not token:
        return None
    if fuse_mount_at(root) is not None:
        return None  # a dead mount to clear first: the daemon's preflight does it, and logs it
    from memfs.session import control

    if control.socket_path_problem(state_dir):
        return None  # the daemon refuses that state dir before creating anything in it
    try:
        preflight_root(root)
    except (MountError, OSError):
        return None
    # The helper is a use of the client: trio and httpx imported here, once, and inherited by it
    # through the fork, not imported by both processes at once (~0.19 s of CPU each, the daemon
    # needs them anyway). The helper's first request goes out no later for it: it would have
    # imported them first itself. What is left to the daemon beside the helper is pyfuse3 and
    # the engine (memfs/session/commands.py `_run_foreground`).
    _import_client()
    go_r, go_w = os.pipe()
    results_r, results_w = os.pipe()
    daemon = os.getpid()
    pid = os.fork()
    if pid == 0:  # the helper
        code = 1
        try:
            os.close(go_w)
            os.close(results_r)
            _close_all_but(go_r, results_w)
            _die_with(daemon)
            helper = _Helper(results_w, go_r)
            code = helper.run(base_url, token, session_id, state_dir, timeout)
        finally:
            os._exit(code)
    os.close(go_r)
    os.close(results_w)
    fetch = EarlyFetch(pid, go_w, results_r)
    # While the helper asks for the session and the counters: the state dir, locked, and fresh?
    from memfs.mount.state import State

    try:
        state = State(state_dir)
    except Exception:
        fetch.close()
        return None
    try:
        state.lock(os.path.realpath(root))
        fresh = state.untouched()
    except Exception:  # locked by a live mount, or unreadable: the daemon says so itself
        state.close()
        fetch.close()
        return None
    fetch.state = state
    fetch.fresh = fresh
    if not fresh:
        fetch.reasons["snapshots"] = "the state dir holds a mount's state (not a first download)"
    fetch.go(fresh)
    return fetch


def _import_client() -> None:
    from memfs.session._trio import import_trio_without_ldconfig

    import_trio_without_ldconfig()
    import memfs.client.api  # noqa: F401 -- httpx, the client's modules


def _die_with(parent: int) -> None:
    """A daemon that dies (SIGKILL) while the helper streams takes the helper with it: nothing
    writes into a state dir whose lock a later mount may hold by then."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the helper ends with its streams (each bounded by the request timeout)
    if os.getppid() != parent:  # the daemon died before the prctl took effect
        os._exit(1)


def _close_all_but(*keep: int) -> None:
    """The helper holds nothing of the daemon's: not its state.db connection, its lock, or the
    pipe its `memfs mount` caller waits on for "ready"."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)


class _Helper:
    """The helper process: the session and the counters, then (on the daemon's go) every store's
    snapshot, EARLY_STREAMS at a time, each stored as it streams; each answer sent to the daemon
    as a pickled frame on the results pipe."""

    def __init__(self, results_fd: int, go_fd: int):
        self.results_fd = results_fd
        self.go_fd = go_fd
        self.lock = threading.Lock()  # the snapshots' worker threads send too

    def send(self, key: tuple[str, ...], value: Any, reason: str | None = None) -> None:
        data = pickle.dumps((key, value, reason), protocol=pickle.HIGHEST_PROTOCOL)
        frame = memoryview(_FRAME.pack(len(data)) + data)
        with self.lock:
            while frame:
                frame = frame[os.write(self.results_fd, frame) :]

    def _send_limits(self, client: StoreClient) -> None:
        """The rate-limit headers of the client's last answer, and when it was sent and answered
        (`EarlyFetch.limits`)."""
        self.send(("limits",), (client.limits_heard, client.limits_heard_at))

    def run(self, base_url: str, token: str, session_id: str, state_dir: Path, timeout: float) -> int:
        """Returns the exit status: 0 whatever the service answered (the messages say it)."""
        import trio  # imported before the fork (`_import_client`)

        from memfs.client.api import StoreClient

        async def main() -> None:
            async with StoreClient(base_url, token, timeout=timeout) as client:
                asked = await self._ask(client, session_id)
                if asked is None:
                    return
                ids, counted = asked
                go = await trio.to_thread.run_sync(os.read, self.go_fd, 1)
                if go == b"1" and counted:
                    await self._stream_all(client, ids, state_dir)

        trio.run(main)
        return 0

    async def _ask(self, client: StoreClient, session_id: str) -> tuple[list[str], bool] | None:
        """The session and the counters, sent as they come; the stores, and whether the service
        has counters (snapshots to stream), or None."""
        from memfs.client.errors import ApiError, Unreachable

        session: Any = None
        try:
            session = await client.get_session(session_id)
        except (ApiError, Unreachable) as exc:
            self._send_limits(client)
            self.send(("session",), None, f"the session read failed: {exc}")
            return None
        self._send_limits(client)
        if not isinstance(session, dict):  # the daemon asks, and says what is wrong with it
            self.send(("session",), None, "the session read answered no session object")
            return None
        self.send(("session",), session)
        resources = session.get("resources")
        found = [
            r.get("memory_store_id")
            for r in (resources if isinstance(resources, list) else [])
            if isinstance(r, dict) and r.get("type") == "memory_store"
        ]
        ids = [i for i in found if isinstance(i, str)]
        if not ids or len(ids) != len(found) or len(ids) > limits.MAX_STORES_PER_SESSION:
            return None  # the daemon's own check of the session says what is wrong with it
        if client.offers_counters is False:  # the hosted API: not asked (protocol.py EXTENSIONS_HEADER)
            self.send(("has_counter",), False)
            self.send(("counters",), None, "the service has no counters (its session answer says none)")
            return ids, False
        try:
            counters = await client.counters(ids)
        except (ApiError, Unreachable) as exc:
            self.send(("counters",), None, f"the counters read failed: {exc}")
            return None
        self._send_limits(client)
        if counters is None:  # no counter (the hosted API): no snapshot either
            self.send(("has_counter",), False)  # before the counters: the daemon reads it once they came
            self.send(("counters",), None, "the service has no counters")
            return ids, False
        self.send(("counters",), counters)
        return ids, True

    async def _stream_all(self, client: StoreClient, ids: list[str], state_dir: Path) -> None:
        import trio

        from memfs.mount.state import State

        state = State(state_dir)  # the daemon's, opened and migrated: its lock is the daemon's
        turns = trio.CapacityLimiter(EARLY_STREAMS)
        try:
            async with trio.open_nursery() as nursery:
                for store_id in ids:
                    nursery.start_soon(self._stream_one, client, state, store_id, turns)
        finally:
            state.close()

    async def _stream_one(self, client: StoreClient, state: State, store_id: str, turns: Any) -> None:
        """One store's snapshot, stored as it streams; sent to the daemon only once it ended whole."""
        from memfs.client.snapshot_stream import StreamedSnapshot

        key = ("snapshot", store_id)
        async with turns:
            snap = StreamedSnapshot(state, store_id)
            try:
                counter = await client.snapshot(store_id, snap)
            except Exception as exc:  # a broken or short stream, a timeout, bad content: asked anew
                self.send(key, None, f"{type(exc).__name__}: {exc}")
                return
            if counter is None:
                self.send(key, None, "the service has no snapshot")
                return
            self.send(key, (counter, snap.entries, snap.shas))
