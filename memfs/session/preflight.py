"""The mount's start-up checks (SEMANTICS.md#d-lifecycle): the interval, the mount root, the
session's stores. Light on purpose (no trio, httpx or pyfuse3): `memfs mount` runs them before it
forks, and the forked daemon before it starts its early download (memfs/session/early_fetch.py).
memfs.session.daemon re-exports them."""

from __future__ import annotations

import errno
import math
import os
from typing import TYPE_CHECKING, Any

from memfs import limits
from memfs.mount.mount_table import fuse_mount_at

if TYPE_CHECKING:
    from memfs.records import StoreInfo


MOUNT_PARENT = "/mnt/memory"
REQUEST_TIMEOUT = 10.0  # seconds: each request of the mount (connect, each read), early download too


class MountError(Exception):
    """A clear, user-facing reason the mount cannot start."""


def check_interval(value: float) -> float:
    if math.isnan(value) or value < limits.MIN_SYNC_INTERVAL:
        raise MountError(
            f"--sync-interval must be at least {limits.MIN_SYNC_INTERVAL:g} seconds (got {value})"
        )
    return value


# -- preflight ----------------------------------------------------------------------------------
def clear_stale_mount(root: str) -> bool:
    """Lazily unmount a dead memfs mount at root ("Transport endpoint is not connected")."""
    kind = fuse_mount_at(root)
    if kind is None:
        return False
    try:
        # statfs always reaches the daemon: a stat of the root may be answered from the kernel's
        # attribute cache (60 s, SEMANTICS.md#d-kernel-cache) long after the daemon died
        os.statvfs(root)
        alive = True
    except OSError as exc:
        alive = exc.errno != errno.ENOTCONN
    if alive:
        raise MountError(
            f"{root} is already a mounted {kind} filesystem; run `memfs unmount --root {root}` first"
        )
    if kind not in ("fuse.memfs", "fuse"):
        raise MountError(
            f"{root} holds a dead {kind} mount that is not memfs's; unmount it: fusermount3 -uz {root}"
        )
    import logging  # not before: `memfs mount` runs these checks, and handed to a standby never logs
    import subprocess

    subprocess.run(["fusermount3", "-uz", root], check=False, capture_output=True)
    logging.getLogger("memfs.mount").warning("cleared a dead memfs mount at %s", root)
    return True


def preflight_root(root: str) -> None:
    clear_stale_mount(root)
    if not os.path.exists(root):
        raise MountError(f"the mount root does not exist: {root}; create it: mkdir -p {root}")
    if not os.path.isdir(root):
        raise MountError(f"something already exists at the memory mount root and is not a folder: {root}")
    if not os.access(root, os.W_OK | os.X_OK):
        raise MountError(
            f"cannot use the memory mount root: {root}: not writable by uid {os.geteuid()}; "
            "the worker host must make this mount path writable"
        )
    entries = os.listdir(root)
    if entries:
        shown = ", ".join(sorted(entries)[:5])
        raise MountError(
            f"something already exists at the memory store's path: {root} (holds {shown}); "
            "memfs mounts only on an empty folder: empty it or choose another --root"
        )


# -- session ------------------------------------------------------------------------------------
def stores_from_session(session: dict[str, Any], root: str) -> list[StoreInfo]:
    from memfs.records import StoreInfo  # dataclasses: not for the checks `memfs mount` runs before it forks

    resources = [r for r in session.get("resources", []) if r.get("type") == "memory_store"]
    if not resources:
        raise MountError(f"session {session.get('id')} has no memory stores attached: nothing to mount")
    if len(resources) > limits.MAX_STORES_PER_SESSION:
        raise MountError(
            f"session {session.get('id')} attaches {len(resources)} memory stores; at most "
            f"{limits.MAX_STORES_PER_SESSION} can be mounted"
        )
    stores: list[StoreInfo] = []
    seen: set[str] = set()
    for r in resources:
        mount_path = r.get("mount_path") or ""
        parent, _, slug = mount_path.rstrip("/").rpartition("/")
        if parent != MOUNT_PARENT or not slug or slug in (".", ".."):
            raise MountError(
                f"memory store {r.get('memory_store_id')} has mount path {mount_path!r}, which is not a folder "
                f"directly under {MOUNT_PARENT} (mapped to {root})"
            )
        if slug in seen:
            raise MountError(f"two memory stores share the mount path {mount_path}")
        seen.add(slug)
        access = r.get("access", "read_write")
        if access not in ("read_write", "read_only"):
            raise MountError(f"memory store {r.get('memory_store_id')} has unknown access {access!r}")
        stores.append(
            StoreInfo(store_id=r["memory_store_id"], name=r.get("name") or slug, slug=slug, access=access)
        )
    return stores
