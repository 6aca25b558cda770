"""The one workaround memfs applies to trio's internals, in one place: its import without `ldconfig`.

trio's import names its worker threads through libpthread's `pthread_setname_np`, and finds the
library with `ctypes.util.find_library("pthread")` (trio/_core/_thread_cache.py), which on Linux
runs `ldconfig -p` in a subprocess and parses its whole output: 10-60 ms of every mount here, for a
name the dynamic loader resolves at once. So for the time of trio's import only, that one lookup
is answered with the name the real lookup returns on glibc, when the loader can open it; any other
lookup, and one the loader cannot open, goes to the real `find_library`, which is put back after.

Checked on trio 0.35.0 (TRIO_VERSION_CHECKED; pyproject.toml allows trio>=0.25): if trio stops
looking pthread up this way, the shim does nothing (the mount's start is ldconfig's slower, never
wrong), and tests/session/test_start_path.py fails, naming what moved, so the shim is re-read or
removed.
"""

from __future__ import annotations

import sys

TRIO_VERSION_CHECKED = "0.35.0"
LOOKED_UP = "pthread"  # the one name trio's import asks find_library for (the test checks it still does)
GLIBC_NAME = "libpthread.so.0"


def import_trio_without_ldconfig() -> None:
    """Import trio with its one library lookup answered by the dynamic loader."""
    if "trio" in sys.modules:
        return
    import ctypes
    import ctypes.util

    real = ctypes.util.find_library

    def find_library(name: str) -> str | None:
        if name == LOOKED_UP:
            try:
                ctypes.CDLL(GLIBC_NAME)
                return GLIBC_NAME
            except OSError:
                pass
        return real(name)

    ctypes.util.find_library = find_library
    try:
        import trio  # noqa: F401
    finally:
        ctypes.util.find_library = real
