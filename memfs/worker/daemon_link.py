"""How the worker talks to the mount's daemon: three calls over its control socket, nothing else.

Kept in one small module so the transport can change (a persistent `DaemonClient`, the sync-only
socket of the sandbox image) without touching the tools. Every call is blocking and bounded by a
timeout; the async wrappers run it on a worker thread so the lease heartbeat never waits on it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio

from memfs.session import control

# The sandbox image points the worker at the daemon's sync-only socket with this variable; it
# answers "sync" and "status" and nothing else (memfs/session/daemon.py, `_sync_only_server`).
SOCKET_ENV = "MEMFS_SYNC_SOCKET"

# A tick that is due pulls before it answers: bounded by the mount's own request timeouts.
PRE_CALL_TIMEOUT = 20.0
STATUS_TIMEOUT = 10.0


class DaemonUnavailable(Exception):
    """The daemon did not answer (not running, hung, or refused the request)."""


class DaemonLink:
    def __init__(self, root: str | os.PathLike[str]):
        self.root = os.fspath(root)
        sock = os.environ.get(SOCKET_ENV)
        # control.call() takes a state dir and appends the socket's name: a sync-only socket
        # is given as its own path, so its directory stands in for the state dir.
        self._socket_override = Path(sock) if sock else None
        self._state_dir: Path | None = None  # looked up once: resolving the root stats the mount

    def state_dir(self) -> Path:
        if self._state_dir is None:
            self._state_dir = control.lookup_state_dir(self.root)
        return self._state_dir

    def _call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        try:
            if self._socket_override is not None:
                answer = _call_socket(self._socket_override, request, timeout)
            else:
                answer = control.call(self.state_dir(), request, timeout=timeout)
        except (control.NoDaemon, OSError, ValueError) as exc:  # OSError covers socket.timeout
            raise DaemonUnavailable(f"the memfs daemon of {self.root} did not answer: {exc}") from exc
        # A failed tick answers {"ok": false, "ran": true, ...}: that is a result, not a refusal.
        if not answer.get("ok", False) and "ran" not in answer:
            raise DaemonUnavailable(f"the memfs daemon of {self.root} refused {request.get('op')!r}: {answer['error']}")
        return answer

    def status(self, timeout: float = STATUS_TIMEOUT) -> dict[str, Any]:
        return self._call({"op": "status"}, timeout)

    def sync(self, *, force: bool, wait: bool, timeout: float) -> dict[str, Any]:
        return self._call({"op": "sync", "force": force, "wait": wait}, timeout)

    async def async_sync(self, *, force: bool, wait: bool, timeout: float) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(lambda: self.sync(force=force, wait=wait, timeout=timeout))

    async def async_status(self, timeout: float = STATUS_TIMEOUT) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(lambda: self.status(timeout))


def _call_socket(sock_path: Path, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """control.call() against a socket given by its own path (it expects <state dir>/control.sock)."""
    if sock_path.name == control.SOCKET_NAME:
        return control.call(sock_path.parent, request, timeout=timeout)
    import json
    import socket

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
