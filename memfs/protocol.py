"""The store API's names on the wire, spelled once (the service checks them, its clients send
them), and the two mode vocabularies that flow from the command line to the planner.

The beta values select which API a request speaks (the memory store API, or the sessions API that
a memory request may also use); the counter header is the memfs extension that tells a listing's
reader which counter its snapshot was read at. Like `limits.py`, this imports nothing from memfs,
so any layer may use it. The tests spell the values out themselves: a change here must break them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeGuard, get_args

BETA_HEADER = "anthropic-beta"
MEMORY_BETA = "agent-memory-2026-07-22"
SESSIONS_BETA = "managed-agents-2026-04-01"

API_KEY_HEADER = "x-api-key"
VERSION_HEADER = "anthropic-version"  # what an API key's requests carry, API_VERSION
API_VERSION = "2023-06-01"
COUNTER_HEADER = "memfs-store-counter"  # the store counter a memory listing, feed or snapshot was read at
REQUEST_ID_HEADER = "request-id"
# On every answer of a service that serves memfs's extensions (counters, changes, snapshot, watch):
# `memfs serve` and its relay. A mount whose session read came without it asks no counters: the
# hosted API has none, and its 404 was a request of the organisation's allowance and a round trip
# before the first download's first page (SEMANTICS.md#d-no-counter).
EXTENSIONS_HEADER = "memfs-extensions"
EXTENSIONS = "counters"
# Why a mount made a write (SEMANTICS.md#d-merge): a merged text's update, or a conflict copy's
# create. `memfs serve` counts the ones it took per store at /metrics; every other service, the
# hosted API included, ignores a header it does not know. Sent on single requests only.
WRITE_REASON_HEADER = "memfs-write-reason"
WriteReason = Literal["merge", "conflict-copy"]

# Every path memfs sends or serves under /v1/ is spelled here (tests/test_wire.py fails on a `/v1/`
# string anywhere else in memfs/); the builders below take ids, or `{store_id}`-style names for the
# service's route patterns, so the client's requests and the service's routes are one spelling.
API_PREFIX = "/v1/"  # the API's paths: each needs a credential and counts against the organisation's limits
STORES_PATH = "/v1/memory_stores"
COUNTERS_PATH = "/v1/memory_store_counters"
WATCH_PATH = "/v1/memory_store_watch"
SESSIONS_PATH = "/v1/sessions"
RELAY_STATUS_PATH = "/v1/relay_status"  # the relay's own (memfs serve --upstream)
ENVIRONMENTS_PATH = (
    "/v1/environments"  # the platform's work API (the official EnvironmentWorker's), not the store's
)

# How a session holds a store: the wire value of a session resource's `access`.
Access = Literal["read_write", "read_only"]
ACCESS_MODES: tuple[Access, ...] = get_args(Access)

# What the mount does with a local delete (`--sync-deletions`): send it, or hold it (log it once).
Deletions = Literal["enabled", "log_only", "disabled"]
DELETION_MODES: tuple[Deletions, ...] = get_args(Deletions)


def is_access(value: object) -> TypeGuard[Access]:
    return value in ACCESS_MODES


LOG_FORMATS = ("text", "json")  # --log-format: one line per event, as text or as JSON

# `memfs mount --on-conflict` (SEMANTICS.md#d-merge): merge what does not overlap, or the seeds' store-wins rule
OnConflict = Literal["merge", "store-wins"]
ON_CONFLICT_MODES: tuple[OnConflict, ...] = get_args(OnConflict)


def as_on_conflict(value: object, default: OnConflict = "merge") -> OnConflict:
    """An `--on-conflict` value read back from somewhere untyped (the state dir's meta)."""
    for mode in ON_CONFLICT_MODES:
        if value == mode:
            return mode
    if value is None:
        return default
    raise ValueError(f"not an --on-conflict mode: {value!r} (one of {', '.join(ON_CONFLICT_MODES)})")


def as_deletions(value: object, default: Deletions = "enabled") -> Deletions:
    """A `--sync-deletions` value read back from somewhere untyped (argv, the state dir's meta):
    itself when it is one of the modes, else `default` (a missing value)."""
    for mode in DELETION_MODES:
        if value == mode:
            return mode
    if value is None:
        return default
    raise ValueError(f"not a --sync-deletions mode: {value!r} (one of {', '.join(DELETION_MODES)})")


def store_path(store_id: str) -> str:
    return f"{STORES_PATH}/{store_id}"


def _of_store(tail: str) -> Callable[[str], str]:
    """The builder of a path under one store: `memories_path("memstore_1")`."""
    return lambda store_id: f"{store_path(store_id)}/{tail}"


memories_path = _of_store("memories")
versions_path = _of_store("memory_versions")
# memfs's extensions of one store (docs/API.md, "Version counter extensions")
store_counter_path = _of_store("counter")
changes_path = _of_store("changes")
snapshot_path = _of_store("snapshot")
batch_path = _of_store("memory_batch")


def memory_path(store_id: str, memory_id: str) -> str:
    return f"{memories_path(store_id)}/{memory_id}"


def session_path(session_id: str) -> str:
    return f"{SESSIONS_PATH}/{session_id}"
