"""Which requests the relay answers from its cache, which it writes through, which it passes on.

Pure: a method, a path and a query in; a `Routed` out. The cache serves the reads a mount makes
(memory listings and reads, and memfs's extensions: counters, watch, changes, snapshot); writes to
memories go to the upstream with the caller's own credential and, once accepted, into the cache;
everything else (stores, versions, sessions, work, events, anything new) passes through unchanged.

Every store id the cache's app would read is named in `Routed.store_ids` (each is checked against
the caller's credential): repeated `ids` and `known` parameters are read with the service's own
functions (memfs/service/request.py), as the cache's app reads them; a query those refuse, or with
more ids than the service takes, is not the cache's to answer and passes through. A path with a
`.` or `..` segment (the ASGI path is percent-decoded: `%2e%2e` is one too) is refused: it would
name something else upstream than here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from memfs.protocol import COUNTERS_PATH, RELAY_STATUS_PATH, STORES_PATH, WATCH_PATH
from memfs.service.request import MAX_COUNTER_IDS, counter_ids, known_counters, query_pairs

Kind = Literal["cached", "write", "pass", "local", "invalid"]

_STORE = re.compile(STORES_PATH + r"/([^/]+)(/.*)?$")
_CACHED_TAILS = re.compile(r"^/(memories(/[^/]+)?|counter|changes|snapshot)$")
_WRITE_TAILS = re.compile(r"^/(memories(/[^/]+)?|memory_batch)$")
LOCAL_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
STATUS_PATH = RELAY_STATUS_PATH


@dataclass(frozen=True)
class Routed:
    kind: Kind
    store_ids: tuple[str, ...] = ()
    watch: bool = False  # a held watch: kept current like any use, but it does not wait on a download


def route(method: str, path: str, query: str) -> Routed:
    """`path`: the ASGI scope's (percent-decoded); `query`: its query string, latin-1."""
    if dot_segment(path):
        return Routed("invalid")
    if path in LOCAL_PATHS or path == STATUS_PATH:
        return Routed("local")
    if method == "GET" and path == COUNTERS_PATH:
        ids = counter_ids(_all(query, "ids"))
        return Routed("cached", tuple(ids)) if 0 < len(ids) <= MAX_COUNTER_IDS else Routed("pass")
    if method == "GET" and path == WATCH_PATH:
        try:
            known = known_counters(_all(query, "known"))
        except ValueError:
            return Routed("pass")
        return (
            Routed("cached", tuple(known), watch=True)
            if 0 < len(known) <= MAX_COUNTER_IDS
            else Routed("pass")
        )
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


def dot_segment(path: str) -> bool:
    return any(seg in (".", "..") for seg in path.split("/"))


def _all(query: str, name: str) -> list[str]:
    """Every value of the parameter, as the service's app reads the query (`request.query_pairs`)."""
    return [value for key, value in query_pairs({"query_string": query.encode("latin-1")}) if key == name]
