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
    from memfs.session import commands as mount_commands  # imports pyfuse3 lazily

    mount_commands.register(sub)
    from memfs.worker import command as worker_commands  # imports anthropic lazily (extra memfs[worker])

    worker_commands.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sync"]:  # the per-call hook: no parser for the other twelve commands
        from memfs.session.hook import sync_fast

        try:
            rc = sync_fast(argv[1:])
        except KeyboardInterrupt:
            return 130
        if rc is not None:
            return rc
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


def script() -> None:
    """The `memfs` command (bin/memfs) and `python -m memfs`: main(), then the process's end.

    `memfs sync`, the per-call hook, ends with os._exit once its answer is flushed: it holds no
    file, thread or child to clean up, and the interpreter's orderly shutdown was ~5 ms of its
    ~20 ms budget (docs/SEMANTICS.md#d-commands). Every other command exits normally."""
    rc = main()
    if sys.argv[1:2] == ["sync"]:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:  # a closed pipe: let the normal exit report it
            sys.exit(rc)
        import os

        os._exit(rc)
    sys.exit(rc)


if __name__ == "__main__":
    script()
