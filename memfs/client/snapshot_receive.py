"""A streamed snapshot's answer received (`StoreClient.snapshot`): the body read in chunks on the
calling trio task, parsed and handed to the sink on a worker thread (memfs/client/snapshot_stream.py),
a bounded queue between, so a store's content is never whole in memory."""

from __future__ import annotations

import httpx
import trio

from memfs.client.snapshot_stream import (
    SNAPSHOT_CHUNK_BYTES,
    SNAPSHOT_CHUNKS_AHEAD,
    SnapshotParser,
    SnapshotSink,
)


async def stream_snapshot(url: str, resp: httpx.Response, sink: SnapshotSink) -> int:
    """Receive on this task, parse and hand over on a worker thread, a bounded queue between."""
    parser = SnapshotParser(url, sink)
    send, receive = trio.open_memory_channel[bytes](SNAPSHOT_CHUNKS_AHEAD)
    failure: list[BaseException] = []

    async def receive_body(cancel: trio.CancelScope) -> None:
        try:
            async with send:
                parts: list[bytes] = []
                size = 0
                async for chunk in resp.aiter_bytes():
                    parts.append(chunk)
                    size += len(chunk)
                    if size >= SNAPSHOT_CHUNK_BYTES:
                        await send.send(b"".join(parts))
                        parts, size = [], 0
                if parts:
                    await send.send(b"".join(parts))
        except Exception as exc:  # the consumer must not wait for a chunk that never comes
            failure.append(exc)
            cancel.cancel()

    async def hand_over(cancel: trio.CancelScope) -> None:
        try:
            async with receive:
                async for data in receive:
                    await trio.to_thread.run_sync(parser.feed, data)
        except Exception as exc:
            failure.append(exc)
            cancel.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receive_body, nursery.cancel_scope)
        nursery.start_soon(hand_over, nursery.cancel_scope)
    if failure:  # the first is the cause: the other task was cancelled because of it
        raise failure[0]
    return parser.finish()
