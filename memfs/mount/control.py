"""The control channel between `memfs sync|status|unmount` and the live daemon.

A unix socket in the state dir speaks one JSON request line and one JSON answer line. A small
registry file per root (in the runtime dir) tells the commands where the state dir of a root is,
so `memfs sync --root R` works whatever `--state-dir` the mount was given.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

SOCKET_NAME = "control.sock"


def runtime_dir() -> Path:
    env = os.environ.get("MEMFS_RUNTIME_DIR")
    if env:
        return Path(env)
    return Path("/run/memfs") if os.geteuid() == 0 else Path(f"/tmp/memfs-{os.geteuid()}")


def _registry_path(real_root: str) -> Path:
    key = hashlib.sha256(real_root.encode()).hexdigest()[:20]
    return runtime_dir() / f"{key}.json"


def default_state_dir(root: str | os.PathLike[str]) -> Path:
    """One state dir per root under /var/lib/memfs (SPEC §3.4); per-user elsewhere when not root."""
    real = os.path.realpath(root).strip("/").replace("/", "_") or "root"
    base = Path("/var/lib/memfs") if os.geteuid() == 0 else Path.home() / ".local/state/memfs"
    return base / real


# The daemon passes its root already resolved: resolving it again (realpath stats it) while the
# daemon serves that very mount would make the daemon wait on itself.
def register(real_root: str, state_dir: Path, pid: int) -> None:
    path = _registry_path(real_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"root": real_root, "state_dir": str(state_dir), "pid": pid}))
    os.replace(tmp, path)


def lookup_state_dir(root: str) -> Path:
    """The state dir of the mount at root: the registry's answer, else the default for root."""
    try:
        return Path(json.loads(_registry_path(os.path.realpath(root)).read_text())["state_dir"])
    except (FileNotFoundError, ValueError, KeyError):
        return default_state_dir(root)


class NoDaemon(Exception):
    """No live daemon answers on the control socket."""


def call(state_dir: Path, request: dict[str, Any], *, timeout: float | None = 60.0) -> dict[str, Any]:
    """Send one request to the daemon and wait for its answer (blocking; used by the CLI)."""
    sock_path = Path(state_dir) / SOCKET_NAME
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(sock_path))
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        sock.close()
        raise NoDaemon(f"no memfs daemon answers at {sock_path}") from exc
    try:
        sock.sendall(json.dumps(request).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        sock.close()
    if not buf:
        raise NoDaemon("the memfs daemon closed the control connection without answering")
    return json.loads(buf)
