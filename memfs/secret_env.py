"""Credentials handed over in the environment, taken out of it once read (docs/OPERATIONS.md#security).

A process's environment stays readable in /proc/<pid>/environ for its whole life, to every
process of the same uid while it is dumpable: removing a variable from `os.environ` (unsetenv)
only drops the pointer, the original bytes stay in the block the kernel shows. So a process that
holds a credential makes itself non-dumpable and overwrites the value in place, and a child gets
only the variables it needs (`child_env`), a credential through a pipe (`MEMFS_TOKEN_FD`).

Light on purpose: `memfs mount` reads its token here before it forks (ctypes only).
"""

from __future__ import annotations

import ctypes
import os

PR_SET_DUMPABLE = 4
TOKEN_FD_ENV = "MEMFS_TOKEN_FD"  # a pipe's read end holding the sessions token (memfs worker --mount)
# What a child memfs process may need from its parent's environment: where it runs, its locale,
# the network settings every HTTP path honours, memfs's own non-secret settings. Never a credential.
CHILD_ENV_NAMES = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
)
SECRET_NAMES = ("ANTHROPIC_WORK_SECRET", "ANTHROPIC_ENVIRONMENT_KEY", "ANTHROPIC_API_KEY", "MEMFS_TOKEN")


def make_non_dumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0): /proc/<pid>/environ, /proc/<pid>/mem and ptrace are closed to
    same-uid processes (inherited by a fork, reset by an exec)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _wipe_environ_block(names: set[str]) -> None:
    """Overwrite the values of `names` where libc's environ points (the block /proc shows)."""
    try:
        libc = ctypes.CDLL(None)
        environ = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")
    except (OSError, ValueError):
        return
    prefixes = {n.encode() + b"=" for n in names}
    i = 0
    while environ[i]:
        addr = environ[i]
        entry = ctypes.string_at(addr)
        for prefix in prefixes:
            if entry.startswith(prefix):
                ctypes.memset(addr + len(prefix), 0, len(entry) - len(prefix))
        i += 1


def take(names: tuple[str, ...] = SECRET_NAMES) -> dict[str, str]:
    """The values of `names` in the environment, which no longer holds them afterwards."""
    values = {n: os.environ[n] for n in names if os.environ.get(n)}
    present = {n for n in names if n in os.environ}
    if present:
        _wipe_environ_block(present)
        for name in present:
            del os.environ[name]
    return values


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a memfs child process: CHILD_ENV_NAMES and MEMFS_* settings, no secret."""
    env = {k: v for k, v in os.environ.items() if k in CHILD_ENV_NAMES or k.startswith("MEMFS_")}
    for name in SECRET_NAMES:
        env.pop(name, None)
    env.update(extra or {})
    return env


def read_token_fd() -> str | None:
    """The token a parent passed on the pipe named by MEMFS_TOKEN_FD (read once, then closed)."""
    fd_text = os.environ.pop(TOKEN_FD_ENV, None)
    if not fd_text:
        return None
    try:
        fd = int(fd_text)
        with os.fdopen(fd, "rb") as pipe:
            return pipe.read(65536).decode().strip() or None
    except (ValueError, OSError):
        return None


def hide_in_cmdline(secret: str) -> bool:
    """Overwrite `secret` where /proc/<pid>/cmdline (what `ps` shows every local user) reads it
    from: the argument block of this process. Best effort (True if it was found and hidden): the
    argument was visible from the exec until now, so a flag stays the weaker way to pass it."""
    needle = secret.encode()
    if not needle:
        return False
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        arg_start, arg_end = int(fields[45]), int(fields[46])  # stat fields 48 and 49
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(arg_start)
            block = mem.read(arg_end - arg_start)
            if needle not in block:
                return False
            mem.seek(arg_start)
            mem.write(block.replace(needle, b"*" * len(needle)))
        return True
    except (OSError, ValueError, IndexError):
        return False
