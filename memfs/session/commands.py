"""`memfs mount` and the command line of `memfs mount|sync|status|unmount|flush` (SEMANTICS.md#d-commands;
status, unmount and flush run in state_commands.py).

This module imports only what parsing and the control socket need at the top (no httpx, trio or
pyfuse3: ~0.3 s of imports; nor logging, which a mount handed to a standby never uses); every
command imports the rest when it runs. `memfs sync` itself lives in hook.py, which the command
line reaches without importing this module at all."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from memfs import limits
from memfs.private_files import open_private_append, private_dir
from memfs.protocol import DELETION_MODES, LOG_FORMATS, ON_CONFLICT_MODES
from memfs.session import control
from memfs.session.cli_support import ReadyLine, _fail, _float, _token, parse_size
from memfs.session.hook import EXIT_NOT_ANSWERING, cmd_sync
from memfs.session.state_commands import cmd_flush, cmd_status, cmd_unmount

TYPE_CHECKING = False  # typing itself costs the per-call hook ~5 ms of imports
if TYPE_CHECKING:
    import argparse
    from typing import Any, NoReturn

_MOUNTED_ROOT_HELP = "the root the stores were mounted at (default %(default)s)"
_LOG_FORMAT_HELP = "one line per event: text or json (default %(default)s)"
_FLUSH_TIMEOUT_HELP = "seconds the final upload of staged changes may take (default %(default)s)"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mount", help="mount the session's memory stores")
    p.add_argument(
        "--root",
        default="/mnt/memory",
        help="where the session's stores are mounted, one directory each (default %(default)s)",
    )
    p.add_argument(
        "--session-id",
        default=None,
        help="the session whose stores to mount (default: $ANTHROPIC_SESSION_ID)",
    )
    p.add_argument("--base-url", default=None, help="the store service's URL (default: $ANTHROPIC_BASE_URL)")
    p.add_argument(
        "--state-dir",
        default=None,
        help="where the mount keeps its tables, blobs and staged changes "
        "(default: /var/lib/memfs/<root>; ~/.local/state/memfs/<root> when not root)",
    )
    p.add_argument(
        "--sync-interval",
        type=_float,
        default=limits.DEFAULT_SYNC_INTERVAL,
        help="seconds between sync ticks with the store (at least 5; default %(default)s)",
    )
    p.add_argument(
        "--sync-deletions",
        choices=DELETION_MODES,
        default="enabled",
        help="what a file deleted here does on the store: enabled deletes the memory, log_only logs it, "
        "disabled never deletes (default %(default)s)",
    )
    p.add_argument(
        "--on-conflict",
        choices=ON_CONFLICT_MODES,
        default="merge",
        help="merge: a change made here and one made on the store meanwhile are merged "
        "line by line where they do not overlap; where they do, the store's version stays in the file "
        "and this sandbox's goes onto the store as a conflict copy beside it. store-wins: the store's "
        "version replaces the local change, which is kept in the state dir (default %(default)s; docs/SEMANTICS.md#d-merge)",
    )
    p.add_argument(
        "--live",
        choices=["auto", "off"],
        default="auto",
        help="auto: hold a watch when the service has one (changes in about a second); "
        "off: only poll every --sync-interval (default %(default)s)",
    )
    p.add_argument(
        "--idle-poll-interval",
        type=_float,
        default=limits.IDLE_POLL_INTERVAL,
        help="without a counter (the hosted API): seconds between polls while nobody uses the mount "
        "(default %(default)s)",
    )
    p.add_argument(
        "--safety-net-interval",
        type=_float,
        default=limits.SAFETY_NET_INTERVAL,
        help="without a counter (the hosted API): seconds between wide reads of one store's version "
        "feed (the last hour), round robin (default %(default)s)",
    )
    p.add_argument(
        "--full-listing-interval",
        type=_float,
        default=limits.FULL_LISTING_INTERVAL,
        help="without a counter (the hosted API): seconds between full listings of one store, round robin "
        "(default %(default)s)",
    )
    p.add_argument(
        "--max-files",
        type=int,
        default=limits.DEFAULT_MAX_FILES,
        help="files one mounted store may hold; past it a create is ENOSPC and the store's further "
        "memories are not materialised (default %(default)s)",
    )
    p.add_argument(
        "--max-bytes",
        type=parse_size,
        default=limits.DEFAULT_MAX_BYTES,
        help="bytes one mounted store may hold, as 2000000, 512KiB or 32MiB; past it a write is ENOSPC "
        "(default %(default)s)",
    )
    p.add_argument(
        "--uid", type=int, default=None, help="owner of every file (default: the mounting user's uid)"
    )
    p.add_argument(
        "--gid", type=int, default=None, help="group of every file (default: the mounting user's gid)"
    )
    p.add_argument(
        "--allow-other",
        action="store_true",
        help="let other users enter the mount, the files' modes permitting (default: only the mounting user)",
    )
    p.add_argument("--log-format", choices=LOG_FORMATS, default="text", help=_LOG_FORMAT_HELP)
    p.add_argument("--flush-timeout", type=_float, default=limits.FLUSH_TIMEOUT, help=_FLUSH_TIMEOUT_HELP)
    p.add_argument(
        "--foreground",
        action="store_true",
        help="stay in the foreground and serve the mount until it is unmounted "
        "(default: return once every store is readable, the daemon in the background)",
    )
    from memfs.session import store_mount  # light: argparse only at the top

    store_mount.add_arguments(p)  # `--store`: one store at a path, no session (SEMANTICS.md#d-store-mount)
    p.add_argument(
        "--prestart",
        action="store_true",
        help="start a standby daemon for --root before the session is known (at sandbox boot) and "
        "return: it imports everything a mount needs and waits; a later `memfs mount --root` with the "
        "session hands it over (docs/SEMANTICS.md#d-standby). Only --root and --standby-timeout apply",
    )
    p.add_argument(
        "--standby-timeout",
        type=_float,
        default=3600.0,
        help="with --prestart: seconds the standby waits for its session before it exits (default %(default)s)",
    )
    p.set_defaults(func=cmd_mount)

    p = sub.add_parser("sync", help="run a sync tick now if one is due")
    p.add_argument("--root", default="/mnt/memory", help=_MOUNTED_ROOT_HELP)
    p.add_argument("--force", action="store_true", help="run a tick even if the interval has not passed")
    p.add_argument("--wait", action="store_true", help="also wait until the tick's uploads are done")
    p.add_argument("--json", action="store_true", help="print the tick's outcome as JSON (default: text)")
    p.set_defaults(func=cmd_sync)

    p = sub.add_parser("status", help="show the state of each mounted store")
    p.add_argument("--root", default="/mnt/memory", help=_MOUNTED_ROOT_HELP)
    p.add_argument("--json", action="store_true", help="print the state as JSON (default: text)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("unmount", help="final sync, then unmount")
    p.add_argument("--root", default="/mnt/memory", help=_MOUNTED_ROOT_HELP)
    p.add_argument("--flush-timeout", type=_float, default=limits.FLUSH_TIMEOUT, help=_FLUSH_TIMEOUT_HELP)
    p.set_defaults(func=cmd_unmount)

    p = sub.add_parser("flush", help="upload staged changes left in a state dir")
    p.add_argument("--state-dir", required=True, help="the state dir an earlier mount left (required)")
    p.add_argument(
        "--base-url", default=None, help="the store service's URL (default: the one the mount used)"
    )
    p.add_argument("--flush-timeout", type=_float, default=limits.FLUSH_TIMEOUT, help=_FLUSH_TIMEOUT_HELP)
    p.add_argument(
        "--sync-deletions",
        choices=DELETION_MODES,
        default=None,
        help="as memfs mount's (default: the one the mount used)",
    )
    p.add_argument("--log-format", choices=LOG_FORMATS, default="text", help=_LOG_FORMAT_HELP)
    p.add_argument(
        "--api-key-file",
        default=None,
        help="a store mounted with --store: the API key's file (default: $ANTHROPIC_API_KEY)",
    )
    p.set_defaults(func=cmd_flush)


# -- mount --------------------------------------------------------------------------------------
def cmd_mount(args: argparse.Namespace) -> int:
    # Only the light checks before the fork: the daemon imports trio, httpx and pyfuse3 itself,
    # while its early download runs (early_fetch.py); this process only waits for its answer.
    from memfs.session import store_mount
    from memfs.session.preflight import MountError, check_interval

    if args.prestart:
        return _prestart(args)
    if args.store:
        return store_mount.cmd_mount_store(args)
    problem = store_mount.without_store_problem(args)
    if problem:
        return _fail("mount", problem, 2)
    session_id = args.session_id or os.environ.get("ANTHROPIC_SESSION_ID")
    base_url = args.base_url or os.environ.get("ANTHROPIC_BASE_URL")
    if not session_id:
        return _fail("mount", "no session: pass --session-id or set ANTHROPIC_SESSION_ID", 2)
    if not base_url:
        return _fail("mount", "no store service: pass --base-url or set ANTHROPIC_BASE_URL", 2)
    try:
        check_interval(args.sync_interval)
    except MountError as exc:
        return _fail("mount", str(exc), 2)
    if args.max_files < 1 or args.max_bytes < 1:
        return _fail("mount", "--max-files and --max-bytes must be positive", 2)
    root = os.path.abspath(args.root)
    try:  # the registry `memfs sync|status|unmount` find this mount by: refused if not trustworthy
        control.checked_runtime_dir(create=True)
    except (control.RegistryRefused, OSError) as exc:
        return _fail("mount", str(exc))
    problem = _live_mount_problem(root)
    if problem:
        return _fail("mount", problem, EXIT_NOT_ANSWERING if "does not answer" in problem else 1)
    state_dir = Path(args.state_dir).resolve() if args.state_dir else control.default_state_dir(root)
    args.token = _token()  # before the fork: taken out of the environment (secret_env.py)
    if not args.foreground:
        problem = _made_state_dir(state_dir)
        if problem:
            return _fail("mount", problem)
        handed = _hand_to_standby(args, root, state_dir, session_id, base_url)
        if handed is not None:
            return handed
        return _spawn_daemon(args, root, state_dir, session_id, base_url)
    return _run_foreground(args, root, state_dir, session_id, base_url)


def _live_mount_problem(root: str) -> str | None:
    """Why root cannot be mounted when a memfs daemon still serves it, found without touching
    the root (the preflight stats it, which hangs for ever on a stopped daemon's mount)."""
    from memfs.mount.mount_table import fuse_mount_at

    entry = control.registry_entry(root)
    if (
        fuse_mount_at(
            entry["root"] if entry and entry.get("root") else control.registry_key(root), resolve=False
        )
        is None
    ):
        return None  # nothing mounted there (a symlinked root is checked again by the preflight)
    state_dir = Path(entry["state_dir"]) if entry else control.lookup_state_dir(root)
    try:
        answer = control.call(state_dir, {"op": "ping"}, timeout=control.PING_TIMEOUT)
    except control.DaemonNotAnswering as exc:
        return str(exc)
    except (control.NoDaemon, TimeoutError, OSError):
        return None  # a dead mount: the preflight clears it
    return (
        f"{root} is already a mounted memfs filesystem (pid {answer.get('pid', '?')}); "
        f"run `memfs unmount --root {root}` first"
    )


def _made_state_dir(state_dir: Path) -> str | None:
    """Create the state dir, private: every store's content lands there (memfs/private_files.py)."""
    try:
        private_dir(state_dir)
    except OSError as exc:
        return f"cannot create the state dir {state_dir}: {exc.strerror}; choose a writable --state-dir"
    return None


def _spawn_daemon(
    args: argparse.Namespace, root: str, state_dir: Path, session_id: str, base_url: str, run: Any = None
) -> int:
    """Start the daemon detached and return once it reports every store readable (or fails).

    The daemon is this process, forked (nothing has started a thread yet) right after the
    arguments are checked: no second interpreter to start, and the heavy imports (~0.4 s) run in
    the daemon, beside its early download (early_fetch.py), not before the fork."""
    problem = _made_state_dir(state_dir)  # (memfs mount --store comes here directly)
    if problem:
        return _fail("mount", problem)
    log_path = state_dir / "memfs.log"
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os._exit(_daemon_child(args, root, state_dir, session_id, base_url, log_path, read_fd, write_fd, run))
    os.close(write_fd)
    with os.fdopen(read_fd, "r") as pipe:
        report = pipe.read()
    if report.startswith("ready"):
        print(report[len("ready") :].strip() or f"memfs: mounted at {root}")
        _exit_now(0)
    _, status = os.waitpid(pid, 0)
    message = (
        report.strip() or f"the daemon exited with status {os.waitstatus_to_exitcode(status)}; see {log_path}"
    )
    return _fail("mount", message.removeprefix("error: "))


def _hand_to_standby(
    args: argparse.Namespace, root: str, state_dir: Path, session_id: str, base_url: str
) -> int | None:
    """Hand the mount to a standby daemon of root (`memfs mount --prestart`, standby.py) and
    return once it reports every store readable (or fails); None when no standby took it."""
    from memfs import secret_env
    from memfs.session import standby

    if not standby.waiting(root):
        return None
    umask = os.umask(0o077)
    os.umask(umask)
    request = {
        "root": root,
        "state_dir": str(state_dir),
        "session_id": session_id,
        "base_url": base_url,
        "token": args.token,  # on the owner-only socket only: never on a command line
        "args": {k: v for k, v in vars(args).items() if k not in ("func", "token")},
        # The daemon runs with the environment of the mount (proxies, MEMFS_* settings), not the
        # one the standby was started with; credentials were taken out of it (_token()).
        "env": {k: v for k, v in os.environ.items() if k not in secret_env.SECRET_NAMES},
        "umask": umask,
    }
    sock = standby.hand_over(root, request)
    if sock is None:
        return None
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except OSError:
        pass
    finally:
        sock.close()
    report = b"".join(chunks).decode("utf-8", "replace")
    if report.startswith("ready"):
        print(report[len("ready") :].strip() or f"memfs: mounted at {root}")
        _exit_now(0)
    message = (
        report.strip()
        or f"the standby daemon ended before the mount was ready; see {state_dir / 'memfs.log'}"
    )
    return _fail("mount", message.removeprefix("error: "))


def _prestart(args: argparse.Namespace) -> int:
    """`memfs mount --prestart`: bind the standby socket of root, fork the standby, return."""
    from memfs.session import standby

    root = os.path.abspath(args.root)
    if not args.standby_timeout > 0:
        return _fail("mount", "--standby-timeout must be positive", 2)
    try:
        control.checked_runtime_dir(create=True)
    except (control.RegistryRefused, OSError) as exc:
        return _fail("mount", str(exc))
    problem = _live_mount_problem(root)
    if problem:
        return _fail("mount", problem, EXIT_NOT_ANSWERING if "does not answer" in problem else 1)
    try:
        listener = standby.listen(root)
    except (standby.StandbyError, control.RegistryRefused, OSError) as exc:
        return _fail("mount", str(exc))
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os._exit(_standby_child(root, listener, args.standby_timeout))
    listener.close()  # the socket stays bound: the standby holds it
    print(
        f"memfs: standby daemon (pid {pid}) waits for a session at {root} (at most {args.standby_timeout:g}s)"
    )
    return 0


def _standby_child(root: str, listener, timeout: float) -> int:
    """The standby: detached like a daemon, its imports done, then the session's mount."""
    import argparse

    from memfs import secret_env
    from memfs.session import standby

    rc = 1
    try:
        _detach(listener.fileno(), None)
        # It will hold a token: closed to same-uid readers from the start. A credential in the
        # boot environment is not its own (the mount hands over its token): wiped.
        secret_env.make_non_dumpable()
        secret_env.take()

        def stop(_signum: int, _frame: object) -> None:
            raise SystemExit(0)  # its socket is removed on the way out (standby.serve)

        signal.signal(signal.SIGTERM, stop)
        handed = standby.serve(listener, root, timeout)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if handed is None:
            return 0
        os.environ.clear()
        os.environ.update(handed.env)
        os.umask(handed.umask)
        state_dir = Path(handed.state_dir)
        logf = open_private_append(state_dir / "memfs.log")
        os.dup2(logf, 1)
        os.dup2(logf, 2)
        os.close(logf)
        args = argparse.Namespace(**handed.args)
        args.token = handed.token
        ready_fd = handed.conn.detach()
        rc = _run_foreground(
            args, handed.root, state_dir, handed.session_id, handed.base_url, ready_fd=ready_fd
        )
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return rc


def _exit_now(code: int) -> NoReturn:
    """End the CLI process once the mount is ready, without the interpreter's shutdown.

    The CLI has imported everything the daemon needs (it forks into the daemon), and tearing
    those modules down took 50-70 ms of every `memfs mount` here, after its answer was printed.
    Nothing is left to finalise in this process: no thread, no log handler (the daemon logs),
    only stdout and stderr, flushed here. A failed flush exits 120, as Python's own exit does."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        code = 120
    os._exit(code)


def _daemon_child(args, root: str, state_dir: Path, session_id: str, base_url: str, log_path: Path,
                  read_fd: int, write_fd: int, run: Any = None) -> int:  # fmt: skip
    """The forked daemon: its own process group, stdin from /dev/null, stdout/stderr to the log."""
    rc = 1
    try:
        os.close(read_fd)
        _detach(write_fd, log_path)
        rc = (run or _run_foreground)(args, root, state_dir, session_id, base_url, ready_fd=write_fd)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return rc


def _detach(keep_fd: int, log_path: Path | None) -> None:
    """Make this forked process a daemon: its own process group, no descriptor of the caller's
    but `keep_fd`, stdin from /dev/null, stdout/stderr to the log (/dev/null without one)."""
    # A process group of its own (no ^C or job-control signal of the caller's shell reaches
    # it), but not a session of its own: with the scheduler's autogroups (one per session,
    # CONFIG_SCHED_AUTOGROUP) a daemon in a new session competes as a group of its own against
    # the session whose tools it serves, and every FUSE request it answers waits for the CPU
    # once more on a busy machine (a warm `grep -r` 1.3 s instead of 0.9 s under load:
    # docs/PERFORMANCE.md "Reads"). A hang-up of the caller's terminal signals its foreground
    # group, not this one; SIGHUP is ignored all the same.
    os.setpgid(0, 0)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # Holds no directory of the caller's (the agent's working directory, often) for hours.
    os.chdir("/")
    # Like Popen(close_fds=True): descriptors the caller's shell passed down (pipes of a
    # command substitution, say) must not be held open by a daemon that runs for hours.
    os.closerange(3, keep_fd)
    os.closerange(keep_fd + 1, 1 << 16)
    null = os.open(os.devnull, os.O_RDONLY)
    logf = open_private_append(log_path) if log_path is not None else os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 0)
    os.dup2(logf, 1)
    os.dup2(logf, 2)
    os.close(null)
    os.close(logf)


def _run_foreground(
    args, root: str, state_dir: Path, session_id: str, base_url: str, *, ready_fd: int | None = None
) -> int:
    """Run the daemon in this process. `ready_fd`: a pipe to report "ready …" or "error: …" on
    (the forked daemon's parent waits on it); without it the mount line goes to stdout."""
    from memfs.session import early_fetch
    from memfs.session._trio import import_trio_without_ldconfig
    from memfs.session.preflight import REQUEST_TIMEOUT

    token = args.token
    # First, before the imports below: the helper that reads the session and streams the
    # snapshots into the state dir while this process imports (None: it does not apply).
    early = early_fetch.begin(root, state_dir, session_id, base_url, token, timeout=REQUEST_TIMEOUT)
    import_trio_without_ldconfig()
    import trio

    from memfs.logging_setup import setup_logging
    from memfs.session.daemon import Daemon, MountError, MountOptions

    setup_logging(args.log_format)
    report = ReadyLine(ready_fd)

    opts = MountOptions.from_flags(
        args, root=root, session_id=session_id, base_url=base_url, token=token, state_dir=state_dir
    )

    def on_ready(stores) -> None:
        lines = [f"memfs: mounted {len(stores)} store(s) at {root} (state dir {state_dir})"]
        lines += [f"  {os.path.join(root, s.slug)}  {s.access}  {s.store_id}" for s in stores]
        text = "\n".join(lines)
        if report.pending:
            report("ready " + text + "\n")
        else:
            print(text, flush=True)

    daemon = Daemon(opts, early)
    try:
        return trio.run(daemon.run, on_ready)
    except MountError as exc:
        import logging

        logging.getLogger("memfs").error("%s", exc)
        report(f"error: {exc}\n")
        if ready_fd is None:
            print(f"memfs mount: error: {exc}", file=sys.stderr)
        return 1
    except BaseException as exc:
        report(f"error: {type(exc).__name__}: {exc}\n")
        raise


# -- sync / status / unmount ---------------------------------------------------------------------
# None of these touches the mount path before the daemon has answered (control.py): a stopped
# daemon would hang that call for ever.
