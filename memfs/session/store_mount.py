"""`memfs mount --store STORE PATH`: one store mounted at a path of its own, without a session
(SEMANTICS.md#d-store-mount; docs/OPERATIONS.md "A store on a developer's machine").

What differs from a session's mount is only where things come from and where they go:

- the credential is the organisation's API key (`ANTHROPIC_API_KEY`, or `--api-key-file`; never an
  argument), taken out of the environment once read and the process made non-dumpable, as the
  work secret is (memfs/secret_env.py);
- the store is named on the command line (its id, or its name; `--create` makes a store of that
  name when none exists) and read from the store API, not from a session;
- the store is the mount root itself (memfs/mount/single_store.py): the folder holds only the
  memories, its notices are kept in the state dir;
- the state dir defaults to the user's XDG state directory; the mount is the invoking user's,
  through fusermount3 (libfuse falls back to it when the process may not mount itself).

Everything else (cache, staging, merge, notices, budget, status, sync, unmount, flush) is the
session mount's daemon, run with these options (memfs/session/daemon.py).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

    from memfs.client import StoreClient
    from memfs.mount.state import State
    from memfs.records import StoreInfo

API_KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULT_BASE_URL = "https://api.anthropic.com"
STORE_ID_PREFIX = "memstore_"  # what the API's store ids look like; anything else is a name
# What the state dir remembers of the store, so that a mount started offline knows it.
META_REF, META_ID, META_NAME = "store_ref", "store_id", "store_name"
STATE_NAME_READABLE = 24  # characters of the root's name in its state dir's name


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "path",
        nargs="?",
        default=None,
        help="with --store: where the store is mounted (the folder itself holds its memories)",
    )
    p.add_argument(
        "--store",
        default=None,
        metavar="ID_OR_NAME",
        help="mount this one store without a session, with the organisation's API key "
        f"(${API_KEY_ENV} or --api-key-file), at PATH (or --root)",
    )
    p.add_argument(
        "--create", action="store_true", help="with --store NAME: create the store if none has that name"
    )
    p.add_argument(
        "--api-key-file",
        default=None,
        help=f"with --store: read the API key from this file (default: ${API_KEY_ENV})",
    )
    p.add_argument("--read-only", action="store_true", help="with --store: mount the store read-only")


def without_store_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with a session's `memfs mount` given options that only `--store` takes."""
    given = [
        name
        for name, value in (
            ("PATH", args.path),
            ("--create", args.create),
            ("--api-key-file", args.api_key_file),
            ("--read-only", args.read_only),
        )
        if value
    ]
    if not given:
        return None
    return (
        f"{', '.join(given)} only go with --store (one store at a path, no session); "
        "a session's stores mount under --root"
    )


def _fail(message: str, code: int = 1) -> int:
    print(f"memfs mount: error: {message}", file=sys.stderr)
    return code


def xdg_state_dir(root: str) -> Path:
    """`$XDG_STATE_HOME/memfs/<name>`, else `~/.local/state/memfs/<name>`: the user's own, whoever
    runs it (a session mount run as root keeps /var/lib/memfs). The name is short, for the
    control socket's path (at most 107 bytes) under a long home: the end of the root's last two
    names (Claude Code's project folder and `memory`), then a hash of the whole root."""
    import hashlib

    from memfs.session import control

    key = control.registry_key(root)
    readable = "_".join(Path(key).parts[-2:]).replace("/", "")[-STATE_NAME_READABLE:].lstrip("_") or "root"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base, "memfs", f"{readable}-{digest}")


def read_api_key(key_file: str | None) -> tuple[str | None, str | None]:
    """(key, problem). The variable is always taken out of the environment (also when a key file
    is given), so no child and no same-uid reader of /proc/<pid>/environ finds it."""
    from memfs import secret_env

    taken = secret_env.take((API_KEY_ENV,))
    key = taken.get(API_KEY_ENV)
    if key_file:
        try:
            st = os.stat(key_file)
            with open(key_file, encoding="utf-8") as f:
                key = f.read().strip()
        except OSError as exc:
            return None, f"cannot read the API key file {key_file}: {exc.strerror}"
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            return None, f"the API key file {key_file} is readable by others; chmod 600 {key_file}"
    if not key:
        return None, f"no API key: set {API_KEY_ENV} or pass --api-key-file FILE (never the key itself)"
    secret_env.make_non_dumpable()
    return key, None


def cmd_mount_store(args: argparse.Namespace) -> int:
    from memfs.session import commands, control
    from memfs.session.hook import EXIT_NOT_ANSWERING
    from memfs.session.preflight import MountError, check_interval

    if args.session_id:
        return _fail("--store mounts one store without a session: drop --session-id", 2)
    try:
        check_interval(args.sync_interval)
    except MountError as exc:
        return _fail(str(exc), 2)
    if args.max_files < 1 or args.max_bytes < 1:
        return _fail("--max-files and --max-bytes must be positive", 2)
    root = os.path.abspath(args.path or args.root)
    base_url = args.base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
    key, problem = read_api_key(args.api_key_file)
    if problem:
        return _fail(problem, 2)
    try:
        control.checked_runtime_dir(create=True)
    except (control.RegistryRefused, OSError) as exc:
        return _fail(str(exc))
    problem = commands._live_mount_problem(root)
    if problem:
        return _fail(problem, EXIT_NOT_ANSWERING if "does not answer" in problem else 1)
    state_dir = Path(args.state_dir).resolve() if args.state_dir else xdg_state_dir(root)
    args.token = key
    if not args.foreground:
        return commands._spawn_daemon(args, root, state_dir, "", base_url, run=run_store_mount)
    return run_store_mount(args, root, state_dir, "", base_url)


def run_store_mount(
    args: argparse.Namespace, root: str, state_dir: Path, _session_id: str, base_url: str, *,
    ready_fd: int | None = None,
) -> int:  # fmt: skip
    """The daemon, in this process (`ready_fd`: as commands._run_foreground's)."""
    from memfs.session._trio import import_trio_without_ldconfig
    from memfs.session.cli_support import ReadyLine

    import_trio_without_ldconfig()
    import trio

    from memfs.logging_setup import setup_logging
    from memfs.session.daemon import Daemon, MountError, MountOptions

    setup_logging(args.log_format)
    report = ReadyLine(ready_fd)

    finder = StoreFinder(args.store, root, create=args.create, read_only=args.read_only)
    opts = MountOptions.from_flags(
        args,
        root=root,
        session_id="",
        base_url=base_url,
        token=args.token,
        state_dir=state_dir,
        api_key=True,
        find_stores=finder,
        start_offline=finder.mounted_before,
        single_store=True,
        conflict_who=f"host-{os.uname().nodename}",  # what socket.gethostname() answers
    )

    def on_ready(stores: list[StoreInfo]) -> None:
        (s,) = stores
        text = f"memfs: mounted store {s.name!r} ({s.store_id}, {s.access}) at {root} (state dir {state_dir})"
        if report.pending:
            report("ready " + text + "\n")
        else:
            print(text, flush=True)

    try:
        return trio.run(Daemon(opts).run, on_ready)
    except MountError as exc:
        import logging

        logging.getLogger("memfs").error("%s", exc)
        report(f"error: {exc}\n")
        if ready_fd is None:
            print(f"memfs mount: error: {exc}", file=sys.stderr)
        return 1
    except BaseException as exc:
        report(f"error: {type(exc).__name__}: {exc}\n")
        raise


class StoreFinder:
    """The one store to mount, read from the store API with the API key; when the service cannot
    be reached, the store this state dir mounted before under the same name (offline start)."""

    def __init__(self, ref: str, root: str, *, create: bool, read_only: bool):
        self.ref, self.root, self.create, self.read_only = ref, root, create, read_only
        self.known = False  # this state dir mounted this store before: it may start offline

    def mounted_before(self) -> bool:
        return self.known

    async def __call__(self, client: StoreClient, state: State) -> list[StoreInfo]:
        from memfs.client import ApiError, Unreachable
        from memfs.records import StoreInfo
        from memfs.session.daemon import MountError

        try:
            store = await self._find(client)
        except Unreachable as exc:
            if state.get_meta(META_REF) != self.ref or not state.get_meta(META_ID):
                raise MountError(
                    f"the store service at {client.base_url} is unreachable ({exc}) and this state dir "
                    f"has never mounted store {self.ref!r}: the first mount needs the network"
                ) from exc
            store = {"id": state.get_meta(META_ID), "name": state.get_meta(META_NAME) or self.ref}
        except ApiError as exc:
            raise MountError(f"cannot read store {self.ref!r} from {client.base_url}: {exc}") from exc
        self.known = state.get_meta(META_ID) == store["id"]
        if state.get_meta(META_ID) not in (None, store["id"]):
            raise MountError(
                f"this state dir holds store {state.get_meta(META_ID)}, not {store['id']}: "
                "give each store its own --state-dir"
            )
        state.set_meta(META_REF, self.ref)
        state.set_meta(META_ID, store["id"])
        state.set_meta(META_NAME, store.get("name") or self.ref)
        slug = os.path.basename(self.root.rstrip("/")) or store["id"]
        read_only = self.read_only or bool(store.get("archived_at"))  # an archived store takes no writes
        name = store.get("name") or self.ref
        return [StoreInfo(store["id"], name, slug, "read_only" if read_only else "read_write")]

    async def _find(self, client: StoreClient) -> dict:
        from memfs.session.daemon import MountError

        if self.ref.startswith(STORE_ID_PREFIX):
            return await client.get_store(self.ref)
        named = [s for s in await client.list_stores() if s.get("name") == self.ref]
        if len(named) > 1:
            ids = ", ".join(s["id"] for s in named)
            raise MountError(f"{len(named)} stores are named {self.ref!r} ({ids}): mount one by its id")
        if named:
            return named[0]
        if not self.create:
            raise MountError(
                f"no memory store is named {self.ref!r}: pass --create to create it, or give a store id"
            )
        return await client.create_store(self.ref)
