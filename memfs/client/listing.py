"""A listing's pages as parsed (`Page`), and a store's last basic listing kept for the next tick
(`LastListing`): the page reuse of `StoreClient.list_memories` (memfs/client/api.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from memfs.client.errors import Unreachable

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


def keep_listing(listings: dict[str, LastListing], store_id: str, kept: LastListing) -> None:
    """Keep a store's last basic listing for the next one, within LISTINGS_KEPT memories
    for all stores together (a store whose listing does not fit keeps none)."""
    listings.pop(store_id, None)
    total = sum(len(k.items) for k in listings.values())
    if total + len(kept.items) <= LISTINGS_KEPT:
        listings[store_id] = kept
