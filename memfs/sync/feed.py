"""Change detection from the hosted API's version feed (SEMANTICS.md#d-no-counter).

The hosted API has no counter, but it records one version per write (creates, edits, renames,
deletes) in `GET …/memory_versions`, newest first, filterable by `created_at[gte]`. A store's
tick asks for the versions since the newest one it has applied, minus an overlap window, and
drops the ids it has already seen: nothing new is one request per store and nothing else.

Why an overlap, and why it is OVERLAP_SECONDS: `created_at` is stamped when a write begins, and a
write may become visible after one stamped later (two writers, a slow commit): a reader at the
newest `created_at` it saw would skip it for good. Asking again from some time before, and
dropping what was seen, catches every version that turns up within that window of a later one.
Two minutes is far longer than any request the API lets run (a write's timeout is ~60 s), so a
write that commits late but normally is in the window; what falls outside it (a clock step on
the service, a stuck transaction) is settled by the safety net (schedule.py): one store per period
reads its feed over the last hour (WIDE_SECONDS) instead of the overlap, and, much more rarely,
one store is listed whole (for what no window sees: a clock step).

Why an hour: a real service's late commit lands within seconds (at most a write's ~60 s timeout);
an hour is thirty times the overlap and still, for a store that is not being written in bulk,
one request. A read stops at the page that reaches behind its previous position when every version
there behind it was seen (`_covered`): nothing new right after a burst of writes is one request too.

Which version of a memory counts: its newest one in the answer (not only among the new ones): a
late version of a memory that has a newer one already applied must not take it back.
"""

from __future__ import annotations

import email.utils
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from memfs.client.errors import ApiError
from memfs.records import FeedPosition
from memfs.sync.ports import StoreApi

log = logging.getLogger("memfs.sync")

OVERLAP_SECONDS = 120.0  # see the module's docstring
WIDE_SECONDS = 3600.0  # the safety net's wide window (see the module's docstring)
PAGE = 100  # versions per page (basic view); the API's documented maximum is not known, 100 is safe
FULL_PAGE = 20  # versions per page with their content (view=full): the API's documented maximum
RETENTION_DAYS = 30.0  # the hosted API keeps non-current versions this long
RETENTION_MARGIN_DAYS = 1.0  # a position older than retention minus this: list instead
SEEN_KEPT = 10_000  # ids a position keeps seen when a read stopped before the overlap's end (`_covered`)
REFUSED_RETRY_SECONDS = 3600.0  # a feed refused (403/404) to the session's token is asked again this rarely


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def format_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def served_at(date: str | None) -> str | None:
    """The service's clock when it answered (its `Date` header, to the second), as a position."""
    try:
        return format_time(email.utils.parsedate_to_datetime(date)) if date else None
    except (TypeError, ValueError):
        return None


def _key(v: dict[str, Any]) -> tuple[str, str]:
    """The feed's order: `created_at`, then id. The time is put in one format (microseconds, Z),
    so that it compares as text with the positions and with every other version's."""
    at = v.get("created_at")
    try:
        at = format_time(parse_time(at)) if at else ""
    except ValueError:
        at = ""
    return (at, v.get("id") or "")


def _covered(page: list[dict[str, Any]], at: FeedPosition) -> bool:
    """A page that reaches back behind the previous position, whose versions behind it were all
    seen already: every version newer than that position is then in the pages read (the feed is
    newest first), and the rest of the overlap was read before. Paging on would re-read a whole
    burst of writes at every tick for as long as it is in the overlap; a version that turns up
    late deeper in it is the wide window's to settle (the safety net, schedule.py)."""
    if not page or not at.position:
        return False
    position = format_time(parse_time(at.position))
    if _key(page[-1])[0] >= position:
        return False
    return all(v.get("id") in at.seen for v in page if _key(v)[0] < position)


@dataclass
class FeedRead:
    """What one store's feed said. `versions` is None when the store must be listed instead
    (the feed refused, the position older than retention, more versions than a listing costs);
    `position` is what to record once what was read is applied (None: nothing to record)."""

    versions: list[dict[str, Any]] | None
    position: FeedPosition | None
    fresh: set[str] = field(default_factory=set)  # memories with a version not seen before
    requests: int = 0

    def newest_by_memory(self) -> dict[str, dict[str, Any]]:
        """memory id -> its newest version in the answer, for every memory with a new version."""
        out: dict[str, dict[str, Any]] = {}
        for v in self.versions or ():  # newest first
            if v["memory_id"] in self.fresh:
                out.setdefault(v["memory_id"], v)
        return out


@dataclass
class VersionFeed:
    """Reads the stores' version feeds through the client. `refused_until`: store id ->
    time.monotonic() before which its feed is not asked again (it answered 403/404)."""

    client: StoreApi
    overlap: float = OVERLAP_SECONDS
    wide: float = WIDE_SECONDS
    refused_until: dict[str, float] = field(default_factory=dict)
    # Read the versions with their content (view=full, 20 a page), except over the wide window
    # (an hour of versions: 100 a page): a new version's content then comes with the read that
    # finds it, not in a GET of its own. A read that finds nothing new is one request either way.
    full: bool = False

    def refused(self, store_id: str) -> bool:
        return time.monotonic() < self.refused_until.get(store_id, 0.0)

    def _refuse(self, store_id: str, exc: ApiError) -> None:
        self.refused_until[store_id] = time.monotonic() + REFUSED_RETRY_SECONDS
        log.info(
            "the version feed of %s is refused to this token (%s): it is listed instead; asked again in %.0fs",
            store_id,
            exc,
            REFUSED_RETRY_SECONDS,
        )

    async def _pages(
        self, store_id: str, since: str | None, most: int, at: FeedPosition | None = None
    ) -> tuple[list[dict[str, Any]], bool, int, str | None, bool]:
        """The versions from `since` (all without it), newest first: (versions, complete, requests,
        the service's time at the first page, whether paging stopped at a covered page). Not complete: more than `most` (a listing is cheaper).
        `at`: the previous position; paging stops at a page that reaches back behind it with every
        version there behind it already seen (`_covered`)."""
        params: dict[str, str | int] = {"limit": PAGE}
        if self.full and at is not None:  # not the wide window (`read` passes no `at` for it)
            params = {"limit": FULL_PAGE, "view": "full"}
        if since is not None:
            params["created_at[gte]"] = since
        out: list[dict[str, Any]] = []
        requests = 0
        served = None
        while True:
            page, date = await self.client.list_versions(store_id, params)
            if requests == 0:
                served = served_at(date)
            requests += 1
            data = page.get("data") or []
            out.extend(data)
            cursor = page.get("next_page")
            if not cursor:
                return out, True, requests, served, False
            if at is not None and _covered(data, at):
                return out, True, requests, served, True
            if len(out) > most:
                return out, False, requests, served, False
            params = {**params, "page": cursor}

    def _position(
        self, versions: list[dict[str, Any]], before: FeedPosition | None, served: str | None
    ) -> FeedPosition | None:
        """The position after `versions` (newest first): the service's time when the feed was read
        (else the newest `created_at`), and the ids within the overlap behind it. The service's
        time, not only the newest version's: a store whose last writes came in a burst would
        otherwise have that whole burst read again at every tick for as long as nothing new came."""
        candidates = [_key(v)[0] for v in versions] + [served or ""]
        if before is not None:
            candidates.append(before.position)
        newest = max(candidates)
        if not newest:
            return before
        edge = format_time(parse_time(newest) - timedelta(seconds=self.overlap))
        return FeedPosition(newest, frozenset(v["id"] for v in versions if _key(v)[0] >= edge))

    def too_old(self, position: FeedPosition) -> bool:
        age = datetime.now(UTC) - parse_time(position.position)
        return age > timedelta(days=RETENTION_DAYS - RETENTION_MARGIN_DAYS)

    async def probe(self, store_id: str) -> FeedRead:
        """Before a listing: where the feed stands now (its newest versions), so that nothing written
        while the store is listed is missed by the next read. One request; no position when refused."""
        if self.refused(store_id):
            return FeedRead(None, None)
        try:
            # One page, not one version: the ids within the overlap are then known as seen, so the
            # next read does not take the writes just before the listing for new ones.
            page, date = await self.client.list_versions(store_id, {"limit": PAGE})
        except ApiError as exc:
            if exc.status not in (403, 404):
                raise
            self._refuse(store_id, exc)
            return FeedRead(None, None, requests=1)
        versions = page.get("data") or []
        # A store without a version (new, nothing written): the next read asks from the start.
        at = self._position(versions, None, served_at(date))
        return FeedRead(None, at or FeedPosition("", frozenset()), requests=1)

    async def read(
        self, store_id: str, at: FeedPosition | None, *, most: int, wide: float | None = None
    ) -> FeedRead:
        """The versions since `at` (minus the overlap): none new is one request. `most`: the
        number of versions past which listing the store is cheaper. `wide`: read this many seconds
        behind `at` instead, every page (the safety net's wide window, SEMANTICS.md#d-no-counter)."""
        if at is None or self.refused(store_id) or (at.position and self.too_old(at)):
            return await self.probe(store_id)
        back = self.overlap if wide is None else max(wide, self.overlap)
        since = format_time(parse_time(at.position) - timedelta(seconds=back)) if at.position else None
        try:
            versions, complete, requests, served, cut = await self._pages(
                store_id, since, most, None if wide else at
            )
        except ApiError as exc:
            if exc.status not in (403, 404):
                raise
            self._refuse(store_id, exc)
            return FeedRead(None, None, requests=1)
        position = self._position(versions, at, served)
        if cut and position is not None and len(position.seen) + len(at.seen) <= SEEN_KEPT:
            # The versions not read (older than the pages read) were seen before: they stay seen,
            # so that the next read, when something new comes, stops at them too.
            position = FeedPosition(position.position, position.seen | at.seen)
        if not complete:
            return FeedRead(None, position, requests=requests)
        fresh = {v["memory_id"] for v in versions if v["id"] not in at.seen}
        versions.sort(key=_key, reverse=True)
        return FeedRead(versions, position, fresh=fresh, requests=requests)


def listed_position(
    items: list[dict[str, Any]], served: float | None, overlap: float = OVERLAP_SECONDS
) -> FeedPosition | None:
    """Where a first download's listing leaves the store's version feed, without a request of its
    own (SEMANTICS.md#d-first-download): the service's clock at the listing's earliest page
    (`Listing.served`), and for seen, the versions the listing showed its memories at, within the
    overlap behind it. A version written after the listing read its memory is no older than that
    clock (less a page's own answer time, well inside the overlap), and is not one the listing
    showed: the next read takes it. None when the service said no time (the next pull then probes
    the feed and lists the store again)."""
    if served is None:
        return None
    at = datetime.fromtimestamp(served, UTC)
    edge = at - timedelta(seconds=overlap)
    seen = set()
    for m in items:
        version, updated = m.get("memory_version_id"), m.get("updated_at")
        try:
            if version and updated and parse_time(updated) >= edge:
                seen.add(version)
        except ValueError:
            pass
    return FeedPosition(format_time(at), frozenset(seen))
