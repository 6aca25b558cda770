"""The client's streamed snapshot (memfs/client/api.py `snapshot`): lines cut anywhere by the network's
chunking, a stream that ends early, an end line whose count is not what came.

The chunking is the one thing the real service cannot be made to do on purpose, so these tests
answer from an httpx transport that sends a recorded snapshot body in chunks of chosen sizes; the
real service's stream is exercised by tests/e2e/test_first_download.py."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from memfs.client import StoreClient, Unreachable


def _body(n: int, *, end_count: int | None = None, end: bool = True) -> bytes:
    lines = [{"type": "memory_store_snapshot", "memory_store_id": "memstore_x", "counter": 7}]
    lines += [
        {"type": "memory", "id": f"mem_{i}", "path": f"/d/f{i}.md", "content": "é\n" * i} for i in range(n)
    ]
    if end:
        lines.append({"type": "snapshot_end", "count": n if end_count is None else end_count})
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


class _Chunked(httpx.AsyncByteStream):
    def __init__(self, data: bytes, size: int):
        self.data, self.size = data, size

    async def __aiter__(self):
        for i in range(0, len(self.data), self.size):
            yield self.data[i : i + self.size]


class _Sink:
    def __init__(self) -> None:
        self.chunks: list[list[dict]] = []

    def put(self, memories: list[dict]) -> None:
        self.chunks.append(memories)


def _run(body: bytes, chunk: int) -> tuple[int | None, _Sink]:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_Chunked(body, chunk))

    sink = _Sink()

    async def main() -> int | None:
        async with StoreClient("http://svc.test", "t", transport=httpx.MockTransport(answer)) as c:
            return await c.snapshot("memstore_x", sink)

    return trio.run(main), sink


@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 22])
def test_lines_cut_anywhere_arrive_whole_and_in_order(chunk, monkeypatch):
    monkeypatch.setattr("memfs.client.snapshot_receive.SNAPSHOT_CHUNK_BYTES", 1000)  # many hand-overs
    counter, sink = _run(_body(60), chunk)
    assert counter == 7
    got = [m for c in sink.chunks for m in c]
    assert [m["id"] for m in got] == [f"mem_{i}" for i in range(60)]
    assert all(m["content"] == "é\n" * i for i, m in enumerate(got))
    assert len(sink.chunks) > 1 or chunk == 1 << 22


def test_the_last_line_without_its_newline_still_counts():
    counter, sink = _run(_body(3).rstrip(b"\n"), 5)
    assert counter == 7 and sum(map(len, sink.chunks)) == 3


@pytest.mark.parametrize("body", [_body(5, end=False), _body(5, end_count=6), _body(5)[:-40]])
def test_a_stream_that_is_not_whole_fails(body):
    with pytest.raises(Unreachable, match="truncated|malformed"):
        _run(body, 64)


def test_a_failing_sink_fails_the_snapshot():
    class Bad(_Sink):
        def put(self, memories):
            raise Unreachable("content does not match its sha")

    def answer(request):
        return httpx.Response(200, stream=_Chunked(_body(5), 16))

    async def main():
        async with StoreClient("http://svc.test", "t", transport=httpx.MockTransport(answer)) as c:
            await c.snapshot("memstore_x", Bad())

    with pytest.raises(Unreachable, match="does not match"):
        trio.run(main)
