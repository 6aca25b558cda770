"""The control channel between `memfs sync|status|unmount` (and worker hooks) and the live daemon.

A unix socket in the state dir speaks JSON lines: one request line, one answer line, in order, as
many as the client sends on one connection. A small registry file per root (in the runtime dir)
tells the commands where the state dir of a root is, so `memfs sync --root R` works whatever
`--state-dir` the mount was given.

Nothing here touches the mount path itself (no stat, realpath, exists of the root or below it):
a stopped or wedged FUSE daemon would hang that call for ever, before any timeout could help
(docs/SEMANTICS.md#d-commands). Roots are keyed by `registry_key()`: the absolute path as given, normalised, with
symlinks resolved only in its parent directories.

"Alive but busy" and "stopped" are told apart by a ping pipelined in front of every request: the
daemon answers it at once from its event loop whatever a tick or the final sync is doing, so no
answer to the ping within PING_TIMEOUT means the daemon is not running (SIGSTOP) or its loop is
wedged, while the request itself may take as long as it legitimately needs (`sync --wait`,
`unmount` with its 30 s final sync).
"""

import os
import time

from memfs.session._cpython import csocket, dumps, loads, sha256_hex

# None of typing, pathlib, json or socket at import time: the per-call hook (`memfs sync` as a
# process, docs/SEMANTICS.md#d-commands) must answer in ~20 ms. JSON, the socket and sha256 come
# from CPython's C modules through memfs/session/_cpython.py (which says what each saves); paths
# are strings inside and the public functions return Paths.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

SOCKET_NAME = "control.sock"
SOCKET_PATH_MAX = 107  # bytes: a unix socket's sun_path is 108, with its terminating NUL
PING_TIMEOUT = 5.0  # connect + the daemon's answer to the ping: a live daemon answers in well under 1 ms
_PING = b'{"op":"ping"}\n'


def _path(p: str) -> "Path":
    from pathlib import Path

    return Path(p)


def _runtime_dir() -> str:
    env = os.environ.get("MEMFS_RUNTIME_DIR")
    if env:
        return env
    return "/run/memfs" if os.geteuid() == 0 else f"/tmp/memfs-{os.geteuid()}"


def registry_key(root: str | os.PathLike[str]) -> str:
    """The name of a root that never stats the root itself: absolute, normalised, and with
    symlinks resolved in the parent directories only (the parent is not in the mount)."""
    path = os.path.normpath(os.path.abspath(os.fspath(root)))
    parent, name = os.path.split(path)
    if not name:  # "/"
        return path
    return os.path.join(os.path.realpath(parent), name)


class RegistryRefused(Exception):
    """The runtime dir is not one this user can trust (another user's, or writable by others)."""


def runtime_dir_problem(path: str, st: os.stat_result) -> str | None:
    """Why the registry dir `path` cannot be trusted, or None. Another local user who made
    /tmp/memfs-<uid> first (or a symlink there) would otherwise choose the state dir that
    `memfs sync|status|unmount --root R` talk to. Root's own directories are trusted."""
    import stat

    if not stat.S_ISDIR(st.st_mode):  # a symlink too: lstat
        return f"the memfs registry dir {path} is not a directory (a symlink or a file)"
    if st.st_uid not in (os.geteuid(), 0):
        return (
            f"the memfs registry dir {path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): "
            "another user may have made it to redirect memfs commands; remove it, or set MEMFS_RUNTIME_DIR "
            "to a directory of yours"
        )
    if st.st_mode & 0o022:
        return (
            f"the memfs registry dir {path} is writable by other users (mode {oct(st.st_mode & 0o777)}); "
            f"make it private: chmod 700 {path}"
        )
    return None


def checked_runtime_dir(create: bool = False) -> str | None:
    """The registry dir, checked (RegistryRefused); None when it does not exist and `create` is
    False. Created 0700 (with its parents as the umask says)."""
    path = _runtime_dir()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return None
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # made meanwhile: checked below like any other
        st = os.lstat(path)
    problem = runtime_dir_problem(path, st)
    if problem:
        raise RegistryRefused(problem)
    return path


def _registry_file(key: str, directory: str | None = None) -> str:
    return os.path.join(directory or _runtime_dir(), f"{sha256_hex(key.encode())[:20]}.json")


registry_file = _registry_file  # public: the standby socket of a root is named after it (standby.py)


def _default_state_dir(root: str | os.PathLike[str]) -> str:
    name = registry_key(root).strip("/").replace("/", "_") or "root"
    base = (
        "/var/lib/memfs" if os.geteuid() == 0 else os.path.join(os.path.expanduser("~"), ".local/state/memfs")
    )
    return os.path.join(base, name)


def default_state_dir(root: str | os.PathLike[str]) -> "Path":
    """One state dir per root under /var/lib/memfs (docs/SEMANTICS.md#d-state); per-user elsewhere when not root."""
    return _path(_default_state_dir(root))


# The daemon passes its root already resolved, and the root as the user spelled it (`given`):
# resolving either again while the daemon serves that very mount would make it wait on itself.
def register(real_root: str, state_dir: "Path", pid: int, given: str | None = None) -> None:
    body = dumps({"root": real_root, "state_dir": str(state_dir), "pid": pid})
    keys = {real_root} | ({registry_key(given)} if given else set())
    directory = checked_runtime_dir(create=True)
    for key in keys:
        path = _registry_file(key, directory)
        tmp = f"{path}.tmp{os.getpid()}"
        try:  # a leftover of a process that had this pid: never written through
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        # 0600 whatever the umask (it names a state dir, which holds every store's content)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, body.encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)


def unregister(real_root: str, state_dir: "Path", given: str | None = None) -> None:
    """Remove the entries of a daemon that ended cleanly (nothing left for `memfs flush`): they
    would otherwise pile up in /run/memfs. Only entries that still name this state dir."""
    keys = {real_root} | ({registry_key(given)} if given else set())
    for key in keys:
        path = _registry_file(key)
        entry = registry_entry(key)
        if entry is not None and entry.get("state_dir") == str(state_dir):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def registry_entry(root: str | os.PathLike[str]) -> "dict[str, Any] | None":
    """What the daemon of root registered ({root, state_dir, pid}), or None. RegistryRefused when
    the registry dir is not trustworthy (runtime_dir_problem)."""
    directory = checked_runtime_dir()
    if directory is None:
        return None
    try:
        with open(_registry_file(registry_key(root), directory)) as f:
            entry = loads(f.read())
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and "state_dir" in entry else None


def state_dir_of(root: str | os.PathLike[str]) -> str:
    """lookup_state_dir() as a string (the per-call hook never needs pathlib)."""
    entry = registry_entry(root)
    return str(entry["state_dir"]) if entry is not None else _default_state_dir(root)


def lookup_state_dir(root: str) -> "Path":
    """The state dir of the mount at root: the registry's answer, else the default for root."""
    return _path(state_dir_of(root))


def daemon_owner(state_dir: str | os.PathLike[str]) -> "dict[str, Any]":
    """The pid and root recorded in the state dir's lock file ({} when none)."""
    try:
        with open(os.path.join(os.fspath(state_dir), "lock")) as f:
            info = loads(f.read() or "{}")
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


class NoDaemon(Exception):
    """No live daemon answers on the control socket."""


class DaemonNotAnswering(NoDaemon):
    """A daemon holds the socket but did not answer the ping in time (stopped, or wedged)."""

    def __init__(self, state_dir: str | os.PathLike[str], waited: float):
        owner = daemon_owner(state_dir)
        pid, root = owner.get("pid"), owner.get("root") or "?"
        self.state_dir, self.pid, self.root = _path(os.fspath(state_dir)), pid, root
        who = f"pid {pid}" if pid else "its pid is in the lock file"
        resume = f"`kill -CONT {pid}`" if pid else "SIGCONT"
        end = f"`kill {pid}`" if pid else "SIGTERM"
        super().__init__(
            f"the memfs daemon at {root} ({who}) does not answer (stopped?) within {waited:g}s; "
            f"if it was stopped, resume it with {resume} and retry; if it is hung, end it with {end} "
            f"(the final sync runs on SIGTERM; what it cannot upload stays in {state_dir}: "
            f"`memfs flush --state-dir {state_dir}`)"
        )


def _ping_wait(timeout: float | None) -> float:
    """How long the ping may take: PING_TIMEOUT, or less when the whole call must be quicker."""
    return PING_TIMEOUT if timeout is None else max(0.001, min(PING_TIMEOUT, timeout))


def socket_path_problem(state_dir: str | os.PathLike[str]) -> str | None:
    """Why no daemon can listen on the control socket of state_dir, or None: its path must fit a
    unix socket address (the kernel refuses a longer one with "AF_UNIX path too long")."""
    sock_path = os.path.join(os.fspath(state_dir), SOCKET_NAME)
    size = len(os.fsencode(sock_path))
    if size <= SOCKET_PATH_MAX:
        return None
    return (
        f"the state dir {os.fspath(state_dir)} is too long a path for its control socket "
        f"({sock_path}: {size} bytes, at most {SOCKET_PATH_MAX}); choose a shorter --state-dir"
    )


def _connect(sock_path: str, deadline: float) -> csocket.socket:
    problem = socket_path_problem(os.path.dirname(sock_path))
    if problem:  # no daemon can be listening there (the mount refuses such a state dir)
        raise NoDaemon(problem)
    sock = csocket.socket(csocket.AF_UNIX, csocket.SOCK_STREAM)
    sock.settimeout(max(0.001, deadline - time.monotonic()))
    try:
        sock.connect(sock_path)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        sock.close()
        raise NoDaemon(f"no memfs daemon answers at {sock_path}") from exc
    except OSError:  # a full backlog of a stopped daemon times out here
        sock.close()
        raise
    return sock


class _Lines:
    """Answer lines from one connection (a buffer, since answers may arrive together)."""

    def __init__(self, sock: csocket.socket):
        self.sock = sock
        self.buf = b""

    def read(self, timeout: float | None) -> bytes:
        self.sock.settimeout(timeout)
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise NoDaemon("the memfs daemon closed the control connection without answering")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line


def _exchange(
    sock: csocket.socket,
    lines: _Lines,
    state_dir: str,
    request: "dict[str, Any]",
    ping_deadline: float,
    timeout: float | None,
    waited: float,
) -> "dict[str, Any]":
    """Ping + request in one write; the ping's answer within the deadline, the request's within timeout."""
    try:
        sock.settimeout(max(0.001, ping_deadline - time.monotonic()))
        sock.sendall(_PING + dumps(request).encode() + b"\n")
        lines.read(max(0.001, ping_deadline - time.monotonic()))
    except TimeoutError as exc:
        raise DaemonNotAnswering(state_dir, waited) from exc
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise NoDaemon(f"the memfs daemon at {state_dir} closed the control connection") from exc
    try:
        return loads(lines.read(timeout))
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise NoDaemon(f"the memfs daemon at {state_dir} closed the control connection") from exc


def call(
    state_dir: str | os.PathLike[str], request: "dict[str, Any]", *, timeout: float | None = 60.0
) -> "dict[str, Any]":
    """Send one request to the daemon and wait for its answer (blocking; used by the CLI).

    Raises NoDaemon when nothing listens, DaemonNotAnswering (a NoDaemon) when a daemon holds the
    socket but does not answer its ping within PING_TIMEOUT (or `timeout`, if shorter),
    TimeoutError when the live daemon's answer takes longer than `timeout`."""
    state_dir = os.fspath(state_dir)
    sock_path = os.path.join(state_dir, SOCKET_NAME)
    waited = _ping_wait(timeout)
    ping_deadline = time.monotonic() + waited
    try:
        sock = _connect(sock_path, ping_deadline)
    except TimeoutError as exc:
        raise DaemonNotAnswering(state_dir, waited) from exc
    try:
        return _exchange(sock, _Lines(sock), state_dir, request, ping_deadline, timeout, waited)
    finally:
        sock.close()


class DaemonClient:
    """A small client of a live daemon's control socket, for hooks that call it often (a worker
    calls `sync()` before every tool call). It keeps its connection open between calls, so a
    non-forced sync when no tick is due costs one round trip on a unix socket (tens of µs).

        client = DaemonClient("/mnt/memory")          # a mount root, or state_dir=…
        client.sync()                                 # {"ok": True, "ran": False, "next_in": 9.2}
        client.sync(force=True, wait=True)            # end of a turn: everything uploaded
        client.status()["stores"][0]["staged"]
        client.close()                                # or use it as a context manager

    Errors are those of `call()`: NoDaemon, DaemonNotAnswering, TimeoutError. A connection the
    daemon closed (it was restarted) is re-opened once, transparently."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        state_dir: str | os.PathLike[str] | None = None,
        timeout: float | None = 120.0,
    ):
        if (root is None) == (state_dir is None):
            raise ValueError("give a mount root or state_dir=, not both")
        if state_dir is not None:
            self.state_dir = _path(os.fspath(state_dir))
        else:
            assert root is not None  # checked above: exactly one of the two
            self.state_dir = lookup_state_dir(os.fspath(root))
        self.timeout = timeout
        self._sock: csocket.socket | None = None
        self._lines: _Lines | None = None

    def request(self, request: "dict[str, Any]", *, timeout: float | None = None) -> "dict[str, Any]":
        timeout = self.timeout if timeout is None else timeout
        for attempt in (0, 1):
            fresh = self._sock is None
            waited = _ping_wait(timeout)
            ping_deadline = time.monotonic() + waited
            if fresh:
                try:
                    self._sock = _connect(str(self.state_dir / SOCKET_NAME), ping_deadline)
                except TimeoutError as exc:
                    raise DaemonNotAnswering(self.state_dir, waited) from exc
                self._lines = _Lines(self._sock)
            assert self._sock is not None and self._lines is not None
            try:
                return _exchange(
                    self._sock, self._lines, str(self.state_dir), request, ping_deadline, timeout, waited
                )
            except DaemonNotAnswering:
                self.close()
                raise
            except NoDaemon:
                self.close()
                if fresh or attempt:  # a reused connection may have been closed by a restart
                    raise
            except BaseException:
                self.close()  # never leave a half-read answer on the connection
                raise
        raise AssertionError("unreachable")

    def sync(
        self, *, force: bool = False, wait: bool = False, timeout: float | None = None
    ) -> "dict[str, Any]":
        return self.request({"op": "sync", "force": force, "wait": wait}, timeout=timeout)

    def status(self, *, timeout: float | None = None) -> "dict[str, Any]":
        return self.request({"op": "status"}, timeout=timeout)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = self._lines = None

    def __enter__(self) -> "DaemonClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
