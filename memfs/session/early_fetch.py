"""The mount's early download (SEMANTICS.md#d-first-download, docs/PERFORMANCE.md "mount-ready").

A mount's start is two serial halves of about the same CPU: importing trio, httpx, pyfuse3 and
the engine (~0.4 s, all of it needed before the mount is ready), and reading the session and each
store's snapshot, parsing, hashing and storing it. This module overlaps them on the second core:
right after the daemon is forked (before those imports), it forks a helper process that reads the
session and the counters, and once the daemon holds the state dir's lock and has found it fresh
(no counter, no file, no baseline: a new sandbox), streams every store's snapshot into state.db's
blobs as it arrives (memfs/client/snapshot_stream.py, the same parser and sink as the client's), and
sends the daemon what the plan needs: (counter, entries, shas) per store. The engine's first pull
takes that instead of asking (memfs/sync/remote.py `StoreReader.prefetched`).

A process, not a thread: the helper's parsing (orjson, UTF-8) needs a GIL, and the daemon's
imports hold its own; threads of one process would take turns. The helper imports only the
standard library, orjson and memfs's light modules.

What it never changes: the view. It writes only blobs (content by its verified sha256, which
nothing refers to until the plan does), into a state dir whose lock the daemon holds. Anything
that goes wrong (an HTTP error, auth, a broken or short stream, a timeout, the helper dying) only
means "not fetched early": the daemon then asks as it always did, with the same retries and the
same error messages. It runs only for an `http://` base URL without credentials or query in it,
reached directly (what the client would do with TLS, a proxy or URL credentials is not repeated
here: those mounts start as before; the helper asks memfs/client/egress.py, as the client does, whether
the environment puts a proxy in the way, so it never goes around one), not for a root with a
mount on it (the daemon's preflight clears a dead one and logs it, after logging is set up), and
not at all with `MEMFS_EARLY_DOWNLOAD=off`.

Why `http.client` and not httpx: receiving 8 snapshots of 2,000 memories (~32 MB each) took
0.16-0.19 s of CPU with it and 0.87-1.22 s with a synchronous httpx client (h11's 64 KiB events
and copies; httpx's import the first time), on the second core that the daemon's imports use too.
"""

from __future__ import annotations

import os
import pickle
import re
import struct
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from memfs import limits
from memfs.protocol import BETA_HEADER, COUNTERS_PATH, MEMORY_BETA, SESSIONS_BETA, SESSIONS_PATH, STORES_PATH

EARLY_ENV = "MEMFS_EARLY_DOWNLOAD"  # "off": every mount starts the old way (comparisons, tests)
_PLAIN_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")  # ids that go into a path as they are
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./~-]*")
_FRAME = struct.Struct("<I")
_LIMIT_HEADERS = "anthropic-ratelimit-requests-"
# Snapshots streamed at once: stores then end one after another, and the daemon places each (plan,
# 2,000 files: ~0.13 s) while the helper streams the next, instead of placing all 8 at the end.
EARLY_STREAMS = 4

Snapshot = tuple[int, list, set]  # counter, entries (snapshot_stream.SnapshotEntry), shas stored


def early_target(base_url: str) -> tuple[str, int, str] | None:
    """(host, port, path prefix) for a plain `http://` base URL, else None (no early download).

    The client verifies TLS and sends URL credentials, which this helper does not do, so such URLs
    are left to it; so is a store behind a proxy, which the client honours (memfs/client/egress.py)
    and the helper checks for once it runs."""
    try:
        u = urlsplit(base_url)
        port = u.port or 80
    except ValueError:
        return None
    if u.scheme != "http" or not u.hostname or u.username or u.password or u.query or u.fragment:
        return None
    if not _PLAIN_PATH.fullmatch(u.path):
        return None
    return u.hostname, port, u.path.rstrip("/")


class EarlyFetch:
    """The daemon's end of the helper: what it sent, waited for per key from any thread."""

    def __init__(self, pid: int, go_fd: int, results_fd: int):
        self.pid = pid
        self._go_fd: int | None = go_fd
        self._results_fd = results_fd
        self._results: dict[tuple[str, ...], Any] = {}
        self.reasons: dict[str, str] = {}  # what was not fetched early, and why (for the log)
        self.state: Any = None  # the state dir, opened and locked (memfs.mount.state.State)
        self.fresh = False  # the state dir had nothing: the snapshots are streamed
        self.taken: set[str] = set()  # stores whose early snapshot the first pull took
        self._done = False
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="memfs-early", daemon=True)
        self._reader.start()

    # -- the helper's messages ------------------------------------------------------------------
    def _read(self) -> None:
        try:
            with os.fdopen(self._results_fd, "rb") as pipe:
                while head := pipe.read(_FRAME.size):
                    if len(head) < _FRAME.size:
                        break
                    data = pipe.read(_FRAME.unpack(head)[0])
                    key, value, reason = pickle.loads(data)
                    with self._cond:
                        self._results[key] = value
                        if reason:
                            self.reasons[":".join(key)] = reason
                        self._cond.notify_all()
        except Exception as exc:  # whatever the pipe held: not fetched early, asked anew
            self.reasons.setdefault("helper", f"{type(exc).__name__}: {exc}")
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _wait(self, *key: str, pop: bool = False) -> Any:
        with self._cond:
            while key not in self._results and not self._done:
                self._cond.wait()
            return self._results.pop(key, None) if pop else self._results.get(key)

    def session(self) -> dict[str, Any] | None:
        """The session as the service answered it (200), or None: the daemon asks itself."""
        return self._wait("session")

    def counters(self) -> dict[str, int] | None:
        return self._wait("counters")

    def limits(self) -> dict[str, str]:
        """The `anthropic-ratelimit-requests-*` headers of the helper's last answer (the counters',
        else the session's), for the client's pacer (memfs/client/budget.py `Pacer.heard`): its
        first request is then paced like the rest. Empty when the service sent none."""
        return self._wait("limits") or {}

    def snapshot(self, store_id: str) -> _Take:
        return _Take(self, store_id)

    def describe(self, stores: int) -> str:
        """One log line: what the first download took from the early download, and what not."""
        why = "; ".join(f"{k}: {v}" for k, v in sorted(self.reasons.items()))
        return f"early download: {len(self.taken)} of {stores} store(s) streamed while the mount started" + (
            f" (not early: {why})" if why else ""
        )

    # -- control ------------------------------------------------------------------------------
    def go(self, ok: bool) -> None:
        """Let the helper stream the snapshots into the state dir (the daemon holds its lock and
        found it fresh), or tell it to stop after the session and counters."""
        if self._go_fd is None:
            return
        try:
            os.write(self._go_fd, b"1" if ok else b"0")
        except OSError:
            pass  # the helper is gone: its messages say what it got
        finally:
            os.close(self._go_fd)
            self._go_fd = None

    def close(self) -> None:
        """End the helper (at once, if it still runs: what it stored is blobs only) and reap it."""
        self.go(False)
        import signal

        try:
            pid, _status = os.waitpid(self.pid, os.WNOHANG)
            if pid == 0:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self._reader.join(timeout=5)
        with self._cond:
            self._results.clear()  # the daemon keeps this object for the session: not what it read


class _Take:
    """One store's early snapshot, for `StoreReader.prefetched` (memfs/sync/remote.py `Prefetched`)."""

    def __init__(self, fetch: EarlyFetch, store_id: str):
        self.fetch = fetch
        self.store_id = store_id

    def take(self) -> Snapshot | None:
        got = self.fetch._wait("snapshot", self.store_id, pop=True)  # held once: 2,000 entries a store
        if got is not None:
            self.fetch.taken.add(self.store_id)
        return got


def begin(root: str, state_dir: Path, session_id: str, base_url: str, token: str | None, *,
          timeout: float) -> EarlyFetch | None:  # fmt: skip
    """Start the early download, in the forked daemon before its heavy imports; None when it does
    not apply (then, or on any failure here, the daemon starts exactly as without it: it runs its
    own preflight and opens the state dir, with the error messages it always gave)."""
    from memfs.mount.mount_table import fuse_mount_at
    from memfs.session.preflight import MountError, preflight_root

    if os.environ.get(EARLY_ENV) == "off" or not token or not _PLAIN_ID.fullmatch(session_id):
        return None
    target = early_target(base_url)
    if target is None:
        return None
    if fuse_mount_at(root) is not None:
        return None  # a dead mount to clear first: the daemon's preflight does it, and logs it
    from memfs.session.control import socket_path_problem

    if socket_path_problem(state_dir):
        return None  # the daemon refuses that state dir before creating anything in it
    try:
        preflight_root(root)
    except (MountError, OSError):
        return None
    go_r, go_w = os.pipe()
    results_r, results_w = os.pipe()
    daemon = os.getpid()
    pid = os.fork()
    if pid == 0:  # the helper
        code = 1
        try:
            os.close(go_w)
            os.close(results_r)
            _close_all_but(go_r, results_w)
            _die_with(daemon)
            code = _helper(target, token, session_id, state_dir / "state.db", go_r, results_w, timeout)
        finally:
            os._exit(code)
    os.close(go_r)
    os.close(results_w)
    fetch = EarlyFetch(pid, go_w, results_r)
    # While the helper asks for the session and the counters: the state dir, locked, and fresh?
    from memfs.mount.state import State

    try:
        state = State(state_dir)
    except Exception:
        fetch.close()
        return None
    try:
        state.lock(os.path.realpath(root))
        with state.transaction() as db:
            (used,) = db.execute(
                "SELECT EXISTS(SELECT 1 FROM stores WHERE counter IS NOT NULL)"
                " OR EXISTS(SELECT 1 FROM files) OR EXISTS(SELECT 1 FROM baseline)"
            ).fetchone()
    except Exception:  # locked by a live mount, or unreadable: the daemon says so itself
        state.close()
        fetch.close()
        return None
    fetch.state = state
    fetch.fresh = not used
    if used:
        fetch.reasons["snapshots"] = "the state dir holds a mount's state (not a first download)"
    fetch.go(fetch.fresh)
    return fetch


def _die_with(parent: int) -> None:
    """A daemon that dies (SIGKILL) while the helper streams takes the helper with it: nothing
    writes into a state dir whose lock a later mount may hold by then."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the helper ends with its streams (each bounded by the request timeout)
    if os.getppid() != parent:  # the daemon died before the prctl took effect
        os._exit(1)


def _close_all_but(*keep: int) -> None:
    """The helper holds nothing of the daemon's: not its state.db connection, its lock, or the
    pipe its `memfs mount` caller waits on for "ready"."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)


def _helper(target: tuple[str, int, str], token: str, session_id: str, db_path: Path, go_fd: int,
            results_fd: int, timeout: float) -> int:  # fmt: skip
    """The helper process: session, counters, then (on the daemon's go) every store's snapshot,
    each on a thread and connection of its own, stored as it streams. Returns the exit status."""
    import http.client

    import orjson

    host, port, prefix = target
    lock = threading.Lock()

    def send(key: tuple[str, ...], value: Any, reason: str | None = None) -> None:
        data = pickle.dumps((key, value, reason), protocol=pickle.HIGHEST_PROTOCOL)
        frame = memoryview(_FRAME.pack(len(data)) + data)
        with lock:
            while frame:
                frame = frame[os.write(results_fd, frame) :]

    # Asked here, after the fork (urllib.request's import is ~20 ms): not on the daemon's path.
    from memfs.client.egress import ProxySettingError, proxy_for

    try:
        proxied = proxy_for(f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}") is not None
    except ProxySettingError:
        proxied = True  # the daemon's client says what is wrong with the setting
    if proxied:
        send(("failed",), None, "the store is reached through a proxy (the client's way)")
        return 0

    def get(conn: http.client.HTTPConnection, path: str, beta: str) -> http.client.HTTPResponse:
        conn.request("GET", prefix + path, headers={"authorization": f"Bearer {token}", BETA_HEADER: beta})
        return conn.getresponse()

    def limits_of(resp: http.client.HTTPResponse) -> dict[str, str]:
        return {k.lower(): v for k, v in resp.getheaders() if k.lower().startswith(_LIMIT_HEADERS)}

    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        resp = get(conn, f"{SESSIONS_PATH}/{session_id}", SESSIONS_BETA)
        body = resp.read()
        send(("limits",), limits_of(resp))
        session = orjson.loads(body) if resp.status == 200 else None
        if not isinstance(session, dict):
            send(("session",), None, f"the session read answered {resp.status}")
            return 0
        send(("session",), session)
        ids = [
            r.get("memory_store_id") for r in session.get("resources", []) if r.get("type") == "memory_store"
        ]
        if (
            not ids
            or len(ids) > limits.MAX_STORES_PER_SESSION
            or not all(isinstance(i, str) and _PLAIN_ID.fullmatch(i) for i in ids)
        ):
            return 0  # the daemon's own check of the session says what is wrong with it
        resp = get(conn, f"{COUNTERS_PATH}?ids={'%2C'.join(ids)}", MEMORY_BETA)
        body = resp.read()
        if said := limits_of(resp):
            send(("limits",), said)
        if resp.status != 200:  # no counter (the hosted API): no snapshot either
            send(("counters",), None, f"the counters answered {resp.status}")
            return 0
        counters = {item["memory_store_id"]: int(item["counter"]) for item in orjson.loads(body)["data"]}
        send(("counters",), counters)
    except Exception as exc:
        send(("failed",), None, f"{type(exc).__name__}: {exc}")
        return 0
    finally:
        conn.close()
    if os.read(go_fd, 1) != b"1":
        return 0
    blobs = _Blobs(db_path)
    turns = threading.Semaphore(EARLY_STREAMS)
    threads = [
        threading.Thread(target=_stream_one, args=(target, get, send, blobs, sid, timeout, turns))
        for sid in ids
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    blobs.close()
    return 0


def _stream_one(target, get, send, blobs: _Blobs, store_id: str, timeout: float,
                turns: threading.Semaphore) -> None:  # fmt: skip
    """One store's snapshot, stored as it streams; sent to the daemon only once it ended whole."""
    with turns:
        _stream_store(target, get, send, blobs, store_id, timeout)


def _stream_store(target, get, send, blobs: _Blobs, store_id: str, timeout: float) -> None:
    import http.client

    from memfs.client.snapshot_stream import SNAPSHOT_CHUNK_BYTES, SnapshotParser, StreamedSnapshot

    host, port, _prefix = target
    key = ("snapshot", store_id)
    url = f"{STORES_PATH}/{store_id}/snapshot"
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        resp = get(conn, url, MEMORY_BETA)
        if resp.status != 200:
            resp.read()
            send(key, None, f"the snapshot answered {resp.status}")
            return
        snap = StreamedSnapshot(blobs, store_id)
        parser = SnapshotParser(url, snap)
        while chunk := resp.read(SNAPSHOT_CHUNK_BYTES):
            parser.feed(chunk)
        counter = parser.finish()
        send(key, (counter, snap.entries, snap.shas))
    except Exception as exc:  # a broken or short stream, a timeout, bad content: asked anew
        send(key, None, f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


class _Blobs:
    """The helper's own connection to state.db: content by sha, one transaction per chunk (as
    memfs/mount/blobs.py `put_blobs`), shared by its stream threads."""

    def __init__(self, db_path: Path):
        import sqlite3

        self._db = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA wal_autocheckpoint=0")  # the daemon's timer checkpoints
        self._lock = threading.Lock()

    def put_blobs(self, blobs: list[tuple[str, bytes]]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR IGNORE INTO blobs(sha, data) VALUES(?, ?)", blobs)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()
