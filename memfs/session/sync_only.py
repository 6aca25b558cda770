"""The daemon's sync-only socket (docs/SEMANTICS.md#d-worker, docs/API.md "The daemon's socket").

The sandbox image's worker runs as the agent's user, who must not reach the full control socket
(it can unmount). This second listener, at MEMFS_SYNC_SOCKET, answers `ping`, `sync`,
`write_through` (a worker's write/edit pushed at once: what is staged, no forced read unless a push
met a 409) and `status` and nothing else, to anyone who can reach its path (mode 0666). So it is built for a caller that
may be hostile (the agent, same uid as the worker):
- its directory must be the daemon user's (or root's) and writable by nobody else, never a
  symlink; the socket's mode is set on the socket itself, never through a link;
- CONNECTIONS at a time; a new connection when all are taken waits up to EVICT_GRACE for one to
  close (a client that closed after its answer frees its slot a moment later: without the wait, a
  new connection whose request was already on its way could be the one closed as idle), then
  closes the one idle longest (waiting for its next request line), so connections an agent holds
  cannot lock the worker out: the worker's next request re-opens its own (a client re-opens a
  held connection found closed once); only when every connection is in the middle of a request is the new one answered "busy";
- forced ticks cost the store service a counters read each: at most one per forced gap (the
  mount's sync interval, at most FORCED_GAP_MAX). A forced request waits for the next forced tick
  and every forced request that comes meanwhile shares it (coalesced): an agent forcing in a loop
  costs what the mount's own timer costs, and a final sync still runs a tick of its own that
  started after it asked (so it pushes everything written before it) within one gap.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from memfs.session.preflight import MountError

if TYPE_CHECKING:
    from memfs.session.daemon import Daemon

log = logging.getLogger("memfs.mount")

SYNC_ONLY_SOCKET_ENV = "MEMFS_SYNC_SOCKET"
CONNECTIONS = 4
MAX_REQUEST = 4096
IDLE = 60.0  # an idle connection is closed after this; the worker re-opens it
EVICT_GRACE = 0.5  # how long a new connection waits for a free slot before one idle is closed
FORCED_GAP_MAX = 15.0  # forced ticks at most once per sync interval, and at least this often allowed
SOCKET_MODE = 0o666  # it grants nothing but sync and status
DIR_MODE = 0o755  # a directory the daemon makes for it: the agent's user must reach the socket


def socket_dir_problem(path: str, st: os.stat_result) -> str | None:
    """Why the sync-only socket's directory cannot be trusted, or None (as the registry dir,
    control.runtime_dir_problem): another user who could write there could replace the socket."""
    if not stat.S_ISDIR(st.st_mode):  # lstat: a symlink too
        return f"the sync-only socket's directory {path} is not a directory (a symlink or a file)"
    if st.st_uid not in (os.geteuid(), 0):
        return f"the sync-only socket's directory {path} belongs to uid {st.st_uid}, not to the mount's user"
    if st.st_mode & 0o022:
        return (
            f"the sync-only socket's directory {path} is writable by other users "
            f"(mode {oct(st.st_mode & 0o777)}); make it 0755"
        )
    return None


def _checked_dir(directory: Path) -> None:
    """The socket's directory, made (DIR_MODE, whatever the umask) when missing, and checked."""
    made = False
    if not os.path.lexists(directory):
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(directory, DIR_MODE)
            made = True
        except FileExistsError:
            pass  # made meanwhile: checked below like any other
    if made:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, DIR_MODE)
        finally:
            os.close(fd)
    problem = socket_dir_problem(str(directory), os.lstat(directory))
    if problem:
        raise MountError(f"{problem}; the sync-only socket ({SYNC_ONLY_SOCKET_ENV}) is not opened there")


def _set_socket_mode(sock_path: Path, mode: int) -> None:
    """chmod the socket just bound, never what a symlink put at its path points to."""
    fd = os.open(sock_path, os.O_PATH | os.O_NOFOLLOW)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise MountError(f"{sock_path} is not the socket just bound there")
        os.chmod(f"/proc/self/fd/{fd}", mode)  # the inode the descriptor holds
    finally:
        os.close(fd)


@dataclass(eq=False)
class _Connection:
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    idle_since: float | None = None  # waiting for a request line since then; None while one runs


class _Slots:
    """CONNECTIONS at a time; a new one waits EVICT_GRACE for a slot to be given back, then
    takes the slot of the one idle longest."""

    def __init__(self, size: int):
        self.size = size
        self.open: set[_Connection] = set()
        self._freed = trio.Event()

    async def take(self) -> _Connection | None:
        with trio.move_on_after(EVICT_GRACE):
            while len(self.open) >= self.size:
                await self._freed.wait()
                self._freed = trio.Event()
        if len(self.open) >= self.size:
            idle = [c for c in self.open if c.idle_since is not None]
            if not idle:
                return None
            oldest = min(idle, key=lambda c: c.idle_since or 0.0)
            self.open.discard(oldest)
            oldest.scope.cancel()  # its handler closes it
        conn = _Connection(idle_since=trio.current_time())
        self.open.add(conn)
        return conn

    def give_back(self, conn: _Connection) -> None:
        if conn in self.open:
            self.open.discard(conn)
            self._freed.set()


@dataclass(eq=False)
class _Shared:
    done: trio.Event = field(default_factory=trio.Event)
    answer: dict[str, Any] = field(default_factory=dict)
    started: float = math.inf  # when the tick started (trio clock)


class ForcedTicks:
    """At most one forced tick per `gap`; the forced requests that wait for it share it."""

    def __init__(self, sync_now: Any, gap: float):
        self.sync_now, self.gap = sync_now, gap
        self.last = -math.inf  # when the last forced tick started (trio clock)
        self._next: _Shared | None = None  # the tick waiting for its turn, shared by who asks meanwhile

    async def sync(self) -> dict[str, Any]:
        asked = trio.current_time()
        shared = self._next
        if shared is not None:
            await shared.done.wait()
            return {**shared.answer, "coalesced": True, **_waited(asked, shared.started)}
        shared = self._next = _Shared()
        try:
            try:
                delay = self.last + self.gap - trio.current_time()
                if delay > 0:
                    await trio.sleep(delay)
            finally:
                self._next = None  # who asks from now on waits for the next one
            self.last = shared.started = trio.current_time()
            shared.answer = await self.sync_now(force=True, wait=True)
        except BaseException as exc:
            shared.answer = {"ok": False, "ran": False, "error": f"the forced tick did not run: {exc!r}"}
            raise
        finally:
            shared.done.set()
        return {**shared.answer, **_waited(asked, shared.started)}


def _waited(asked: float, started: float) -> dict[str, Any]:
    """How long a request waited for its forced tick's turn (not the tick itself)."""
    waited = started - asked
    return {"rate_limited_for": round(waited, 3)} if 0.01 <= waited < math.inf else {}


async def serve_sync_only(daemon: Daemon, path: str | None, task_status=trio.TASK_STATUS_IGNORED) -> None:
    if not path:
        task_status.started()
        return
    sock_path = Path(path)
    _checked_dir(sock_path.parent)
    try:
        sock_path.unlink()  # a stale socket (unlink never follows a link)
    except FileNotFoundError:
        pass
    listener_sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener_sock.bind(str(sock_path))
    _set_socket_mode(sock_path, SOCKET_MODE)
    listener_sock.listen(16)
    forced = ForcedTicks(daemon.engine.sync_now, min(daemon.opts.sync_interval, FORCED_GAP_MAX))
    slots = _Slots(CONNECTIONS)

    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            conn = await slots.take()
            if conn is None:
                await _send_line(stream, {"ok": False, "error": "busy: every connection is in a request"})
                return
            try:
                with conn.scope:
                    await _connection(daemon, stream, conn, forced)
            finally:
                slots.give_back(conn)

    async def guarded(stream: trio.SocketStream) -> None:
        try:
            await handle(stream)
        except Exception:  # a bad request must never take the daemon down
            log.exception("sync-only socket request failed")

    task_status.started()
    try:
        await trio.serve_listeners(guarded, [trio.SocketListener(listener_sock)])
    finally:
        try:
            sock_path.unlink()
        except FileNotFoundError:
            pass


async def _connection(
    daemon: Daemon, stream: trio.SocketStream, conn: _Connection, forced: ForcedTicks
) -> None:
    """One connection: request lines, each answered in order, until the client closes, a line is
    refused as too long, it stays idle IDLE seconds, or a new connection takes its slot (the
    worker holds its connection between tool calls and re-opens it when it finds it closed)."""
    buf = b""
    while True:
        conn.idle_since = trio.current_time()
        with trio.move_on_after(IDLE):
            while b"\n" not in buf and len(buf) <= MAX_REQUEST:
                try:
                    chunk = await stream.receive_some(MAX_REQUEST)
                except trio.BrokenResourceError:
                    return
                if not chunk:
                    return
                buf += chunk
        if b"\n" not in buf and len(buf) <= MAX_REQUEST:
            return  # idle, or a line never finished
        conn.idle_since = None
        line, _sep, rest = buf.partition(b"\n")
        too_long = len(line) > MAX_REQUEST
        buf = b"" if too_long else rest
        try:
            request = None if too_long else json.loads(line)
        except ValueError:
            request = None
        if not isinstance(request, dict):
            request = {}
        op = request.get("op")
        answer: dict[str, Any]
        if op == "ping":  # at once, from the event loop: tells a stopped daemon from a busy one
            answer = {"ok": True, "pong": True}
        elif op == "status":
            answer = await daemon._answer({"op": "status"})
        elif op == "sync" and request.get("force"):
            answer = await forced.sync()
        elif op == "sync":
            answer = await daemon.engine.sync_now(force=False, wait=bool(request.get("wait")))
        elif (
            op == "write_through"
        ):  # the worker's write/edit (SEMANTICS.md#d-merge): only what is staged goes
            answer = await daemon.write_through(request.get("path"))
        else:
            answer = {
                "ok": False,
                "error": 'this socket answers only {"op": "sync"}, {"op": "write_through"} and {"op": "status"}',
            }
        try:
            await stream.send_all(json.dumps(answer).encode() + b"\n")
        except trio.BrokenResourceError:
            return
        if too_long:
            return  # where the next line starts is unknown: the connection ends


async def _send_line(stream: trio.SocketStream, answer: dict[str, Any]) -> None:
    try:
        await stream.send_all(json.dumps(answer).encode() + b"\n")
    except trio.BrokenResourceError:
        pass
