"""The service's JSON answers and its error answer, the same bytes from every path.

The routes (memfs/service/routes/), the request frame (frame.py) and the fast paths (counter_path.py, list_path.py) answer
errors they own (a body too large, an organisation's or a caller's rate limit) with
`error_response`, so a 429 from a fast path is byte for byte the full path's.
"""

from __future__ import annotations

import orjson
from starlette.responses import JSONResponse

from memfs.service.errors import ApiError, envelope


class OrjsonResponse(JSONResponse):
    """JSON encoded with orjson: a full-view listing page (20 memories of up to 100 KiB) took
    ~9.5 ms to encode with the json module and 0.08 ms with orjson (PERFORMANCE.md, network
    section). Same JSON: compact, UTF-8, only plain dicts, lists, strings and numbers here."""

    def render(self, content: object) -> bytes:
        return orjson.dumps(content)


def json_response(body: object, status: int = 200, headers: dict | None = None) -> JSONResponse:
    return OrjsonResponse(body, status_code=status, headers=headers)


def error_response(err: ApiError, request_id: str) -> JSONResponse:
    # The official client retries 409s by default; ours are answers about state, not lock
    # timeouts, so tell it (and any client honouring the header) not to retry 4xx errors.
    headers = {"x-should-retry": "false"} if 400 <= err.status < 500 and err.status != 429 else {}
    return json_response(envelope(err, request_id), status=err.status, headers={**headers, **err.headers})
