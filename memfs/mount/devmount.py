"""Development mount: serve a state dir's stores in the foreground, no service, no sync.

    python -m memfs.mount.devmount --state-dir D --root R --store ID:SLUG:ACCESS [--store …]

Prints `ready` on stdout once the mount is live; SIGTERM/SIGINT unmount and exit 0.

With `--stdin-commands`, each stdin line is a JSON call of the core's sync-facing API, run on the
trio thread like the sync engine would (tests use it to check kernel invalidation):
`{"op": "apply_remote", "store": ID, "path": P, "memory_id": M, "content": TEXT, "mtime_ns": N}`,
`{"op": "move_path", "store": ID, "old": P, "new": Q}`, `{"op": "remove_path", "store": ID, "path": P}`,
`{"op": "add_notice", "store": ID, "kind": K, "path": P, "details": D}`. Each answers one stdout
line: `ok` or `error <message>`, once the kernel has the call's invalidations; with `"hold": true`
at once, its invalidations kept back (the moment between a pull's change and the kernel being
told, made as long as a test needs) until `{"op": "deliver_held"}`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import signal
import sys

import trio

from memfs.limits import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES
from memfs.logging_setup import setup_logging
from memfs.mount.filesystem import Filesystem
from memfs.mount.invalidation import Invalidation
from memfs.mount.runner import run_mount
from memfs.mount.state import State, StateLocked
from memfs.protocol import is_access
from memfs.records import StoreInfo


def _store(spec: str) -> StoreInfo:
    try:
        store_id, slug, access = spec.split(":")
    except ValueError:
        raise argparse.ArgumentTypeError(f"--store wants ID:SLUG:ACCESS, got {spec!r}") from None
    if not is_access(access):
        raise argparse.ArgumentTypeError(f"access must be read_write or read_only, got {access!r}")
    return StoreInfo(store_id, slug, slug, access)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m memfs.mount.devmount")
    p.add_argument("--state-dir", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--store", type=_store, action="append", default=[])
    p.add_argument("--max-files", type=int, default=DEFAULT_MAX_FILES)
    p.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES)
    p.add_argument("--allow-other", action="store_true")
    p.add_argument("--uid", type=int, help="owner of every file (default: this process's)")
    p.add_argument("--gid", type=int)
    p.add_argument("--debug", action="store_true")
    p.add_argument("--stdin-commands", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    setup_logging(level=logging.DEBUG if args.debug else logging.INFO)
    state = State(args.state_dir)
    try:
        state.lock(args.root)
    except StateLocked as e:
        print(f"devmount: {e}", file=sys.stderr)
        return 2
    try:
        for s in args.store:
            state.set_store(s.store_id, s.name, s.slug, s.access)
        fs = Filesystem(
            state, args.store, uid=args.uid, gid=args.gid, max_files=args.max_files, max_bytes=args.max_bytes
        )
        trio.run(_serve, fs, args)
    finally:
        state.close()
    return 0


async def _serve(fs: Filesystem, args: argparse.Namespace) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def mount(task_status=trio.TASK_STATUS_IGNORED) -> None:
                await run_mount(
                    fs, args.root, allow_other=args.allow_other, debug=args.debug, task_status=task_status
                )
                nursery.cancel_scope.cancel()

            await nursery.start(mount)
            print("ready", flush=True)
            if args.stdin_commands:
                nursery.start_soon(_commands, fs)
            async for _ in signals:
                fs.stop_writes()
                nursery.cancel_scope.cancel()
                break


def _run_command(fs: Filesystem, cmd: dict) -> None:
    op, sid = cmd["op"], cmd["store"]
    if op == "apply_remote":
        data = cmd["content"].encode()
        fs.apply_remote(
            sid,
            cmd["path"],
            cmd.get("memory_id"),
            hashlib.sha256(data).hexdigest(),
            data,
            int(cmd.get("mtime_ns") or fs.now()),
        )
    elif op == "move_path":
        fs.move_path(sid, cmd["old"], cmd["new"])
    elif op == "remove_path":
        fs.remove_path(sid, cmd["path"])
    elif op == "add_notice":
        fs.add_notice(sid, cmd["kind"], cmd["path"], cmd.get("details", ""))
    else:
        raise ValueError(f"unknown op {op!r}")


async def _commands(fs: Filesystem) -> None:
    stream = trio.lowlevel.FdStream(os.dup(0))
    buf = b""
    held: list[Invalidation] = []  # kept back from the kernel ("hold")
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                cmd = json.loads(line)
                if cmd["op"] == "deliver_held":
                    fs.invalidations.extend(held)
                    held.clear()
                    fs.inval.wake()
                else:
                    _run_command(fs, cmd)
                if cmd.get("hold"):
                    # taken off the queue before the adapter's drain could run (no await since
                    # the call queued them): still counted as on their way (`InvalidationQueue.stale`)
                    held.extend(fs.invalidations)
                    fs.invalidations.clear()
                else:
                    await fs.wait_invalidated()  # answer once the kernel sees it, like `memfs sync`
            except Exception as e:  # report, keep serving
                print(f"error {type(e).__name__}: {e}", flush=True)
            else:
                print("ok", flush=True)


if __name__ == "__main__":
    sys.exit(main())
