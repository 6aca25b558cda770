"""A listing's pages, read in one transaction of a backend: the range of a `depth=0` page and the
walk of a `depth=1` page (the direct children of a prefix, each deeper subtree one roll-up), as
records (`list_page`, the routes, through the store service's rules) or as wire rows
(`list_page_wire`, the list fast path, inside `StoreService.read_checked`): each is called once
the rules have checked who may read the store."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from operator import attrgetter, itemgetter
from typing import Any, TypeVar

from memfs.service import wire
from memfs.service.sql_tx import SqlTx
from memfs.service.storage import MemoryRecord, Page, PrefixRecord

_WALK_ROWS = 16  # rows per query of a depth=1 walk (index entries: cheap to read past)
R = TypeVar("R")  # a row of a depth=1 walk: a record or a plain tuple


def upper_bound(prefix_with_slash: str) -> str:
    """Smallest string above every path under `prefix/` ('0' is the code point after '/')."""
    return prefix_with_slash[:-1] + "0"


def _resume(path_prefix: str, after: str | None) -> tuple[str, bool]:
    """Where a page starts: after the last item of the previous page; after a roll-up item, past
    its whole subtree. (lo, inclusive)."""
    if after is None:
        return path_prefix, True
    return (upper_bound(after), True) if after.endswith("/") else (after, False)


def _walk_children(
    rows_from: Callable[[str, bool], Sequence[R]],
    path_of: Callable[[R], str],
    path_prefix: str,
    lo: str,
    inclusive: bool,
    limit: int,
    memory: Callable[[R], Any],
    prefix: Callable[[str], Any],
) -> list:
    """A `depth=1` page's items, up to `limit + 1`: the direct children of `path_prefix` in path
    order, each deeper subtree one roll-up (`prefix(sub)`), skipped at once. The walk reads no
    content (a page of 20 full-view roll-ups read 20 whole memories only to name their prefixes)
    and a few rows per query (`rows_from(lo, inclusive)`): a run of direct children is one query,
    not one each, and a roll-up skips the rest of its subtree in the rows already read. Shared by
    the records' page (`list_page`) and the wire rows' (`list_page_wire`)."""
    items: list = []
    while len(items) <= limit:
        rows = rows_from(lo, inclusive)
        if not rows:
            break
        for row in rows:
            if len(items) > limit:
                break
            path = path_of(row)
            if path < lo or (path == lo and not inclusive):
                continue  # inside the subtree just rolled up
            rest = path[len(path_prefix) :]
            if "/" in rest:
                sub = path_prefix + rest.split("/", 1)[0] + "/"
                items.append(prefix(sub))
                lo, inclusive = upper_bound(sub), True
            else:
                items.append(memory(row))
                lo, inclusive = path, False
    return items


def list_page(
    tx: SqlTx, store_id: str, path_prefix: str, depth: int, limit: int, after: str | None, with_content: bool
) -> Page:
    """One page of a listing, read in `tx` (StoreService.list_memories, list_memories_as; the
    caller has checked that the store exists)."""
    hi = upper_bound(path_prefix)
    lo, inclusive = _resume(path_prefix, after)
    items: list = []
    counter = tx.counter(store_id)
    if depth == 0:
        items = tx.list_live(
            store_id, lo=lo, lo_inclusive=inclusive, hi=hi, limit=limit + 1, content=with_content
        )
    else:
        items = _walk_children(
            lambda lo, inc: tx.list_live(
                store_id, lo=lo, lo_inclusive=inc, hi=hi, limit=_WALK_ROWS, content=False
            ),
            attrgetter("path"),
            path_prefix,
            lo,
            inclusive,
            limit,
            lambda row: row,
            PrefixRecord,
        )
        if with_content:  # the page's memories, whole, in the same read transaction
            wanted = [i.id for i in items if isinstance(i, MemoryRecord)]
            content = tx.contents(store_id, wanted) if wanted else {}
            items = [
                dataclasses.replace(i, content=content[i.id]) if isinstance(i, MemoryRecord) else i
                for i in items
            ]
    nxt = None
    if len(items) > limit:
        items = items[:limit]
        nxt = items[-1].path
    return Page(items, nxt, counter)


def list_page_wire(
    tx: SqlTx,
    *,
    store_id: str,
    path_prefix: str,
    depth: int,
    limit: int,
    after: str | None,
    with_content: bool,
) -> tuple[list[dict], str | None]:
    """`list_page`'s items as wire JSON dicts and its `next_after`, read from plain rows
    (`live_rows`): the same walk, the same items, without a record per memory in between."""
    hi = upper_bound(path_prefix)
    lo, inclusive = _resume(path_prefix, after)
    memory_row = wire.memory_row
    items: list[dict] = []
    if depth == 0:
        rows = tx.live_rows(
            store_id, lo=lo, lo_inclusive=inclusive, hi=hi, limit=limit + 1, content=with_content
        )
        items = [memory_row(store_id, r, r[7] if with_content else None) for r in rows]
    else:
        items = _walk_children(
            lambda lo, inc: tx.live_rows(
                store_id, lo=lo, lo_inclusive=inc, hi=hi, limit=_WALK_ROWS, content=False
            ),
            itemgetter(1),
            path_prefix,
            lo,
            inclusive,
            limit,
            lambda row: memory_row(store_id, row, None),
            wire.prefix,
        )
    nxt = None
    if len(items) > limit:
        items = items[:limit]
        nxt = items[-1]["path"]
    if with_content and depth != 0:  # the page's memories, whole, in the same read transaction
        wanted = [i["id"] for i in items if i["type"] == "memory"]
        content = tx.contents(store_id, wanted) if wanted else {}
        for i in items:
            if i["type"] == "memory":
                i["content"] = content[i["id"]]
    return items, nxt
