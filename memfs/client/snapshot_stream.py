"""A snapshot stream's lines turned into stored content (SEMANTICS.md#d-first-download): the
parser of the service's JSON lines and the sink that hashes and stores each chunk's content.

Both import nothing heavy (no httpx, no trio): the engine's sync imports the sink's protocol, and
the client's streamed snapshot (memfs/client/snapshot_receive.py `stream_snapshot`, under trio)
feeds them, for the daemon and for the mount's early download (memfs/session/early_fetch.py) alike."""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

import orjson

from memfs.client.errors import Unreachable

# A first download's snapshot is received in chunks of about this size and parsed, hashed and
# stored from a worker thread while the next chunks arrive; at most this many wait in between.
SNAPSHOT_CHUNK_BYTES = 1024 * 1024
SNAPSHOT_CHUNKS_AHEAD = 2


class SnapshotSink(Protocol):
    """Where a snapshot's memories go as they arrive (StoreClient.snapshot)."""

    def put(self, memories: list[dict[str, Any]]) -> None:
        """Take one chunk's memories (each the API's memory object, content included). Called
        from a worker thread, one chunk at a time, in the stream's order."""


class BlobWriter(Protocol):
    def put_blobs(self, blobs: list[tuple[str, bytes]]) -> None:
        """Store (sha, content) pairs in one transaction (the state dir's blobs)."""


class SnapshotParser:
    """Turns a snapshot's JSON lines, arriving in arbitrary byte chunks, into memories for a sink.
    Called from one worker thread at a time (the chunks are handed over one after the other)."""

    def __init__(self, url: str, sink: SnapshotSink):
        self.url = url
        self.sink = sink
        self.rest = b""  # an incomplete last line, completed by the next chunk
        self.counter: int | None = None  # from the header line
        self.seen = 0
        self.ended = False

    def feed(self, data: bytes) -> None:
        lines = (self.rest + data).split(b"\n") if self.rest else data.split(b"\n")
        self.rest = lines.pop()
        memories: list[dict[str, Any]] = []
        for line in lines:
            item = self._parse(line)
            if item is None:
                continue
            kind = item.get("type")
            if kind == "memory":
                if self.counter is None or self.ended:
                    raise Unreachable(f"GET {self.url}: a memory outside the snapshot's header and end")
                memories.append(item)
            elif kind == "memory_store_snapshot":
                self.counter = int(item["counter"])
            elif kind == "snapshot_end":
                self.ended = int(item.get("count", -1)) == self.seen + len(memories)
        self.seen += len(memories)
        if memories:
            self.sink.put(memories)

    def finish(self) -> int:
        """The snapshot's counter, once the stream ended where the service said it would."""
        self.feed(b"\n")  # the last line may lack its newline
        if self.counter is None or not self.ended:
            raise Unreachable(f"GET {self.url}: snapshot stream was truncated")
        return self.counter

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        if not line.strip():
            return None
        try:
            item = orjson.loads(line)  # a first download's hot loop: see the service's snapshot
        except ValueError as exc:
            raise Unreachable(f"GET {self.url}: malformed snapshot line") from exc
        if not isinstance(item, dict):
            raise Unreachable(f"GET {self.url}: malformed snapshot line")
        return item


# One memory as a snapshot keeps it: id, path, sha, size, updated_at.
SnapshotEntry = tuple[str, str, str, int, "str | None"]


class StreamedSnapshot:
    """A snapshot as it streams (SEMANTICS.md#d-first-download): each chunk's content is hashed
    and stored in the state dir's blobs from the client's worker thread as it arrives, and only
    what the plan needs is kept (id, path, sha, size, updated_at). Nothing here is in the view:
    the plan applies the store, whole, once the stream has ended."""

    def __init__(self, state: BlobWriter, slug: str, *, entries: bool = True):
        self.state = state
        self.slug = slug
        self.keep_entries = entries  # a full-view listing has its entries in the listing itself
        self.entries: list[SnapshotEntry] = []
        self.shas: set[str] = set()

    def put(self, memories: list[dict[str, Any]]) -> None:
        blobs: list[tuple[str, bytes]] = []
        for m in memories:
            if m.get("type", "memory") != "memory":  # a listing page's prefix roll-up
                continue
            data = (m.get("content") or "").encode("utf-8")
            sha = hashlib.sha256(data).hexdigest()  # releases the GIL: the trio thread reads on
            if sha != m.get("content_sha256"):
                raise Unreachable(
                    f"{self.slug}: the snapshot's content of {m.get('path')!r} is not its content_sha256"
                )
            if sha not in self.shas:
                self.shas.add(sha)
                blobs.append((sha, data))
            if self.keep_entries:
                self.entries.append((m["id"], m["path"], sha, len(data), m.get("updated_at")))
        self.state.put_blobs(blobs)
