"""`memfs worker-launch -- node worker.js`: start a worker that cannot protect its own secret.

The TypeScript worker (workers/typescript, docs/OPERATIONS.md 7.3) runs in node, which has no
prctl: started directly with ANTHROPIC_WORK_SECRET in its environment it stays dumpable, and the
agent's bash (its child, same uid) reads the secret from /proc/<node>/environ or /proc/<node>/mem.
This launcher, which `ant beta:worker poll --on-work` runs instead:
1. makes itself non-dumpable and takes the credentials out of its environment (secret_env.take);
2. starts the program without them, non-dumpable from its first instruction
   (non_dumpable_child.spawn), and writes the credentials as JSON on a pipe whose read end it gets
   as MEMFS_SECRETS_FD, with the pid and executable it made non-dumpable: `takeSecrets()` of
   @memfs/worker reads and closes it, and refuses them in another process or executable (a script
   whose interpreter, or a wrapper that, exec'd node: dumpable again);
3. forwards SIGTERM, SIGINT and SIGHUP to it and exits with its status (128+N for a signal).
Where the program cannot be made non-dumpable it is not started (exit 70) unless
--allow-dumpable says the agent runs as another user (then a dumpable worker is out of its reach).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys

from memfs import secret_env
from memfs.worker import non_dumpable_child

SECRETS_FD_ENV = "MEMFS_SECRETS_FD"
LAUNCH_SECRET_NAMES = (*secret_env.SECRET_NAMES, "ANTHROPIC_AUTH_TOKEN")
PIPE_CAPACITY = 65536  # written before the child starts: more would block until it reads
EX_SOFTWARE = 70
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "worker-launch",
        help="run a worker program (the TypeScript worker) non-dumpable, its credentials on a pipe",
    )
    p.add_argument(
        "--allow-dumpable",
        action="store_true",
        help="start the program even where it cannot be made non-dumpable (only when the agent runs as another user)",
    )
    p.add_argument("program", nargs=argparse.REMAINDER, help="the program and its arguments (after --)")
    p.set_defaults(func=cmd_worker_launch)


def _say(message: str) -> None:
    print(f"memfs worker-launch: {message}", file=sys.stderr, flush=True)


def cmd_worker_launch(args: argparse.Namespace) -> int:
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        _say("no program given: memfs worker-launch -- node worker.js")
        return 2
    secret_env.make_non_dumpable()  # it holds the secrets until the child has them
    secrets = secret_env.take(LAUNCH_SECRET_NAMES)
    if len(json.dumps(secrets)) >= PIPE_CAPACITY - 4096:
        _say("the credentials take more than a pipe holds")
        return 2
    read_fd, write_fd = os.pipe()  # both close-on-exec; the child gets the read end by pass_fds
    env = {**os.environ, SECRETS_FD_ENV: str(read_fd)}
    try:
        proc, exe = _start(program, env, read_fd, args.allow_dumpable)
    except _NotStarted as exc:
        os.close(write_fd)
        _say(exc.message)
        return exc.code
    finally:
        os.close(read_fd)
    for signum in FORWARDED:
        signal.signal(signum, lambda n, _f: _forward(proc, n))
    handed = {"secrets": secrets, "pid": proc.pid, "exe": exe, "non_dumpable": exe is not None}
    try:
        os.write(write_fd, json.dumps(handed).encode())
    except BrokenPipeError:
        pass  # the program closed it (or ended) without reading
    finally:
        os.close(write_fd)
    code = proc.wait()
    return 128 - code if code < 0 else code


class _NotStarted(Exception):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.message, self.code = message, code


def _start(
    program: list[str], env: dict[str, str], read_fd: int, allow_dumpable: bool
) -> tuple[subprocess.Popen, str | None]:
    """The program started, and the executable it was made non-dumpable as (None: it was not)."""
    try:
        try:
            return non_dumpable_child.spawn(program, env=env, pass_fds=(read_fd,))
        except non_dumpable_child.NotMadeNonDumpable as exc:
            if not allow_dumpable:
                raise _NotStarted(
                    f"{program[0]} cannot be made non-dumpable: {exc}; not started (the agent's processes "
                    "could read its credentials). Run the agent as another user and pass --allow-dumpable",
                    EX_SOFTWARE,
                ) from exc
            _say(f"{program[0]} runs dumpable: {exc} (--allow-dumpable)")
            return subprocess.Popen(program, env=env, pass_fds=(read_fd,)), None
    except OSError as exc:
        raise _NotStarted(f"cannot start {program[0]}: {exc}", 127) from exc


def _forward(proc: subprocess.Popen, signum: int) -> None:
    try:
        proc.send_signal(signum)
    except ProcessLookupError:
        pass
