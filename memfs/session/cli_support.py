"""What every `memfs` session command shares: argument types, the error line, the exit code for
changes not on the store, and the one way a command takes the sessions token. Light: imported
by the command line before any heavy module (no httpx, trio or pyfuse3 here)."""

from __future__ import annotations

import os
import sys

EXIT_NOT_ON_STORE = 3  # changes are kept in the state dir, not on the store


def parse_size(text: str) -> int:
    import argparse
    import re

    m = re.fullmatch(r"\s*(\d+)\s*([KMG]i?B?|B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 2000000, 512KiB, 32MiB)")
    n = int(m.group(1))
    unit = (m.group(2) or "").upper().rstrip("B").rstrip("I")
    return n * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[unit]


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        import argparse

        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _fail(command: str, message: str, code: int = 1) -> int:
    print(f"memfs {command}: error: {message}", file=sys.stderr)
    return code


def _token() -> str | None:
    """The sessions token: from the pipe a parent passed (MEMFS_TOKEN_FD), else the work secret,
    else MEMFS_TOKEN. Read once: the variables are then wiped from this process's environment
    and the process made non-dumpable (memfs/secret_env.py), so no same-uid process (the agent's
    tools) reads the credential in /proc/<pid>/environ or its memory; the daemon and its early
    download are forks of this process and inherit both."""
    from memfs import secret_env  # light: read before the heavy imports
    from memfs.client.work_secret import sessions_token_from_secret

    passed = secret_env.read_token_fd()
    taken = secret_env.take(("ANTHROPIC_WORK_SECRET", "MEMFS_TOKEN"))
    token = (
        passed or sessions_token_from_secret(taken.get("ANTHROPIC_WORK_SECRET")) or taken.get("MEMFS_TOKEN")
    )
    if token:
        secret_env.make_non_dumpable()
    return token or None


class ReadyLine:
    """The one line a forked daemon's parent waits for on `ready_fd` ("ready …" or "error: …"),
    written once; without a descriptor (`--foreground`) nothing is written."""

    def __init__(self, ready_fd: int | None):
        self._file = os.fdopen(ready_fd, "w") if ready_fd is not None else None

    @property
    def pending(self) -> bool:
        return self._file is not None

    def __call__(self, text: str) -> None:
        if self._file is not None:
            self._file.write(text)
            self._file.close()
            self._file = None
