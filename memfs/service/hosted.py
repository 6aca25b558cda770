"""What `memfs serve --hosted-api` adds to behave as the hosted API does where a client can see it.

The hosted API leaves two things open that a client must survive either way, and the emulator has
a switch for each (docs/API.md, "The hosted-API emulator"):
- whether a session token may read a store's `memory_versions` (`--session-versions refuse`: 403);
- whether a version's `created_at` follows commit order (`--test-late-versions`: a write carrying
  `memfs-test-backdate-seconds: S` is recorded S seconds in the past, so it becomes visible behind
  versions created after it, as a late commit would).
And where the hosted API is stricter than `memfs serve`, the emulator is too:
- a repeated update whose precondition no longer holds is 409 even when the store already holds
  what it asks for (`memfs serve` answers that retry 200: SEMANTICS.md#d-api);
and for tests of a client's retries it can answer the hosted API's 503s on demand
(`--test-unavailable`: a write carrying `memfs-test-unavailable: CODE[#LABEL]` is answered 503
`storage_not_ready` before anything is done, or `change_outcome_unknown` after its change was
saved; each distinct header value once, so the same request sent again goes through).
The per-organisation rate limits are in orglimit.py.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from starlette.requests import Request

from memfs.service.auth import Principal
from memfs.service.errors import ApiError, invalid, permission

BACKDATE_HEADER = "memfs-test-backdate-seconds"
UNAVAILABLE_HEADER = "memfs-test-unavailable"
# The hosted API's 503s a client must retry, with their messages (anthropic 2.17's error classes).
UNAVAILABLE = {
    "storage_not_ready": "This workspace isn't ready yet: it's still being connected to its storage. "
    "Try again in a minute.",
    "change_outcome_unknown": "Some of the request's changes may have been saved and others not. "
    "Send the same request again to finish it; changes already saved aren't repeated.",
}
_MAX_FAULTS = 10_000  # header values remembered (a test switch: a bound, not a feature)
# A day: further back than any overlap window a client would use, yet a time the retention job
# (30 days) keeps; a bigger value is more likely a mistake than a test.
MAX_BACKDATE_S = 86400.0


@dataclass(frozen=True)
class HostedOptions:
    session_versions: bool = True  # --session-versions allow (True) | refuse
    late_versions: bool = False  # --test-late-versions
    # A landed update sent again (its precondition names the old sha) is 409, as on the hosted API;
    # False: 200 when the store already holds what it asks for (memfs serve, SEMANTICS.md#d-api).
    repeat_conflicts: bool = False  # --hosted-api
    unavailable: bool = False  # --test-unavailable
    _faults_seen: set[str] = field(default_factory=set, compare=False, repr=False)
    _faults_lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

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

    def fault(self, request: Request) -> str | None:
        """The 503 this write is to be answered with under --test-unavailable (`storage_not_ready`:
        before anything is done; `change_outcome_unknown`: after its change was saved), or None.
        Each distinct header value answers once: the same request sent again goes through."""
        if not self.unavailable:
            return None
        raw = request.headers.get(UNAVAILABLE_HEADER)
        if raw is None:
            return None
        code = raw.split("#", 1)[0].strip()
        if code not in UNAVAILABLE:
            raise invalid(f"{UNAVAILABLE_HEADER}: one of {', '.join(sorted(UNAVAILABLE))} (got {raw!r})")
        with self._faults_lock:
            if raw in self._faults_seen or len(self._faults_seen) >= _MAX_FAULTS:
                return None
            self._faults_seen.add(raw)
        return code


def unavailable(code: str) -> ApiError:
    """The hosted API's 503 with its `error_code` (what anthropic 2.17 maps to its error classes)."""
    return ApiError(503, "api_error", UNAVAILABLE[code], details={"error_code": code})
