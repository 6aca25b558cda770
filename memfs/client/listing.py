"""The prefix listing of `StoreClient.list_memories` (memfs/client/api.py), which says how it walks
a store: one run of it (`ListingWalk`), a page as parsed (`Page`), and a store's last basic
listing kept for the next tick (`LastListing`), whose pages a later listing reuses."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import quote

import httpx
import orjson
import trio

from memfs.client.errors import Unreachable
from memfs.client.records import Listing
from memfs.protocol import memories_path

BASIC_LIMIT = 100  # the API's page sizes: basic view, full view
FULL_LIMIT = 20

# Memories of the stores' last basic listings kept for the next tick (`LastListing`): ~1.4 KB
# each (the parsed item and its share of the page's bytes), so ~35 MB at most.
LISTINGS_KEPT = 25_000


class Page(NamedTuple):
    """One listing page as parsed: what `list_memories` takes from it. `body` is the answer's
    bytes (decoded) for a basic page that a later tick may compare against, else empty."""

    body: bytes
    data: list[dict[str, Any]]  # the page's items as the API gave them (memories and prefixes)
    memories: list[dict[str, Any]]  # its memories, in the page's order
    ids: list[str]  # their ids
    distinct: bool  # no id twice within the page
    prefixes: list[str]  # the paths of its `memory_prefix` roll-ups
    next_page: str | None


def parse_page(url: str, body: bytes, *, keep_body: bool) -> Page:
    try:
        page = orjson.loads(body)  # full-view pages are a first download's bulk
    except ValueError as exc:
        raise Unreachable(f"GET {url}: answer is not JSON") from exc
    data = page["data"]
    memories: list[dict[str, Any]] = []
    prefixes: list[str] = []
    for item in data:
        kind = item.get("type")
        if kind == "memory":
            memories.append(item)
        elif kind == "memory_prefix":
            prefixes.append(item["path"])
    ids = [m["id"] for m in memories]
    return Page(
        body if keep_body else b"",
        data,
        memories,
        ids,
        len(set(ids)) == len(ids),
        prefixes,
        page.get("next_page"),
    )


@dataclass
class LastListing:
    """A store's last basic listing (SEMANTICS.md#d-no-counter: every hosted tick lists every
    store): its pages by request, and its memories in path order. A page whose answer is
    byte for byte the one this listing got is taken as parsed then: equal bytes are an equal
    answer (orjson is a pure function of them), so no change can hide behind it. A listing
    whose every page is one of these, the same requests, has these memories: it is given the
    same sorted list, which lets the reader know an unchanged store without comparing 2,000
    memories again (sync/remote.py)."""

    pages: dict[bytes, Page]  # the request's query -> its page
    items: list[dict[str, Any]]  # read-only: shared by every listing that reuses it


class ListingWalk:
    """One run of `StoreClient.list_memories` (which says how it walks a store): the requests it
    sends (through `get`, the client's page GET), the pages it keeps, the prefixes it has
    started, as steps of that walk. `fresh`: the pages it parsed anew."""

    def __init__(
        self,
        get: Callable[[httpx.URL, bytes], Awaitable[tuple[bytes, str | None, str | None]]],
        base_url: str,
        store_id: str,
        view: str,
        known: dict[str, int],
        on_page: Callable[[list[dict[str, Any]]], Awaitable[None]] | None,
        last: LastListing | None,
        one_chain: Callable[[float], bool] | None = None,
    ):
        self.get = get
        self.one_chain = one_chain
        self.known = known
        self.on_page = on_page
        self.limit = BASIC_LIMIT if view == "basic" else FULL_LIMIT
        self.url = memories_path(store_id)
        # The pages' URL is parsed once here and each page's query put in by hand: passing
        # `params` made httpx parse (and scan character by character) the whole URL three times
        # per request, ~0.3 ms of the daemon's CPU each (0.7 ms -> 0.4 ms per request in all).
        self.endpoint = httpx.URL(base_url + self.url)
        self.head = f"view={view}&limit={self.limit}&depth="
        self.children: dict[str, list[str]] = {}
        for prefix in known:
            if prefix != "/":
                self.children.setdefault(prefix[: prefix.rstrip("/").rfind("/") + 1], []).append(prefix)
        self.listing = Listing()
        self.seen: set[str] = set()
        self.started: set[str] = set()
        self.basic = view == "basic"
        self.last_pages = last.pages if last is not None else {}
        self.used: dict[bytes, Page] = {}
        self.fresh = 0  # pages parsed anew (not as the last listing had them)
        # Nothing known of the store (a first download, or a store last seen empty): a cursor
        # chain of whole pages per top-level prefix, concurrently, after one probe of "/" (which
        # is the whole store when it fits in a page). Splitting every large prefix blind cost a
        # probe page each, thrown away, and the depth-1 pages: a first download of 8 x 2,000
        # memories was 1,414 requests where 800 pages hold it (the official worker's count);
        # against an organisation's rate limit requests are the time too. A chain per top-level
        # prefix costs the probe, "/"'s depth-1 pages and one part-filled page per prefix, and
        # keeps a store's download concurrent.
        self.whole = not known.get("/", 0)
        # Unless the client's rate, not round trips, bounds the download (`one_chain`, given the
        # probe's round trip, says so: a paced client with enough stores downloading at once to
        # keep its rate with one chain each): then the store is paged whole from the probe on, the
        # official worker's way, with no page wasted (against a limit every request is time: the
        # probe, the root's pages and the part-filled pages were 96 of 896 for 8 x 2,000).

    async def page(self, prefix: str, depth: int, cursor: str | None) -> Page:
        query = self.head + str(depth)
        if prefix != "/":  # percent-encoded whole (a path may hold "&", "+", "#", "%", spaces)
            query += "&path_prefix=" + quote(prefix, safe="/")
        if cursor:
            query += "&page=" + quote(cursor, safe="")
        key = query.encode("ascii")
        content, counter, date = await self.get(self.endpoint, key)
        self.listing.requests += 1
        if counter is not None:
            self.listing.counters.add(int(counter))
        if date is not None:
            self.listing.heard_date(date)
        got = self.last_pages.get(key)
        if got is None or got.body != content:
            self.fresh += 1
            got = parse_page(self.url, content, keep_body=self.basic)
        if self.basic:
            self.used[key] = got
        return got

    def keep(self, got: Page) -> None:
        """A page's memories (a tick's listing is 16,000 of them: set operations, not a loop)."""
        ids = got.ids
        seen = self.seen
        if not got.distinct:
            for mid in ids:
                if mid in seen:
                    self.listing.duplicates.add(mid)
                seen.add(mid)
        else:
            if not seen.isdisjoint(ids):
                self.listing.duplicates.update(seen.intersection(ids))
            seen.update(ids)
        self.listing.items.extend(got.memories)

    async def take(self, got: Page) -> None:
        """A page's memories kept, then handed to `on_page` (before its prefix's next page is asked)."""
        self.keep(got)
        if self.on_page is not None:
            await self.on_page(got.data)

    def start(self, prefix: str, nursery: trio.Nursery) -> None:
        if prefix not in self.started:
            self.started.add(prefix)
            nursery.start_soon(self.subtree, prefix, nursery)

    async def subtree(self, prefix: str, nursery: trio.Nursery) -> None:
        size = self.known.get(prefix, 0)
        if self.whole or size <= 2 * self.limit:
            asked = trio.current_time()
            got = await self.page(prefix, 0, None)
            # small, known to be worth paging whole, or a top-level prefix of a store nothing
            # is known of (`whole`: "/" alone is split, when its probe is not all of it, and
            # when the rate does not make one chain as fast)
            if (
                not got.next_page
                or 0 < size
                or (self.whole and prefix != "/")
                or (self.whole and self.one_chain is not None and self.one_chain(trio.current_time() - asked))
            ):
                await self.page_whole(prefix, got)
                return
        await self.split(prefix, nursery)

    async def page_whole(self, prefix: str, got: Page) -> None:
        """A prefix paged whole (depth 0), from its first page `got` on."""
        while True:
            await self.take(got)
            if not got.next_page:
                return
            got = await self.page(prefix, 0, got.next_page)

    async def split(self, prefix: str, nursery: trio.Nursery) -> None:
        """A prefix's direct children page by page (depth 1), each sub-prefix started as it is
        named (the known ones at once)."""
        for sub in self.children.get(prefix, ()):
            self.start(sub, nursery)
        cursor = None
        while True:
            got = await self.page(prefix, 1, cursor)
            for sub in got.prefixes:
                self.start(sub, nursery)
            await self.take(got)
            cursor = got.next_page
            if not cursor:
                return

    def unchanged(self) -> bool:
        """The same requests got the same answers as the last listing: the same memories, already
        in path order."""
        return (
            not self.fresh
            and len(self.used) == len(self.last_pages)
            and all(self.last_pages.get(key) is got for key, got in self.used.items())
        )


def keep_listing(listings: dict[str, LastListing], store_id: str, kept: LastListing) -> None:
    """Keep a store's last basic listing for the next one, within LISTINGS_KEPT memories
    for all stores together (a store whose listing does not fit keeps none)."""
    listings.pop(store_id, None)
    total = sum(len(k.items) for k in listings.values())
    if total + len(kept.items) <= LISTINGS_KEPT:
        listings[store_id] = kept
