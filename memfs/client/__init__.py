"""The store client: the API's calls, their transport, the listing, the snapshot stream, errors.

The sync engine takes it through its `StoreApi` port (memfs/sync/ports.py); the session layer builds
it. The modules, one job each:

- `api`: `StoreClient`, the API's calls and how a request is sent (slots, the client-wide hold,
  retries on a short retry-after).
- `listing`: the prefix listing (one walk of a store), its pages as parsed, and the last basic
  listing kept for the next tick.
- `records`: what the calls return that the engine reads (`Listing`, `Changes`, `Change`).
- `transport`: the connection pools (through the environment's proxy); `plain_get`: the listing
  pages' plain HTTP/1.1 GET; `egress`: which proxy, from the environment.
- `snapshot_receive`: a streamed snapshot received on trio; `snapshot_stream`: its lines parsed
  and stored (also the mount's early download's).
- `errors`: `ApiError`, `Unreachable`; `budget`: the request budget and the pacer (the service's
  limit mirrored, or what a 429 taught); `turns`: whose turn it is to send when paced;
  `work_secret`: the sessions token inside a work secret.

`errors`, `egress`, `snapshot_stream` and `work_secret` import nothing heavy: `memfs mount` and
the forked daemon use them before trio and httpx are imported (those are imported beside the early
download, memfs/session/early_fetch.py). So this package's names are imported when first asked
for (PEP 562), not by `import memfs.client.errors`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memfs.client.api import CONCURRENCY as CONCURRENCY
    from memfs.client.api import RATE_RETRIES as RATE_RETRIES
    from memfs.client.api import StoreClient as StoreClient
    from memfs.client.errors import ApiError as ApiError
    from memfs.client.errors import Unreachable as Unreachable
    from memfs.client.records import Change as Change
    from memfs.client.records import Changes as Changes
    from memfs.client.records import Listing as Listing

# public name -> the module that holds it
_HOMES = {
    "CONCURRENCY": "api",
    "RATE_RETRIES": "api",
    "StoreClient": "api",
    "ApiError": "errors",
    "Unreachable": "errors",
    "Change": "records",
    "Changes": "records",
    "Listing": "records",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"memfs.client.{home}"), name)
