"""`memfs worker`: the official `EnvironmentWorker.handle_item()` for one work item, memory by memfs.

It reads what `ant beta:worker poll --on-work` hands a work item's process (ANTHROPIC_WORK_ID,
ANTHROPIC_ENVIRONMENT_ID, ANTHROPIC_SESSION_ID, ANTHROPIC_WORK_SECRET, ANTHROPIC_BASE_URL,
ANTHROPIC_ENVIRONMENT_KEY), makes itself non-dumpable (so the agent's `bash`, a child with the same
uid, cannot read the secret from /proc/<worker>/environ), and runs the item with `memfs_tools()`.
SIGTERM and SIGINT cancel the item cleanly: the runner closes the tools (the final sync runs), the
worker stops the item, the command exits 0. The SDK installs no signal handlers of its own.

With `--mount` it also mounts the session's stores first (from the store service at `--store-url`,
default ANTHROPIC_BASE_URL: the memory store service may be another host than the platform) and
unmounts them at the end; without it the stores must already be mounted at `--root`.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import signal
import subprocess
import sys

from memfs import secret_env
from memfs.logging_setup import setup_logging
from memfs.secret_env import make_non_dumpable

log = logging.getLogger("memfs.worker")

ITEM_VARS = ("ANTHROPIC_WORK_ID", "ANTHROPIC_ENVIRONMENT_ID", "ANTHROPIC_SESSION_ID")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="run the official EnvironmentWorker for one work item, memory by memfs")
    p.add_argument(
        "--root",
        default="/mnt/memory",
        help="where the session's stores are (or get) mounted (default %(default)s)",
    )
    p.add_argument("--workdir", default=None, help="the agent's working directory (default: the current one)")
    p.add_argument(
        "--mount", action="store_true", help="mount the session's stores first, unmount them at the end"
    )
    p.add_argument(
        "--store-url",
        default=None,
        help="the memory store service, for --mount (default: $MEMFS_STORE_URL, else $ANTHROPIC_BASE_URL)",
    )
    p.add_argument("--state-dir", default=None, help="for --mount: the mount's state dir")
    p.add_argument("--sync-interval", default=None, help="for --mount: the mount's sync interval")
    p.add_argument(
        "--max-idle",
        type=float,
        default=None,
        help="seconds to keep serving after the session's turn ended (the SDK's default: 60)",
    )
    p.add_argument(
        "--max-concurrent-calls",
        type=_calls,
        default=None,
        metavar="N|none",
        help="calls of different session threads run at once (anthropic >= 2.16; the SDK's default: 1; "
        "`none`: no limit). Each call's pre-call sync waits its turn on the daemon link",
    )
    p.add_argument(
        "--force-stop",
        action="store_true",
        help="only force-stop the work item and exit (a sandbox whose mount failed)",
    )
    p.set_defaults(func=cmd_worker)
    from memfs.worker import launch  # `memfs worker-launch`: the TypeScript worker's protection

    launch.register(sub)


def _calls(value: str) -> int | str:
    if value == "none":
        return value
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("at least 1, or none")
    return n


def cmd_worker(args: argparse.Namespace) -> int:
    setup_logging()
    try:
        from memfs.worker import _sdk  # noqa: F401 (every name memfs takes from anthropic)
    except ImportError:
        print("memfs worker needs the worker extra: pip install 'memfs[worker]'", file=sys.stderr)
        return 2
    missing = [v for v in ITEM_VARS if not os.environ.get(v)]
    if missing:
        print(
            f"memfs worker: {', '.join(missing)} not set (the work item's process gets them from "
            "`ant beta:worker poll --on-work`)",
            file=sys.stderr,
        )
        return 2
    if not os.environ.get("ANTHROPIC_WORK_SECRET") and not os.environ.get("ANTHROPIC_ENVIRONMENT_KEY"):
        print(
            "memfs worker: neither ANTHROPIC_WORK_SECRET nor ANTHROPIC_ENVIRONMENT_KEY is set",
            file=sys.stderr,
        )
        return 2
    if not make_non_dumpable():
        log.warning("could not make the worker non-dumpable: same-uid processes may read its environment")
    # Out of the environment once read (the block /proc/<pid>/environ shows is overwritten): the
    # SDK gets them as arguments, a child only what it needs (secret_env.child_env).
    args.secrets = secret_env.take()
    if args.force_stop:
        return 0 if _force_stop_item(args.secrets) else 1
    if args.mount:
        code = _mount(args)
        if code != 0:
            _force_stop_item(args.secrets)
            return code
    try:
        import anyio

        return anyio.run(_run_item, args)
    finally:
        if args.mount:
            _unmount(args)


async def _run_item(args: argparse.Namespace) -> int:
    import anyio

    from memfs.worker import memfs_tools
    from memfs.worker._sdk import AsyncAnthropic, EnvironmentWorker

    kwargs: dict = {} if args.max_idle is None else {"max_idle": args.max_idle}
    if args.max_concurrent_calls is not None:
        if "max_concurrent_calls" not in inspect.signature(EnvironmentWorker).parameters:
            log.error("--max-concurrent-calls needs anthropic >= 2.16 (pip install -U 'memfs[worker]')")
            return 2
        calls = args.max_concurrent_calls
        kwargs["max_concurrent_calls"] = None if calls == "none" else calls
    # No api key: every request of the item carries the work secret's sessions token (or the
    # environment key), which the worker's own sub-clients set.
    client = AsyncAnthropic(api_key="unused", base_url=os.environ.get("ANTHROPIC_BASE_URL"))
    from memfs.worker import lease

    lease.watch(client)  # before the first heartbeat, so a lease lost early is seen too
    worker = EnvironmentWorker(
        client,
        memory_sync_interval=None,
        tools=memfs_tools(root=args.root),
        workdir=args.workdir or os.getcwd(),
        **kwargs,
    )
    stopped_by: list[str] = []
    async with anyio.create_task_group() as tg:

        async def on_signals() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    stopped_by.append(signal.Signals(signum).name)
                    log.info("%s: cancelling the work item (final sync, then stop)", stopped_by[-1])
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(on_signals)
        try:
            await worker.handle_item(
                work_secret=args.secrets.get("ANTHROPIC_WORK_SECRET"),
                environment_key=args.secrets.get("ANTHROPIC_ENVIRONMENT_KEY"),
            )
        except Exception as exc:  # noqa: BLE001 - reported, and the exit status says so
            log.error("the work item failed: %s", _causes(exc))
            tg.cancel_scope.cancel()
            return 1
        tg.cancel_scope.cancel()
    await client.close()
    if stopped_by:
        log.info("work item cancelled by %s and stopped cleanly", stopped_by[0])
    return 0


def _causes(exc: BaseException) -> str:
    inner = getattr(exc, "exceptions", None)
    return "; ".join(_causes(e) for e in inner) if inner else f"{type(exc).__name__}: {exc}"


def _memfs(*argv: str, token: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`memfs ARGV` as a child that can run nothing of the agent's and holds no secret of ours.

    `-I`: no current directory (the agent's, often) on sys.path, no PYTHON* variable, no user
    site: a `memfs/` or `trio.py` the agent wrote is never imported. cwd `/`: the mount daemon
    this forks holds no directory of the agent's. The environment is secret_env.child_env()
    (no credential); the token, when the child needs one, comes on a pipe (MEMFS_TOKEN_FD)."""
    env = secret_env.child_env()
    fds: tuple[int, ...] = ()
    if token:
        read_fd, write_fd = os.pipe()
        os.write(write_fd, token.encode())  # a few hundred bytes: well under the pipe's buffer
        os.close(write_fd)
        env[secret_env.TOKEN_FD_ENV] = str(read_fd)
        fds = (read_fd,)
    try:
        return subprocess.run(
            [sys.executable, "-I", "-m", "memfs", *argv],
            env=env,
            cwd="/",
            pass_fds=fds,
            timeout=timeout,
            stdout=sys.stderr,
            stderr=sys.stderr,
        )
    finally:
        for fd in fds:
            os.close(fd)


def _mount(args: argparse.Namespace) -> int:
    store_url = args.store_url or os.environ.get("MEMFS_STORE_URL") or os.environ.get("ANTHROPIC_BASE_URL")
    argv = ["mount", "--root", args.root, "--session-id", os.environ["ANTHROPIC_SESSION_ID"]]
    if store_url:
        argv += ["--base-url", store_url]
    if args.state_dir:
        argv += ["--state-dir", args.state_dir]
    if args.sync_interval:
        argv += ["--sync-interval", str(args.sync_interval)]
    from memfs.client.work_secret import sessions_token_from_secret

    token = sessions_token_from_secret(args.secrets.get("ANTHROPIC_WORK_SECRET")) or args.secrets.get(
        "MEMFS_TOKEN"
    )
    try:
        proc = _memfs(*argv, token=token)
    except subprocess.TimeoutExpired:
        log.error("memfs mount did not finish in time")
        return 3
    if proc.returncode != 0:
        log.error(
            "memfs mount failed (exit %d): the work item is stopped rather than run without its memory",
            proc.returncode,
        )
    return proc.returncode


def _unmount(args: argparse.Namespace) -> None:
    try:
        proc = _memfs("unmount", "--root", args.root, timeout=60)
    except subprocess.TimeoutExpired:
        log.error("memfs unmount did not finish in 60 s; the staged changes stay in the state dir")
        return
    if proc.returncode != 0:
        log.error("memfs unmount exited %d (see above); nothing staged is deleted", proc.returncode)


def _force_stop_item(secrets: dict[str, str]) -> bool:
    """Stop the work item so it does not sit queued until its lease expires."""
    import anyio

    from memfs.client.work_secret import sessions_token_from_secret
    from memfs.worker._sdk import AsyncAnthropic

    token = sessions_token_from_secret(secrets.get("ANTHROPIC_WORK_SECRET")) or secrets.get(
        "ANTHROPIC_ENVIRONMENT_KEY"
    )
    if not token:
        log.error("cannot force-stop the work item: no ANTHROPIC_WORK_SECRET or ANTHROPIC_ENVIRONMENT_KEY")
        return False

    async def stop() -> None:
        async with AsyncAnthropic(
            auth_token=token, api_key=None, base_url=os.environ.get("ANTHROPIC_BASE_URL"), max_retries=2
        ) as client:
            await client.beta.environments.work.stop(
                os.environ["ANTHROPIC_WORK_ID"],
                environment_id=os.environ["ANTHROPIC_ENVIRONMENT_ID"],
                force=True,
            )

    try:
        anyio.run(stop)
        log.info("work item %s force-stopped", os.environ["ANTHROPIC_WORK_ID"])
        return True
    except Exception as exc:  # noqa: BLE001
        if getattr(exc, "status_code", None) == 409:  # already stopped
            return True
        log.error("could not force-stop work item %s: %s", os.environ["ANTHROPIC_WORK_ID"], exc)
        return False
