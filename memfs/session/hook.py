"""`memfs sync`: the hook a worker runs before every tool call (docs/SEMANTICS.md#d-commands, #d-when).

It runs as a process that often, so it imports as little as possible: the control module, which
speaks JSON and the socket through CPython's C modules (memfs/session/_cpython.py: no json, socket,
argparse, logging, typing, pathlib, httpx, trio: docs/SEMANTICS.md#d-commands says what it costs). A plain
`memfs sync [--root R] [--force] [--wait] [--json]` is parsed here by `sync_fast` without building
the whole command line's parser; anything else goes to argparse (memfs/session/commands.py), which
calls the same `cmd_sync`.
"""

import sys

from memfs.session import control

EXIT_NOT_ANSWERING = 4  # a daemon holds the socket but does not answer (stopped, wedged)
SYNC_TIMEOUT = 120.0  # a due tick's pull (and, with --wait, its uploads), once the daemon answered


def _fail(message: str, code: int = 1) -> int:
    print(f"memfs sync: error: {message}", file=sys.stderr)
    return code


def cmd_sync(args) -> int:
    """args: .root, .force, .wait, .json (an argparse Namespace or `_SyncArgs`)."""
    try:
        state_dir = control.state_dir_of(args.root)
    except control.RegistryRefused as exc:
        return _fail(str(exc))
    try:
        answer = control.call(
            state_dir, {"op": "sync", "force": args.force, "wait": args.wait}, timeout=SYNC_TIMEOUT
        )
    except control.DaemonNotAnswering as exc:
        return _fail(str(exc), EXIT_NOT_ANSWERING)
    except control.NoDaemon as exc:
        return _fail(f"no memfs mount at {args.root}: {exc}")
    except TimeoutError:
        return _fail(
            f"the memfs daemon for {args.root} is alive but its tick did not end within "
            f"{SYNC_TIMEOUT:g}s; see {state_dir}/memfs.log",
            EXIT_NOT_ANSWERING,
        )
    if args.json:
        import json

        print(json.dumps(answer, indent=2))
    elif answer.get("ran"):
        print(f"memfs sync: {answer.get('result', 'ok')}")
    elif answer.get("mode") == "live":  # the watch saw nothing move and nothing waits to be pushed
        print("memfs sync: nothing to do (live: the store has not changed)")
    else:
        print(f"memfs sync: not due (next in {answer.get('next_in', 0):.1f}s)")
    if not answer.get("ok", False):
        return _fail(str(answer.get("error")))
    return 0


class _SyncArgs:
    def __init__(self) -> None:
        self.root, self.force, self.wait, self.json = "/mnt/memory", False, False, False


def sync_fast(argv: list[str]) -> int | None:
    """Run `memfs sync ARGV` if ARGV is a plain invocation; None: anything else (--help, an
    abbreviation, a mistake), for the full parser to handle with its messages."""
    args = _SyncArgs()
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--force", "--wait", "--json"):
            setattr(args, a[2:], True)
        elif a == "--root" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            i += 1
            args.root = argv[i]
        elif a.startswith("--root=") and len(a) > 7:
            args.root = a[7:]
        else:
            return None
        i += 1
    return cmd_sync(args)


def run(argv: list[str]) -> None:
    """`memfs sync ARGV` as the whole process (bin/memfs, `memfs.cli.script`), ended with
    `os._exit` once its answer is flushed: it holds no file, thread or child to clean up, and the
    interpreter's orderly shutdown was ~5 ms of its ~20 ms budget (docs/SEMANTICS.md#d-commands).
    Returns only when `sync_fast` does not take the arguments (--help, a mistake): the caller then
    runs the full command line (this module never imports memfs.cli: no cycle)."""
    try:
        rc = sync_fast(argv)
        if rc is None:
            return
    except KeyboardInterrupt:
        rc = 130
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe: let the normal exit report it
        sys.exit(rc)
    import os

    os._exit(rc)
