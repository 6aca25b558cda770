"""The memfs extensions' routes: the counter, counters, the watch, the changes feed and the snapshot
(docs/SEMANTICS.md#d-counter; not served with --hosted-api)."""

from __future__ import annotations

import logging

import anyio
import anyio.to_thread
import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from memfs.protocol import (
    COUNTER_HEADER,
)
from memfs.service import params, wire
from memfs.service.errors import from_storage, invalid
from memfs.service.request import (
    DEFAULT_WATCH_WAIT_S,
    MAX_COUNTER_IDS,
    MAX_WATCH_WAIT_S,
    counter_ids,
    known_counters,
)
from memfs.service.responses import json_response as _json
from memfs.service.routes.core import RouteContext
from memfs.service.storage import StorageError

log = logging.getLogger("memfs.service")
_SNAPSHOT_BATCH = 100


class ExtensionRoutes:
    def __init__(self, ctx: RouteContext):
        self.ctx = ctx

    async def get_counter(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        (await self.ctx.principal(request)).require_store(sid)
        counters = await self.ctx.call(self.ctx.storage.get_counters, [sid])
        self.ctx.metrics.counter_reads(1)
        return _json(wire.counter(sid, counters[sid]))

    async def get_counters(self, request: Request) -> Response:
        p = await self.ctx.principal(request)
        ids = counter_ids(request.query_params.getlist("ids"))
        if not ids:
            raise invalid("ids: give one or more memory store ids, comma-separated")
        if len(ids) > MAX_COUNTER_IDS:
            raise invalid(f"ids: at most {MAX_COUNTER_IDS} memory store ids per request (got {len(ids)})")
        for sid in ids:
            p.require_store(sid)
        counters = await self.ctx.call(self.ctx.storage.get_counters, ids)
        self.ctx.metrics.counter_reads(len(ids))
        return _json({"type": "list", "data": [wire.counter(sid, counters[sid]) for sid in ids]})

    async def watch(self, request: Request) -> Response:
        """Held until a store's counter differs from the known one, or `wait` passes (docs/SEMANTICS.md#d-counter)."""
        p = await self.ctx.principal(request)
        try:
            known = known_counters(request.query_params.getlist("known"))
        except ValueError as e:
            raise invalid(str(e)) from None
        if not known:
            raise invalid("known: give one or more STORE_ID:COUNTER items, comma-separated")
        if len(known) > MAX_COUNTER_IDS:
            raise invalid(f"known: at most {MAX_COUNTER_IDS} memory stores per request (got {len(known)})")
        raw_wait = request.query_params.get("wait", str(DEFAULT_WATCH_WAIT_S))
        try:
            wait_s = float(raw_wait)
        except ValueError:
            wait_s = -1.0
        if not 0 <= wait_s <= MAX_WATCH_WAIT_S:  # also refuses nan
            raise invalid(f"wait: seconds between 0 and {MAX_WATCH_WAIT_S:g} (got {raw_wait!r})")
        for sid in known:
            p.require_store(sid)
        try:
            with self.ctx.metrics.watches_held.track_inprogress():
                answer = await self.ctx.watch_hub.wait(known, wait_s)
            assert answer is not None  # None only with a first_read
            changed, counters = answer
        except StorageError as e:
            raise from_storage(e) from None
        self.ctx.metrics.counter_reads(len(known))
        return _json({
            "type": "memory_store_watch",
            "status": "changed" if changed else "unchanged",
            "data": [wire.counter(sid, counters[sid]) for sid in known],
        })  # fmt: skip

    async def get_changes(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        caller = await self.ctx.principal(request)
        caller.require_store(sid)
        if request.query_params.get("since") is None:
            raise invalid("since: is required (a counter value this client has applied)")
        since = params.q_int(request, "since", None, 0, None)
        full = params.q_view(request, "basic")
        ch = await self.ctx.call(self.ctx.storage.changes_since, sid, since, full=full, reader=caller.actor)
        self.ctx.metrics.counter_reads(1)
        return _json(
            {
                "type": "memory_store_changes",
                "memory_store_id": sid,
                "since": ch.since,
                "counter": ch.counter,
                "status": "too_old" if ch.too_old else "ok",
                "changes": [wire.change(c, full=full) for c in ch.changes],
            },
            headers={COUNTER_HEADER: str(ch.counter)},
        )

    async def get_snapshot(self, request: Request) -> Response:
        sid = request.path_params["store_id"]
        (await self.ctx.principal(request)).require_store(sid)
        reader = await self.ctx.call(self.ctx.storage.open_snapshot, sid)
        self.ctx.metrics.counter_reads(1)

        def line(obj: object) -> bytes:
            # orjson: encoding 32 MiB of memories with the json module takes ~0.3 s, orjson ~0.04 s
            return orjson.dumps(obj) + b"\n"

        async def body():
            # Every batch comes from the reader's one read transaction: the stream is the store at
            # `reader.counter`, whatever writers do meanwhile.
            try:
                yield line(
                    {"type": "memory_store_snapshot", "memory_store_id": sid, "counter": reader.counter}
                )
                count = 0
                while batch := await anyio.to_thread.run_sync(reader.read, _SNAPSHOT_BATCH):
                    count += len(batch)
                    yield b"".join(line(wire.memory(m, True)) for m in batch)
                yield line({"type": "snapshot_end", "count": count})
            finally:
                reader.close()

        return StreamingResponse(
            body(),
            media_type="application/x-ndjson",
            headers={COUNTER_HEADER: str(reader.counter)},
            background=BackgroundTask(reader.close),  # also closes it when the body never started
        )
