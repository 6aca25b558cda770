"""Whether this worker still holds the work item's lease when the session's tools are closed.

The runner closes the tools (and so runs the final sync) on every way out: a clean end, a stop
asked by the platform, SIGTERM, and a lost lease. Only the last must not push: the item then
belongs to another worker whose mount may already be writing the same memories. The worker's own
lease object is local to `_handle_item`, so memfs watches what the worker sees instead: the answers
to its heartbeats, on the httpx client every sub-client of the worker shares.

The rules are the installed SDK's (memfs/worker/_sdk.py, LEASE_RULES): a heartbeat answered 412
means the lease belongs to someone else; from anthropic 2.16 any other 4xx that its retry policy
calls fatal (all but 408, 409, 429) ends the lease as lost too. No successful heartbeat for a whole
lease TTL (before the first answer: the SDK's assumed TTL, 90 s in 2.10, 300 s in 2.16) means it
must be assumed lost.
"""

from __future__ import annotations

import json
import logging
import re
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from memfs.protocol import ENVIRONMENTS_PATH
from memfs.worker._sdk import LEASE_RULES, http_client_of

log = logging.getLogger("memfs.worker")

_HEARTBEAT = re.compile(re.escape(ENVIRONMENTS_PATH) + r"/[^/]+/work/([^/]+)/heartbeat$")
DEFAULT_TTL = LEASE_RULES.ttl_before_first_answer  # until the first answer tells the real TTL
_RETRYABLE_4XX = frozenset({408, 409, 429})  # the SDK's retry policy: these never end a lease
_watches: weakref.WeakKeyDictionary[Any, LeaseWatch] = weakref.WeakKeyDictionary()


@dataclass
class _Beat:
    last_ok: float
    ttl: float = DEFAULT_TTL
    failing_since: float | None = None
    lost: bool = False


@dataclass
class LeaseWatch:
    installed_at: float = field(default_factory=time.monotonic)
    beats: dict[str, _Beat] = field(default_factory=dict)
    latest: str | None = None  # the work item whose heartbeat was seen last

    async def on_response(self, response: Any) -> None:
        try:
            await self._on_response(response)
        except Exception:  # a hook must never break the worker's own request
            log.exception("lease watch: cannot read a heartbeat answer")

    async def _on_response(self, response: Any) -> None:
        m = _HEARTBEAT.search(response.request.url.path)
        if m is None:
            return
        work_id = m.group(1)
        now = time.monotonic()
        beat = self.beats.setdefault(
            work_id, _Beat(last_ok=now if response.is_success else self.installed_at)
        )
        self.latest = work_id
        if response.status_code == 412 or (
            LEASE_RULES.lost_on_any_fatal_4xx
            and 400 <= response.status_code < 500
            and response.status_code not in _RETRYABLE_4XX
        ):
            beat.lost = True
            return
        if not response.is_success:
            beat.failing_since = beat.failing_since or now
            return
        beat.last_ok, beat.failing_since = now, None
        try:
            await response.aread()
            ttl = float(json.loads(response.content).get("ttl_seconds") or 0)
        except (ValueError, TypeError, AttributeError):
            return
        if ttl > 0:
            beat.ttl = ttl

    def lost(self, work_id: str | None = None) -> bool:
        """True once the item's lease is known or must be assumed to belong to someone else."""
        work_id = work_id or self.latest
        beat = self.beats.get(work_id) if work_id else None
        if beat is None:
            return False
        if beat.lost:
            return True
        return beat.failing_since is not None and time.monotonic() - beat.last_ok > beat.ttl


def watch(client: object) -> LeaseWatch | None:
    """The lease watch of the client's httpx client, installed on first use (None: no such client)."""
    http = http_client_of(client)
    if http is None:
        log.warning(
            "cannot watch the work item's lease: the client has no httpx client; "
            "the final sync will run even if the lease is lost"
        )
        return None
    existing = _watches.get(http)
    if existing is not None:
        return existing
    w = LeaseWatch()
    hooks = dict(http.event_hooks)
    hooks["response"] = [*hooks.get("response", []), w.on_response]
    http.event_hooks = hooks
    _watches[http] = w
    return w
