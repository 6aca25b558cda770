"""What `memfs serve --hosted-api` adds to behave as the hosted API does where a client can see it.

The hosted API leaves two things open that a client must survive either way, and the emulator has
a switch for each (docs/API.md, "The hosted-API emulator"):
- whether a session token may read a store's `memory_versions` (`--session-versions refuse`: 403);
- whether a version's `created_at` follows commit order (`--test-late-versions`: a write carrying
  `memfs-test-backdate-seconds: S` is recorded S seconds in the past, so it becomes visible behind
  versions created after it, as a late commit would).
The per-organisation rate limits are in orglimit.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from starlette.requests import Request

from memfs.service.auth import Principal
from memfs.service.errors import invalid, permission

BACKDATE_HEADER = "memfs-test-backdate-seconds"
# A day: further back than any overlap window a client would use, yet a time the retention job
# (30 days) keeps; a bigger value is more likely a mistake than a test.
MAX_BACKDATE_S = 86400.0


@dataclass(frozen=True)
class HostedOptions:
    session_versions: bool = True  # --session-versions allow (True) | refuse
    late_versions: bool = False  # --test-late-versions

    def backdate(self, request: Request) -> float:
        """Seconds to record a write in the past: the header's value under --test-late-versions,
        else 0 (without the flag the header is ignored, as the hosted API would ignore it)."""
        if not self.late_versions:
            return 0.0
        raw = request.headers.get(BACKDATE_HEADER)
        if raw is None:
            return 0.0
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not (math.isfinite(value) and 0 <= value <= MAX_BACKDATE_S):
            raise invalid(f"{BACKDATE_HEADER}: seconds between 0 and {MAX_BACKDATE_S:g} (got {raw!r})")
        return value

    def check_versions(self, p: Principal) -> None:
        """403 for a session token's version read under --session-versions refuse (the caller has
        checked the store is the session's first: a store not attached stays a 404)."""
        if p.session is not None and not self.session_versions:
            raise permission(
                "a session token may not read memory versions on this service (--session-versions refuse)"
            )
