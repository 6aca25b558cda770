"""How a push cuts its writes into batches (memfs's batch-write extension, docs/API.md).

Used by the sync's push (memfs/sync/push.py), which sends each batch through the client's
`write_batch`; the client takes a batch as given and cuts nothing itself."""

from __future__ import annotations

from typing import Any

import orjson

# One batch write (memfs's extension, docs/API.md): the service takes at most 1,000 operations
# and a 1 MiB body; a batch is cut below both, with room for the envelope.
BATCH_MAX_OPERATIONS = 1000
BATCH_MAX_BYTES = 1024 * 1024 - 4096


def batch_chunks(ops: list[dict[str, Any]]) -> list[list[int]]:
    """The positions of `ops` cut into consecutive batches that the service takes (count and body
    size). An operation too large for any batch is a chunk of its own: sent, it gets the same
    answer (a 413) as its single request would."""
    chunks: list[list[int]] = []
    size = 0
    for i, op in enumerate(ops):
        n = len(orjson.dumps(op)) + 1
        if not chunks or size + n > BATCH_MAX_BYTES or len(chunks[-1]) >= BATCH_MAX_OPERATIONS:
            chunks.append([])
            size = 0
        chunks[-1].append(i)
        size += n
    return chunks
