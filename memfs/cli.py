"""`memfs` command line: one entry point, each command group registered by the module that owns it."""

from __future__ import annotations

import sys

from memfs import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse


# The command groups, each registered by the module that owns it, and the commands it adds. A
# command line naming one of these builds only its group's parser: `memfs mount` (on the
# mount-ready path) then imports none of the service's, the admin commands' or the worker's
# modules (~25 ms of its ~70 here). tests/rules/test_cli_help.py checks the table against the parsers.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("service", ("serve",)),
    ("admin", ("store", "session")),
    ("mount", ("mount", "sync", "status", "unmount", "flush")),
    ("worker", ("worker", "worker-launch")),
)


def _register(group: str, sub) -> None:
    """Each module adds its commands and sets `func` (args -> exit code) on its parsers."""
    if group == "service":
        from memfs.service import commands as service_commands

        service_commands.register(sub)
        from memfs.relay import commands as relay_commands  # `memfs serve --upstream`: the relay

        relay_commands.extend(sub.choices["serve"])
    elif group == "admin":
        from memfs.session import admin_commands  # `memfs store …`, `memfs session …`: the store client

        admin_commands.register(sub)
    elif group == "mount":
        from memfs.session import commands as mount_commands  # imports pyfuse3 lazily

        mount_commands.register(sub)
    elif group == "worker":
        from memfs.worker import command as worker_commands  # imports anthropic lazily (extra memfs[worker])

        worker_commands.register(sub)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every group's, or (`command` one of theirs) that group's only."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="memfs", description="Memory stores as a filesystem, and their store service."
    )
    parser.add_argument("--version", action="version", version=f"memfs {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    named = [group for group, commands in GROUPS if command in commands]
    for group in named or [group for group, _ in GROUPS]:
        _register(group, sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # A plain `memfs sync` never gets here: `script` (and bin/memfs) hand it to memfs.session.hook,
    # which sends here only what its own reading does not take (--help, a mistake).
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


def script() -> None:
    """The `memfs` command (bin/memfs) and `python -m memfs`: main(), then
    the process's end. `memfs sync`, the per-call hook, ends in `memfs.session.hook.run` (with
    os._exit once its answer is flushed) unless its arguments need the full command line (--help,
    a mistake: it returns); every other command exits normally."""
    if sys.argv[1:2] == ["sync"]:
        from memfs.session.hook import run

        run(sys.argv[2:])  # returns only for arguments the fast path does not take
    sys.exit(main())


if __name__ == "__main__":
    script()
