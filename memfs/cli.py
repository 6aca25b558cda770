"""`memfs` command line: one entry point, each command group registered by the module that owns it."""

from __future__ import annotations

import sys

from memfs import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse


def build_parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog="memfs", description="Memory stores as a filesystem, and their store service."
    )
    parser.add_argument("--version", action="version", version=f"memfs {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Each module adds its commands and sets `func` (args -> exit code) on its parsers.
    from memfs.service import commands as service_commands

    service_commands.register(sub)
    from memfs.relay import commands as relay_commands  # `memfs serve --upstream`: the relay

    relay_commands.extend(sub.choices["serve"])
    from memfs.session import admin_commands  # `memfs store …`, `memfs session …`: the store client

    admin_commands.register(sub)
    from memfs.session import commands as mount_commands  # imports pyfuse3 lazily

    mount_commands.register(sub)
    from memfs.worker import command as worker_commands  # imports anthropic lazily (extra memfs[worker])

    worker_commands.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # A plain `memfs sync` never gets here: `script` (and bin/memfs) hand it to memfs.session.hook,
    # which sends here only what its own reading does not take (--help, a mistake).
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
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
