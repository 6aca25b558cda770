"""The mount's start path: trio imported without `ldconfig` (memfs/session/_trio.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from memfs.session import _trio


def test_trio_is_imported_without_running_ldconfig():
    # A fresh interpreter (trio must not be imported yet): any subprocess started during the
    # import fails it, and trio must still have found pthread_setname_np: its worker threads carry
    # its names in the kernel (public behaviour, not trio's private module).
    code = textwrap.dedent(
        """
        import subprocess, sys
        def refuse(*a, **k):
            raise AssertionError(f"a subprocess during trio's import: {a!r}")
        subprocess.Popen.__init__ = refuse
        from memfs.session._trio import import_trio_without_ldconfig
        assert "trio" not in sys.modules
        import_trio_without_ldconfig()
        import ctypes.util, threading, trio
        assert ctypes.util.find_library.__module__ == "ctypes.util"  # the real lookup is back
        def comm():  # the kernel's name of this thread: trio names its workers through libpthread
            with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
                return f.read().strip()
        async def main():
            return await trio.to_thread.run_sync(comm)
        worker = trio.run(main)
        assert worker != comm() and "comm" in worker, (worker, comm())  # unnamed, it would be python's
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_the_old_import_did_run_ldconfig():
    # What the shim avoids is real here: without it trio's import starts `ldconfig -p`.
    code = textwrap.dedent(
        """
        import subprocess
        started = []
        real = subprocess.Popen.__init__
        def note(self, args, *a, **k):
            started.append(args)
            real(self, args, *a, **k)
        subprocess.Popen.__init__ = note
        import trio
        print(started)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ldconfig" in out.stdout


def test_trios_import_still_looks_pthread_up_through_find_library():
    # The shim's target, watched: a trio that no longer asks makes the shim dead code; this names
    # what moved and where to look.
    code = textwrap.dedent(
        """
        import ctypes.util, json
        asked = []
        real = ctypes.util.find_library
        def note(name):
            asked.append(name)
            return real(name)
        ctypes.util.find_library = note
        import trio
        print(json.dumps({"asked": asked, "version": trio.__version__}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["asked"] == [_trio.LOOKED_UP], (
        f"trio {got['version']} (memfs/session/_trio.py was checked on {_trio.TRIO_VERSION_CHECKED}) "
        f"asks ctypes.util.find_library for {got['asked']} while it imports, not [{_trio.LOOKED_UP!r}]: "
        "re-read trio/_core/_thread_cache.py, then fix or remove the shim in memfs/session/_trio.py"
    )


def test_the_mount_forks_and_starts_its_early_download_before_the_heavy_imports():
    # Everything `memfs mount` runs before the daemon's fork, and the daemon before it forks its
    # early download (memfs/session/early_fetch.py), must leave trio, httpx and pyfuse3 for the
    # daemon to import while the helper streams: importing one of them first would serialise
    # the two halves of a mount's start again.
    code = textwrap.dedent(
        """
        import sys
        import memfs.cli, memfs.session.commands, memfs.session.early_fetch, memfs.session.preflight
        import memfs.client.snapshot_stream, memfs.client.work_secret, memfs.mount.state
        import memfs.client.egress, memfs.client.errors  # the client package's light modules
        parser = memfs.cli.build_parser()
        parser.parse_args(["mount", "--root", "/tmp/x"])
        from memfs.session.commands import _token
        _token()
        print(sorted(m for m in ("trio", "httpx", "httpcore", "pyfuse3", "anyio") if m in sys.modules))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_mount_handed_to_a_standby_imports_no_logging_before_it_hands_it_over():
    # `memfs mount` with a standby waiting (SEMANTICS.md#d-standby) runs its checks, takes the
    # token and hands the session over: every millisecond of that is on the path to the mount
    # being ready, so it leaves what only a daemon uses (logging, dataclasses: ~10 ms) to the
    # standby, which imported them at boot.
    code = textwrap.dedent(
        """
        import sys
        import memfs.cli
        parser = memfs.cli.build_parser("mount")
        parser.parse_args(["mount", "--root", "/tmp/x"])
        from memfs.session import commands, control, preflight, standby, store_mount
        from memfs.session.commands import _token
        _token()
        preflight.check_interval(60.0)
        print(sorted(m for m in ("logging", "dataclasses", "memfs.records") if m in sys.modules))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
