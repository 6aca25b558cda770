"""What the service reads from a request, read once and the same way for every path.

The routes (memfs/service/routes/, through Starlette's `Request`) and the fast paths (counter_path.py,
list_path.py, straight from the ASGI scope) read the credential, the beta header, the store id
and the query parameters here, so the two cannot read a request differently: a fast path only
answers what the full path would have answered the same way (tests/service/test_list_route.py
compares their bytes). Also here: the route names the metrics read, the limits both read the
query with, and the request ids.
"""

from __future__ import annotations

import itertools
import secrets
from urllib.parse import parse_qsl

from memfs.protocol import API_KEY_HEADER, BETA_HEADER, MEMORY_BETA, SESSIONS_BETA, STORES_PATH

MAX_COUNTER_IDS = 100  # store ids per counters request or watch
DEFAULT_WATCH_WAIT_S = 30.0
MAX_WATCH_WAIT_S = 60.0

_STORES = STORES_PATH + "/"
_BETA = BETA_HEADER.encode()
_API_KEY = API_KEY_HEADER.encode()


class RouteName:
    """What the metrics read from `scope["route"]`: the route template (Starlette's routes carry
    the same attribute; a fast path sets one of these)."""

    __slots__ = ("path",)

    def __init__(self, path: str):
        self.path = path


def betas(scope) -> set[str]:
    """The `anthropic-beta` values of every such header, comma-separated."""
    out: set[str] = set()
    for name, value in scope["headers"]:
        if name == _BETA:
            out.update(v.strip() for v in value.decode("latin-1").split(",") if v.strip())
    return out


def memory_beta_ok(values: set[str]) -> bool:
    """The memory API's rule: exactly one of the memory beta and the agents beta."""
    return (MEMORY_BETA in values) != (SESSIONS_BETA in values)


def credential(scope) -> str | None:
    """The presented credential: the first `x-api-key` if not empty, else a `Bearer` token of the
    first `authorization` header (as Starlette's `headers.get` reads the first of a name)."""
    key = auth = None
    for name, value in scope["headers"]:
        if name == _API_KEY and key is None:
            key = value.decode("latin-1")
        elif name == b"authorization" and auth is None:
            auth = value.decode("latin-1")
    if key:
        return key
    scheme, _, value = (auth or "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def memory_credential(scope) -> str | None:
    """The credential of a memory-API request whose beta header is right (a fast path's check);
    None: the full path answers it (and says what is wrong)."""
    if not memory_beta_ok(betas(scope)):
        return None
    return credential(scope)


def store_id(path: str, suffix: str) -> str | None:
    """The `{store_id}` of `/v1/memory_stores/{store_id}<suffix>`, or None when `path` is not one."""
    if not path.startswith(_STORES) or not path.endswith(suffix):
        return None
    sid = path[len(_STORES) : len(path) - len(suffix)]
    return sid if sid and "/" not in sid else None


def query_pairs(scope) -> list[tuple[str, str]]:
    """The query parameters as Starlette parses them: `parse_qsl` of the latin-1 query string,
    blank values kept, in order."""
    return parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)


class Query:
    """What `params.q_*` read from a request: its query parameters (the last of a repeated name
    wins, as in Starlette's `Request.query_params`) in a plain dict: they only `.get()` from it."""

    __slots__ = ("query_params",)

    def __init__(self, scope):
        self.query_params = dict(query_pairs(scope))


def counter_ids(values: list[str]) -> list[str]:
    """The store ids of `ids` parameters: comma-separated, blanks skipped, deduplicated in order."""
    ids: list[str] = []
    for raw in values:
        for sid in raw.split(","):
            sid = sid.strip()
            if sid and sid not in ids:
                ids.append(sid)
    return ids


def known_counters(values: list[str]) -> dict[str, int]:
    """The `STORE_ID:COUNTER` items of a watch's `known` parameters (comma-separated, blanks
    skipped), in order; ValueError (its message the 400's) for a malformed item or a store named
    twice. The watch route and the relay (which checks every store named) read them alike."""
    known: dict[str, int] = {}
    for raw in values:
        for item in raw.split(","):
            item = item.strip()
            if not item:
                continue
            sid, sep, value = item.rpartition(":")
            if not sep or not sid or not value.isdigit() or len(value) > 18:
                raise ValueError(f"known: expected STORE_ID:COUNTER items, comma-separated (got {item!r})")
            if sid in known:
                raise ValueError(f"known: memory store {sid} is named twice")
            known[sid] = int(value)
    return known


# Request ids: unique per process (a random prefix, then a sequence number), without a getrandom()
# syscall per request (~10-35 µs here, a few % of a counter read).
_REQUEST_ID_PREFIX = "req_" + secrets.token_hex(4)
_request_seq = itertools.count()


def next_request_id() -> str:
    return f"{_REQUEST_ID_PREFIX}{next(_request_seq):016x}"
