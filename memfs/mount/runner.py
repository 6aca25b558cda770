"""Run a `Filesystem` as a FUSE mount (pyfuse3 on trio)."""

from __future__ import annotations

import logging

import pyfuse3
import trio

from memfs.mount.filesystem import Filesystem
from memfs.mount.fuse_ops import FuseOps

log = logging.getLogger("memfs.mount.runner")

MAX_TASKS = 1  # pyfuse3 worker tasks reading /dev/fuse (see serve() in run_mount)


def mount_options(*, allow_other: bool = False, debug: bool = False) -> set[str]:
    # No `default_permissions` (pyfuse3's default options are only that): the kernel would check
    # the 0444 mode of a read_only store before memfs could answer EROFS. The adapter checks modes
    # itself instead (memfs/mount/access.py; docs/SEMANTICS.md "Permissions").
    opts = {"fsname=memfs", "subtype=memfs"}
    if allow_other:
        opts.add("allow_other")
    if debug:
        opts.add("debug")
    return opts


async def run_mount(
    fs: Filesystem,
    root: str,
    *,
    allow_other: bool = False,
    debug: bool = False,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Mount `fs` at `root` and serve it until cancelled (or unmounted from outside).

    Reports started once the kernel mount exists and the request loop runs. On cancellation the
    mount is unmounted (pyfuse3.close(unmount=True)). Callers must not do blocking I/O on the
    mount from this trio thread: it serves the requests."""
    # The kernel has cached nothing before the mount exists: what the download queued is moot.
    fs.invalidations_done(len(fs.invalidations))
    fs.invalidations.clear()
    ops = FuseOps(fs)
    pyfuse3.init(ops, root, mount_options(allow_other=allow_other, debug=debug))
    log.info("mounted %s", root)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ops.invalidator, name="memfs-invalidator")

            async def serve() -> None:
                # One worker task: every handler but a failed writer's flush runs to completion
                # without awaiting, so a second task could only take over the read loop, and
                # pyfuse3's default (a new task whenever none is waiting, up to 99) hands its read
                # lock from task to task on every request: 10-20 % of the daemon's CPU per request
                # (docs/PERFORMANCE.md "Reads"). The flush that awaits is bounded (1 s).
                await pyfuse3.main(min_tasks=1, max_tasks=MAX_TASKS)
                log.info("FUSE session for %s ended", root)
                nursery.cancel_scope.cancel()  # unmounted from outside: stop the invalidator

            nursery.start_soon(serve, name="memfs-fuse-main")
            await trio.sleep(0)  # let main() start reading requests before anyone is told
            task_status.started()
    finally:
        fs.on_invalidate = None
        fs.invalidations_done(len(fs.invalidations))  # nobody waits on a gone kernel
        fs.invalidations.clear()
        pyfuse3.close(unmount=True)
        log.info("unmounted %s", root)
