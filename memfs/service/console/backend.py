"""The console's only door to the service: the `StoreService` (rules.py) the API's handlers call,
with the input rules they apply.

Everything the console reads or writes goes through `ConsoleBackend`, so the console applies the
API's rules (path and content rules via `params`, preconditions, path conflicts, versions, the
counter, --max-memories) by construction, and a change of the service layer re-points this module
only. Every error comes out as an `ApiError` (the API's status, type and message), which the pages
show as they are. Methods are async: the blocking service calls run in worker threads. Listings
page by position; this module turns a position into the signed `page` token of a console URL and
back, with the API's own cursors (`cursors.py`), so a token edited in the address bar is a 400.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass

import anyio.to_thread

from memfs.service import params
from memfs.service.cursors import CursorError, Cursors
from memfs.service.errors import ApiError, from_storage, invalid
from memfs.service.rules import Snapshot, StoreService
from memfs.service.storage import (
    Actor,
    MemoryRecord,
    SessionRecord,
    StorageError,
    StoreRecord,
    StoreTotals,
    VersionFilter,
    VersionRecord,
)

LIST_PAGE = 100  # the API's largest page: what the console shows at once
_STORE_SCAN_MAX_PAGES = 1_000  # bound on a search through the list of stores


@dataclass
class ConsolePage:
    """One page of a listing as the console shows it: `next_page` is the token of the next one."""

    items: list
    next_page: str | None
    counter: int | None = None


class ConsoleBackend:
    def __init__(
        self, storage: StoreService, actor: Actor, max_memories: int, cursors: Cursors | None = None
    ):
        self._storage = storage
        self._cursors = cursors or Cursors(secrets.token_hex(16))
        self.actor = actor  # the admin key's api_actor: console writes are the admin's, like the API's
        self.max_memories = max_memories

    async def _call(self, fn, *args, **kwargs):
        try:
            return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
        except StorageError as e:
            raise from_storage(e) from None

    def _after(self, listing: tuple, token: str | None) -> str | int | None:
        try:
            return self._cursors.decode(listing, token)
        except CursorError as e:
            raise invalid(str(e)) from None

    def _page(self, listing: tuple, page) -> ConsolePage:
        return ConsolePage(page.items, self._cursors.encode(listing, page.next_after), page.counter)

    # --- input rules (the API's, from params) --------------------------------------------------

    @staticmethod
    def check_path(value: str, field: str = "path") -> str:
        return params.memory_path(value, field)

    @staticmethod
    def check_content(value: str) -> str:
        return params.memory_content(value)

    @staticmethod
    def check_prefix(value: str) -> str:
        """A browse prefix: '/' or a valid path followed by '/'."""
        if value in ("", "/"):
            return "/"
        if not value.startswith("/"):
            value = "/" + value
        if not value.endswith("/"):
            value += "/"
        params.memory_path(value[:-1], "prefix")
        return value

    # --- stores --------------------------------------------------------------------------------

    async def list_stores(self, *, page: str | None, include_archived: bool, limit: int = 50) -> ConsolePage:
        listing = ("console-stores", include_archived, limit)
        p = await self._call(
            self._storage.list_stores,
            limit=limit,
            after=self._after(listing, page),
            include_archived=include_archived,
            created_gte=None,
            created_lte=None,
        )
        return self._page(listing, p)

    async def search_stores(
        self, query: str, *, include_archived: bool, limit: int = 100
    ) -> tuple[list, bool]:
        """Stores whose name contains `query` (case-insensitive), newest first; (matches, more)."""
        return await self._call(self._search_stores, query.casefold(), include_archived, limit)

    def _search_stores(self, needle: str, include_archived: bool, limit: int) -> tuple[list, bool]:
        found: list[StoreRecord] = []
        after: int | None = None
        for _ in range(_STORE_SCAN_MAX_PAGES):
            p = self._storage.list_stores(
                limit=LIST_PAGE,
                after=after,
                include_archived=include_archived,
                created_gte=None,
                created_lte=None,
            )
            for s in p.items:
                if needle in s.name.casefold():
                    if len(found) == limit:
                        return found, True
                    found.append(s)
            if p.next_after is None:
                break
            after = int(p.next_after)  # a store listing resumes after a sequence number
        return found, False

    async def get_store(self, store_id: str) -> StoreRecord:
        return await self._call(self._storage.get_store, store_id)

    async def create_store(self, name: str, description: str) -> StoreRecord:
        name = params.store_name(name)
        description = params.store_description(description)
        return await self._call(self._storage.create_store, name, description, {})

    async def update_store(self, store_id: str, name: str, description: str) -> StoreRecord:
        name = params.store_name(name)
        description = params.store_description(description)
        return await self._call(
            self._storage.update_store, store_id, name=name, description=description, metadata_patch=None
        )

    async def archive_store(self, store_id: str) -> StoreRecord:
        return await self._call(self._storage.archive_store, store_id)

    async def delete_store(self, store_id: str) -> None:
        await self._call(self._storage.delete_store, store_id)

    async def counters(self, store_ids: list[str]) -> dict[str, int]:
        if not store_ids:
            return {}
        return await self._call(self._storage.get_counters, store_ids)

    async def store_stats(self, store_id: str) -> StoreTotals:
        """Counter, memories and bytes of one moment, from the service's indexed count (no walk)."""
        return await self._call(self._storage.store_totals, store_id)

    async def is_empty(self, store_id: str) -> bool:
        p = await self._call(
            self._storage.list_memories,
            store_id,
            path_prefix="/",
            depth=0,
            limit=1,
            after=None,
            with_content=False,
        )
        return not p.items

    async def sessions(self, store_id: str) -> list[SessionRecord]:
        return await self._call(self._storage.sessions_for_store, store_id)

    # --- memories ------------------------------------------------------------------------------

    async def browse(self, store_id: str, prefix: str, page: str | None) -> ConsolePage:
        """One page of the direct children of `prefix`: memories and roll-ups of deeper paths (depth=1)."""
        listing = ("console-browse", store_id, prefix)
        p = await self._call(
            self._storage.list_memories,
            store_id,
            path_prefix=prefix,
            depth=1,
            limit=LIST_PAGE,
            after=self._after(listing, page),
            with_content=False,
        )
        return self._page(listing, p)

    async def get_memory(self, store_id: str, memory_id: str) -> MemoryRecord:
        return await self._call(self._storage.get_memory, store_id, memory_id)

    async def create_memory(self, store_id: str, path: str, content: str) -> MemoryRecord:
        path, content = self.check_path(path), self.check_content(content)
        return await self._call(
            self._storage.create_memory, store_id, path, content, self.actor, max_memories=self.max_memories
        )

    async def update_memory(
        self, store_id: str, memory_id: str, *, content: str | None, path: str | None, expected_sha256: str
    ) -> MemoryRecord:
        """Always with the sha the person saw: a change made meanwhile is a 409, never overwritten."""
        content = None if content is None else self.check_content(content)
        path = None if path is None else self.check_path(path)
        expected = params.sha256(expected_sha256, "content_sha256")
        return await self._call(
            self._storage.update_memory,
            store_id,
            memory_id,
            content=content,
            path=path,
            expected_sha256=expected,
            actor=self.actor,
        )

    async def delete_memory(self, store_id: str, memory_id: str, expected_sha256: str) -> None:
        expected = params.sha256(expected_sha256, "content_sha256")
        await self._call(
            self._storage.delete_memory, store_id, memory_id, expected_sha256=expected, actor=self.actor
        )

    async def import_memories(self, store_id: str, items, *, drop_store_on_failure: bool) -> int:
        """Create every (path, content) of an already validated file; all or nothing.

        There is no multi-memory transaction in the API, so "nothing" is restored by undoing: a store
        made for this import is deleted again, otherwise the memories created so far are deleted.
        """
        return await self._call(self._import, store_id, items, drop_store_on_failure)

    def _import(self, store_id: str, items, drop_store: bool) -> int:
        created: list[MemoryRecord] = []
        try:
            for path, content in items:
                created.append(
                    self._storage.create_memory(
                        store_id, self.check_path(path), self.check_content(content), self.actor,
                        max_memories=self.max_memories,
                    )
                )  # fmt: skip
        except BaseException:
            if drop_store:
                self._storage.delete_store(store_id)
            else:
                for m in reversed(created):
                    try:
                        self._storage.delete_memory(
                            store_id, m.id, expected_sha256=m.content_sha256, actor=self.actor
                        )
                    except StorageError:  # changed by someone else meanwhile: theirs now, leave it
                        pass
            raise
        return len(created)

    # --- versions ------------------------------------------------------------------------------

    async def versions(
        self, store_id: str, *, memory_id: str | None, page: str | None, limit: int = 50
    ) -> ConsolePage:
        """Newest first, without content (a history page shows metadata; a version page its content)."""
        listing = ("console-versions", store_id, memory_id, limit)
        p = await self._call(
            self._storage.list_versions,
            store_id,
            filters=VersionFilter(memory_id=memory_id),
            limit=limit,
            after=self._after(listing, page),
            with_content=False,
        )
        return self._page(listing, p)

    async def latest_version(self, store_id: str, memory_id: str) -> VersionRecord | None:
        p = await self.versions(store_id, memory_id=memory_id, page=None, limit=1)
        return p.items[0] if p.items else None

    async def get_version(self, store_id: str, version_id: str) -> VersionRecord:
        return await self._call(self._storage.get_version, store_id, version_id)

    async def redact_version(self, store_id: str, version_id: str) -> VersionRecord:
        return await self._call(self._storage.redact_version, store_id, version_id, self.actor)

    # --- export --------------------------------------------------------------------------------

    async def open_snapshot(self, store_id: str) -> Snapshot:
        """Every memory with its content, read at one counter (the API's snapshot read)."""
        return await self._call(self._storage.open_snapshot, store_id)

    async def read_snapshot(self, reader: Snapshot, n: int) -> list[MemoryRecord]:
        return await self._call(reader.read, n)


__all__ = ["ApiError", "ConsoleBackend", "ConsolePage", "LIST_PAGE"]
