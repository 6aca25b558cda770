"""Which requests the relay answers from its cache, which it writes through, which it passes on.

Pure: a method, a path and a query in; a `Routed` out. The cache serves the reads a mount makes
(memory listings and reads, and memfs's extensions: counters, watch, changes, snapshot); writes to
memories go to the upstream with the caller's own credential and, once accepted, into the cache;
everything else (stores, versions, sessions, work, events, anything new) passes through unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs

from memfs.protocol import COUNTERS_PATH, STORES_PATH, WATCH_PATH

Kind = Literal["cached", "write", "pass", "local"]

_STORE = re.compile(STORES_PATH + r"/([^/]+)(/.*)?$")
_CACHED_TAILS = re.compile(r"^/(memories(/[^/]+)?|counter|changes|snapshot)$")
_WRITE_TAILS = re.compile(r"^/(memories(/[^/]+)?|memory_batch)$")
LOCAL_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
STATUS_PATH = "/v1/relay_status"


@dataclass(frozen=True)
class Routed:
    kind: Kind
    store_ids: tuple[str, ...] = ()
    watch: bool = False  # a held watch: kept current like any use, but it does not wait on a download


def route(method: str, path: str, query: str) -> Routed:
    if path in LOCAL_PATHS or path == STATUS_PATH:
        return Routed("local")
    if method == "GET" and path == COUNTERS_PATH:
        ids = _ids(_first(query, "ids").split(","))
        return Routed("cached", ids) if ids else Routed("pass")
    if method == "GET" and path == WATCH_PATH:
        ids = _ids([item.rsplit(":", 1)[0] for item in _first(query, "known").split(",")])
        return Routed("cached", ids, watch=True) if ids else Routed("pass")
    m = _STORE.match(path)
    if m is None or not m.group(2):
        return Routed("pass")
    store_id, tail = m.group(1), m.group(2)
    if method == "GET" and _CACHED_TAILS.match(tail):
        return Routed("cached", (store_id,))
    if method in ("POST", "DELETE") and _WRITE_TAILS.match(tail):
        if tail == "/memory_batch" and method != "POST":
            return Routed("pass")
        return Routed("write", (store_id,))
    return Routed("pass")


def _first(query: str, name: str) -> str:
    values = parse_qs(query, keep_blank_values=True).get(name)
    return values[0] if values else ""


def _ids(ids: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i for i in (s.strip() for s in ids) if i))
