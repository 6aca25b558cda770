"""The command line explains itself: every argument of every `memfs` command, subcommands of
subcommands included, has help text, and a flag with a default value shows that value through
argparse's `%(default)s`, so the help cannot drift from the code. Built from `memfs.cli.build_parser()`
without running any command (the parser imports no trio, pyfuse3 or anthropic)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from memfs.cli import GROUPS, build_parser

pytestmark = pytest.mark.timeout(60)

# defaults that mean "not given": the help says what happens then in words, if anything happens
_NO_DEFAULT = (None, False, [], argparse.SUPPRESS)


def _commands(parser: argparse.ArgumentParser, path: str = "memfs"):
    """(`memfs serve`, its parser), ... for every command and subcommand, depth first."""
    yield path, parser
    for action in parser._actions:  # argparse offers no public walk over its subparsers
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{path} {name}")


def _arguments(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            continue
        yield "/".join(action.option_strings) or action.dest, action


def test_every_argument_of_every_command_says_what_it_does():
    silent = [
        f"{command} {name}"
        for command, parser in _commands(build_parser())
        for name, action in _arguments(parser)
        if not action.help or action.help == argparse.SUPPRESS
    ]
    assert not silent, "arguments without help=: " + ", ".join(silent)
    only_default = [
        f"{command} {name}"
        for command, parser in _commands(build_parser())
        for name, action in _arguments(parser)
        if (action.help or "").lower().startswith("default")
    ]
    assert not only_default, "help that gives only the default, not what the flag does: " + ", ".join(
        only_default
    )


def test_every_flag_with_a_default_shows_it():
    hidden = [
        f"{command} {name} (default {action.default!r})"
        for command, parser in _commands(build_parser())
        for name, action in _arguments(parser)
        if action.option_strings
        and not any(action.default is d or action.default == d for d in _NO_DEFAULT)
        and "%(default)" not in (action.help or "")
    ]
    assert not hidden, "flags whose help does not show their default with %(default)s: " + ", ".join(hidden)


def test_every_help_text_renders():
    """A `%` that is not a format (or a misspelt `%(default)s`) breaks --help only when it is asked for."""
    for command, parser in _commands(build_parser()):
        assert parser.format_help(), command


def test_the_walk_reaches_the_nested_commands():
    """The walk above checks what it reaches: it must reach the subcommands of subcommands."""
    names = {command for command, _ in _commands(build_parser())}
    assert {"memfs serve", "memfs mount", "memfs store create", "memfs session create"} <= names


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_each_commands_own_parser_is_the_whole_command_lines():
    # `memfs mount` builds its group's parser only (memfs.cli.GROUPS): the table must name every
    # command, and each command's parser built alone must be the one the whole command line has.
    whole = _choices(build_parser())
    assert sorted(whole) == sorted(c for _, commands in GROUPS for c in commands)
    for command, parser in whole.items():
        alone = _choices(build_parser(command))
        assert command in alone and len(alone) < len(whole), command
        assert alone[command].format_help() == parser.format_help(), command


def test_memfs_mount_imports_no_other_groups_modules():
    code = (
        "import sys, memfs.cli; memfs.cli.build_parser('mount'); "
        "print(sorted(m for m in ('memfs.service.commands', 'memfs.session.admin_commands', "
        "'memfs.worker.command', 'memfs.relay.commands') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.strip() == "[]", out.stdout
