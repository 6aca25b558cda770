"""A daemon started before the session (docs/SEMANTICS.md#d-standby, docs/OPERATIONS.md "Containers").

`memfs mount --prestart --root R` (the sandbox image runs it at boot) binds a socket for R in the
runtime registry dir and forks a standby daemon, which imports everything a mount needs (~0.4 s:
trio, httpx, pyfuse3, the engine) and then waits. A later `memfs mount --root R --session-id …`
finds the socket by R, sends the session, the token, its options and its environment in one JSON
line, and waits for "ready" as it does from a daemon it forks itself: the standby becomes that
mount's daemon, with the same start (commands.py `_run_foreground`) as the forked one. A mount
that comes while the standby still imports is taken between two imports (WARM_UP), so its early
download overlaps the rest of them as in a forked daemon; a ping says whether they are done.

The handover is three steps, so that exactly one of the two sides goes on: the mount's request;
the standby's "accepted"; the mount's "go". The mount falls back to forking its own daemon (today's
path) when nothing listens (no standby, or a killed one's socket), or when the standby closes or
does not accept within ACCEPT_WAIT; it says "go" only after "accepted", and the standby starts the
mount only on "go" (a mount that gave up before has closed the connection: the standby waits on).

Who may hand a session over: the socket is owner-only (0600, in the registry dir, 0700 and
checked as for the control socket: control.checked_runtime_dir) and the standby also asks the
kernel who connected (SO_PEERCRED) and refuses every other uid, root included. The token travels
only on that socket, never on a command line; the standby is non-dumpable from its start, like a
daemon holding a token (memfs/secret_env.py). A standby nobody uses exits after its timeout
(--standby-timeout) and removes its socket.

Light at the top (no json, socket or typing): `memfs mount` imports it before it decides whether
to fork.
"""

from __future__ import annotations

import os
import time

from memfs.session import control
from memfs.session._cpython import csocket

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket  # the types of the standby's unix socket (no HTTP: tests/test_layers.py)
    from typing import Any

STANDBY_TIMEOUT = 3600.0  # seconds a standby waits for its session before it exits
ACCEPT_WAIT = 30.0  # seconds `memfs mount` waits for a standby's "accepted" (it may still be importing)
REQUEST_WAIT = 10.0  # seconds a connected peer has for each of its lines
MAX_REQUEST = 1 << 20  # bytes: the request carries the mount's environment
_SO_PEERCRED_SIZE = 12  # struct ucred: pid, uid, gid (3 × int)


class StandbyError(Exception):
    """A clear reason no standby can be started for a root."""


def socket_path(root: str, directory: str | None = None) -> str:
    """The standby socket of root: in the registry dir (`directory`, else this process's, checked
    and made), named by the root's registry key."""
    directory = directory or control.checked_runtime_dir(create=True)
    assert directory is not None  # created above
    return control.registry_file(control.registry_key(root), directory).removesuffix(".json") + ".standby"


def _path_problem(path: str) -> str | None:
    size = len(os.fsencode(path))
    if size <= control.SOCKET_PATH_MAX:
        return None
    return (
        f"the standby socket {path} is too long a path ({size} bytes, at most {control.SOCKET_PATH_MAX}); "
        "set MEMFS_RUNTIME_DIR to a shorter directory"
    )


# -- the standby's side --------------------------------------------------------------------------
def listen(root: str) -> socket.socket:
    """The standby's listening socket for root, bound owner-only. StandbyError when a standby
    already waits there or the path cannot hold a socket; a dead one's socket is replaced."""
    path = socket_path(root)
    problem = _path_problem(path)
    if problem:
        raise StandbyError(problem)
    answer = ping(path)
    if answer is not None:
        raise StandbyError(
            f"a standby daemon (pid {answer.get('pid', '?')}) already waits for a session at {root}"
        )
    try:
        os.unlink(path)  # a killed standby's socket: nothing listens on it (the ping was refused)
    except FileNotFoundError:
        pass
    import socket  # a unix socket, the standby's side only: `memfs mount` uses _socket (memfs/session/_cpython.py)

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # 0600 from the bind on: never a moment open to others
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise StandbyError(f"cannot bind the standby socket {path}: {exc}") from exc
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(8)
    return sock


# What a mount's start imports, in the order warm-up imports it: between two of these the standby
# looks for a mount that arrived meanwhile (a sandbox whose session came at once, as the image's
# entrypoint's), and takes it there and then, so that the early download starts at once and the
# rest is imported beside it, as in a forked daemon (commands.py `_run_foreground`).
WARM_UP = (
    "orjson",
    "trio",  # through _trio.import_trio_without_ldconfig
    "httpx",
    # httpx imports these only when a client is made or sends its first request: the early
    # download's helper, forked from here, waited ~45 ms for them before its first request
    "httpcore",
    "encodings.idna",
    "memfs.client.api",  # the early download's helper, forked from here, is a use of the client
    "memfs.mount.state",
    "pyfuse3",
    "memfs.client",
    "memfs.mount.filesystem",
    "memfs.sync.engine",
    "memfs.sync.ports",
    "memfs.session.daemon",
    "memfs.mount.runner",
    "memfs.session.offline",
)


def _import(name: str) -> None:
    if name == "trio":
        from memfs.session._trio import import_trio_without_ldconfig

        import_trio_without_ldconfig()
        return
    import importlib

    importlib.import_module(name)


class Handover:
    """What `memfs mount` handed over: its arguments, token, environment, and the connection on
    which the standby reports "ready …" or "error: …" (commands.py `_run_foreground`'s ready_fd)."""

    def __init__(self, request: dict[str, Any], conn: csocket.socket):
        self.args: dict[str, Any] = request["args"]
        self.token: str | None = request.get("token")
        self.env: dict[str, str] = request["env"]
        self.umask: int = request["umask"]
        self.root: str = request["root"]
        self.state_dir: str = request["state_dir"]
        self.session_id: str = request["session_id"]
        self.base_url: str = request["base_url"]
        self.conn = conn


def serve(listener: socket.socket, root: str, timeout: float) -> Handover | None:
    """Import what a mount needs, then serve the standby socket until a mount hands a session
    over (None: the timeout passed). The socket is removed either way, also when the standby is
    stopped (SIGTERM, as SystemExit): a standby serves one mount."""
    path = listener.getsockname()
    bound = os.stat(path).st_ino
    deadline = time.monotonic() + timeout
    try:
        for name in WARM_UP:
            handed = _take(listener, root, 0, warm=False)  # a mount already waiting: it goes first
            if handed is not None:
                return handed
            _import(name)
        while (left := deadline - time.monotonic()) > 0:
            handed = _take(listener, root, left, warm=True)
            if handed is not None:
                return handed
        return None
    finally:
        listener.close()
        try:
            if os.stat(path).st_ino == bound:  # not a later standby's
                os.unlink(path)
        except FileNotFoundError:
            pass


def _take(listener: socket.socket, root: str, wait: float, *, warm: bool) -> Handover | None:
    """The next connection within `wait` seconds (0: only one already there), served; `warm`:
    the imports are done (a ping says so)."""
    listener.settimeout(wait)
    try:
        conn, _addr = listener.accept()
    except (TimeoutError, BlockingIOError):
        return None
    handed = _serve_one(conn, root, warm)
    if handed is None:
        conn.close()
    return handed


def peer_uid(conn: csocket.socket) -> int:
    import struct

    cred = conn.getsockopt(csocket.SOL_SOCKET, csocket.SO_PEERCRED, _SO_PEERCRED_SIZE)
    _pid, uid, _gid = struct.unpack("3i", cred)
    return uid


def _serve_one(conn: csocket.socket, root: str, warm: bool) -> Handover | None:
    """One connection: a ping answered, or a mount request accepted and confirmed ("go")."""
    import json

    try:
        if peer_uid(conn) != os.geteuid():
            return None  # another user (root too): not a word
        lines = _LineReader(conn)
        request = json.loads(lines.read(REQUEST_WAIT))
        if not isinstance(request, dict):
            return None
        if request.get("op") == "ping":
            answer = {"ok": True, "standby": True, "pid": os.getpid(), "root": root, "warm": warm}
            conn.sendall(json.dumps(answer).encode() + b"\n")
            return None
        if request.get("op") != "mount" or control.registry_key(
            str(request.get("root"))
        ) != control.registry_key(root):
            conn.sendall(b'{"ok":false,"error":"not a mount of this standby\'s root"}\n')
            return None
        handed = Handover(request, conn)
        conn.sendall(b"accepted\n")
        if lines.read(REQUEST_WAIT) != b"go":
            return None  # the mount gave up meanwhile and forks its own daemon
        conn.settimeout(None)
        return handed
    except (OSError, ValueError, KeyError, TypeError, EOFError):
        return None


class _LineReader:
    def __init__(self, conn: csocket.socket):
        self.conn = conn
        self.buf = b""

    def read(self, timeout: float) -> bytes:
        self.conn.settimeout(timeout)
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_REQUEST:
                raise ValueError("request too long")
            chunk = self.conn.recv(65536)
            if not chunk:
                raise EOFError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line


# -- the mount's side ----------------------------------------------------------------------------
def ping(path: str, timeout: float = control.PING_TIMEOUT) -> dict[str, Any] | None:
    """The answer of a standby at path to a ping, or None when none answers."""
    import json

    sock = csocket.socket(csocket.AF_UNIX, csocket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(b'{"op":"ping"}\n')
        answer = json.loads(_LineReader(sock).read(timeout))
        return answer if isinstance(answer, dict) else None
    except (OSError, ValueError, EOFError):
        return None
    finally:
        sock.close()


def waiting(root: str) -> bool:
    """Whether a standby's socket is there for root (alive or not: hand_over tells)."""
    try:
        return os.path.exists(socket_path(root))
    except (control.RegistryRefused, OSError):
        return False


def hand_over(root: str, request: dict[str, Any]) -> csocket.socket | None:
    """Hand a mount to the standby of root: the connection to read its report from (until EOF),
    or None when no standby took it (then the caller forks its own daemon, as without one)."""
    import json

    try:
        path = socket_path(root)
    except (control.RegistryRefused, OSError):
        return None
    if _path_problem(path) or not os.path.exists(path):
        return None
    sock = csocket.socket(csocket.AF_UNIX, csocket.SOCK_STREAM)
    try:
        sock.settimeout(ACCEPT_WAIT)
        sock.connect(path)
        sock.sendall(json.dumps({"op": "mount", **request}).encode() + b"\n")
        if _LineReader(sock).read(ACCEPT_WAIT) != b"accepted":
            raise EOFError("not accepted")
        sock.sendall(b"go\n")
    except ConnectionRefusedError:
        sock.close()
        _remove_dead(path)
        return None
    except (OSError, ValueError, EOFError):
        sock.close()
        return None
    sock.settimeout(None)
    return sock


def _remove_dead(path: str) -> None:
    """A killed standby's socket: nothing listens on it any more."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
