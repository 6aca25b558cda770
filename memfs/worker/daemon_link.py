"""How the worker talks to the mount's daemon: sync and status over its socket, nothing else.

Kept in one small module so the transport can change without touching the tools. Two sockets
speak the same JSON lines (memfs/session/control.py): the full control socket in the mount's state
dir (found through the root), or the sync-only socket of the sandbox image (`MEMFS_SYNC_SOCKET`).

The per-call path is async and holds its connection: an anyio unix socket on the worker's own
event loop (the SDK runs on asyncio), opened on first use and kept for every later call, so a
non-forced sync with no tick due is one small round trip, with no thread hop and no connect.
- One request in flight at a time (a lock): the answers on one connection come back in order, and
  a request given up half-way leaves an unread answer behind, so that connection is closed.
- Stopped or busy: an answer that has not come within ANSWER_PATIENCE (0.1 s) makes the link
  ping the daemon on a second connection. The daemon answers a ping from its event loop at once,
  whatever a tick is doing, so no answer within `ping_timeout` means it is stopped (SIGSTOP) or
  wedged, and the call gives up then; a live daemon whose due tick pulls still gets the request's
  whole `timeout`. (Pipelining the ping in front of every request, as `control.call()` does, costs
  a second wake-up of the event loop per call; the common answer needs one.)
- A held connection found broken (the daemon was restarted, or closed an idle connection) is
  re-opened once, transparently; a fresh connection that fails is the daemon's absence.

`status()` stays blocking: the tools factory that checks the mount is synchronous, once a session.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from memfs.session import control

# The sandbox image points the worker at the daemon's sync-only socket with this variable; it
# answers "ping", "sync" and "status" and nothing else (memfs/session/sync_only.py).
SOCKET_ENV = "MEMFS_SYNC_SOCKET"

# A tick that is due pulls before it answers: bounded by the mount's own request timeouts.
PRE_CALL_TIMEOUT = 20.0
# How long a tool call waits for a sign of life (connect + the ping's answer) before it runs
# without the sync: a live daemon answers the ping in tens of microseconds.
PRE_CALL_PING_TIMEOUT = 2.0
STATUS_TIMEOUT = 10.0
# A write-through is up to seven rounds (a read and a push each, sync/write_through.py TRIES) of one
# store, a second or so each: bounded like a pre-call sync.
WRITE_THROUGH_TIMEOUT = 20.0
# How long an answer may take before a ping on a second connection checks the daemon is alive.
ANSWER_PATIENCE = 0.1
_PING = b'{"op":"ping"}\n'
_MAX_LINE = 1 << 20  # a status answer lists every store: far below this


class DaemonUnavailable(Exception):
    """The daemon did not answer (not running, hung, or refused the request)."""


class _Broken(Exception):
    """The connection ended before an answer: worth one retry on a fresh connection."""


class DaemonLink:
    def __init__(self, root: str | os.PathLike[str]):
        self.root = os.fspath(root)
        sock = os.environ.get(SOCKET_ENV)
        self._socket_override = Path(sock) if sock else None
        self._state_dir: Path | None = None  # looked up once: resolving the root stats the mount
        self._stream: anyio.abc.SocketStream | None = None
        self._buf = b""
        self._lock: anyio.Lock | None = None  # made on the event loop that uses it

    def state_dir(self) -> Path:
        if self._state_dir is None:
            try:
                self._state_dir = control.lookup_state_dir(self.root)
            except control.RegistryRefused as exc:
                raise DaemonUnavailable(str(exc)) from None
        return self._state_dir

    def socket_path(self) -> Path:
        if self._socket_override is not None:
            return self._socket_override
        return self.state_dir() / control.SOCKET_NAME

    def _checked(self, request: dict[str, Any], answer: Any) -> dict[str, Any]:
        if not isinstance(answer, dict):
            raise DaemonUnavailable(
                f"the memfs daemon of {self.root} answered {request.get('op')!r} with {answer!r}"
            )
        # A failed tick answers {"ok": false, "ran": true, ...}: that is a result, not a refusal.
        if not answer.get("ok", False) and "ran" not in answer:
            raise DaemonUnavailable(
                f"the memfs daemon of {self.root} refused {request.get('op')!r}: {answer.get('error')}"
            )
        return answer

    # -- blocking, once per session ---------------------------------------------------------------
    def status(self, timeout: float = STATUS_TIMEOUT) -> dict[str, Any]:
        request = {"op": "status"}
        try:
            path = self.socket_path()
            answer = (
                control.call(path.parent, request, timeout=timeout)
                if path.name == control.SOCKET_NAME
                else _call_blocking(path, request, timeout)
            )
        except (control.NoDaemon, OSError, ValueError) as exc:  # OSError covers socket.timeout
            raise DaemonUnavailable(f"the memfs daemon of {self.root} did not answer: {exc}") from exc
        return self._checked(request, answer)

    # -- async, on the held connection ------------------------------------------------------------
    async def async_sync(
        self, *, force: bool, wait: bool, timeout: float, ping_timeout: float = PRE_CALL_PING_TIMEOUT
    ) -> dict[str, Any]:
        return await self.request(
            {"op": "sync", "force": force, "wait": wait}, timeout=timeout, ping_timeout=ping_timeout
        )

    async def async_write_through(self, path: str, timeout: float = WRITE_THROUGH_TIMEOUT) -> dict[str, Any]:
        """Push the memory file at `path` now (SEMANTICS.md#d-merge); the answer says what became of it."""
        return await self.request({"op": "write_through", "path": path}, timeout=timeout)

    async def async_status(self, timeout: float = STATUS_TIMEOUT) -> dict[str, Any]:
        return await self.request({"op": "status"}, timeout=timeout)

    async def request(
        self, request: dict[str, Any], *, timeout: float, ping_timeout: float = control.PING_TIMEOUT
    ) -> dict[str, Any]:
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            ping_wait = max(0.001, min(ping_timeout, timeout))
            for attempt in (0, 1):
                fresh = self._stream is None
                try:
                    answer = await self._exchange(request, ping_wait, timeout)
                except _Broken as exc:
                    await self._drop()
                    if fresh or attempt:
                        raise DaemonUnavailable(
                            f"the memfs daemon of {self.root} did not answer: {exc}"
                        ) from exc
                    continue  # a held connection the daemon closed (restart, idle): once more, fresh
                except TimeoutError as exc:
                    await self._drop()
                    raise DaemonUnavailable(
                        f"the memfs daemon of {self.root} did not answer {request.get('op')!r} "
                        f"within {timeout:g}s (a connect within {ping_wait:g}s)"
                    ) from exc
                except (OSError, ValueError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                    await self._drop()
                    raise DaemonUnavailable(f"the memfs daemon of {self.root} did not answer: {exc}") from exc
                except BaseException:  # cancelled half-way: an answer may be left unread on it
                    await self._drop()
                    raise
                if isinstance(answer, dict) and not answer.get("ok", False) and "ran" not in answer:
                    await self._drop()  # a refusal ("busy") ends that connection on the daemon's side
                return self._checked(request, answer)
        raise AssertionError("unreachable")

    async def _exchange(self, request: dict[str, Any], ping_wait: float, timeout: float) -> Any:
        path = self.socket_path()
        started = anyio.current_time()
        with anyio.fail_after(ping_wait):
            if self._stream is None:
                try:
                    self._stream = await anyio.connect_unix(str(path))
                except (FileNotFoundError, ConnectionRefusedError) as exc:
                    raise DaemonUnavailable(
                        f"the memfs daemon of {self.root} did not answer: nothing listens at {path}"
                    ) from exc
                self._buf = b""
            try:
                await self._stream.send(json.dumps(request).encode() + b"\n")
            except (anyio.BrokenResourceError, BrokenPipeError, ConnectionResetError) as exc:
                raise _Broken(f"the connection to {path} is closed") from exc
        # The answer almost always comes at once (no tick due): one wake-up, no ping. Only when
        # it does not is a second connection asked whether the daemon is alive (a due tick pulls)
        # or stopped; _line keeps what it has read, so waiting on after the probe loses nothing.
        with anyio.move_on_after(min(ANSWER_PATIENCE, ping_wait)):
            return json.loads(await self._line(path))
        await self._probe(path, ping_wait)
        left = timeout - (anyio.current_time() - started)
        with anyio.fail_after(max(0.001, left)):
            return json.loads(await self._line(path))

    async def _probe(self, path: Path, ping_wait: float) -> None:
        """A ping on a connection of its own: any answer line within ping_wait means alive."""
        gone = DaemonUnavailable(
            f"the memfs daemon of {self.root} did not answer a ping within "
            f"{ping_wait:g}s (stopped or hung?); it was asked at {path}"
        )
        try:
            with anyio.fail_after(ping_wait):
                async with await anyio.connect_unix(str(path)) as probe:
                    await probe.send(_PING)
                    buf = b""
                    while b"\n" not in buf:
                        buf += await probe.receive(65536)
        except (TimeoutError, OSError, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
            raise gone from exc

    async def _line(self, path: Path) -> bytes:
        assert self._stream is not None
        while b"\n" not in self._buf:
            try:
                chunk = await self._stream.receive(65536)
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError) as exc:
                raise _Broken(f"the daemon closed the connection at {path}") from exc
            self._buf += chunk
            if len(self._buf) > _MAX_LINE:
                raise ValueError(f"an answer line over {_MAX_LINE} bytes from {path}")
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    async def _drop(self) -> None:
        stream, self._stream, self._buf = self._stream, None, b""
        if stream is not None:
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def aclose(self) -> None:
        if self._lock is None:
            self._lock = anyio.Lock()
        await self._drop()


def _call_blocking(sock_path: Path, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One request on a fresh connection to a socket given by its own path (the sync-only one)."""
    import socket  # a unix socket: the daemon's, not a store service's (tests/test_layers.py)

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(str(sock_path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise control.NoDaemon(f"no memfs daemon answers at {sock_path}") from exc
        s.sendall(json.dumps(request).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    if not buf:
        raise control.NoDaemon("the memfs daemon closed the connection without answering")
    return json.loads(buf)
