"""The request body, read whole (at most 1 MiB) before any handler runs (docs/SEMANTICS.md#d-api);
the console's import alone streams its body (`streamed`).

Why before the handler and not inside it: on a keep-alive connection the server can start the
next request only once this one's body has been received. A handler that answers without reading
the body (archive, a GET or DELETE that carries one, any error raised before the read) used to
leave it unread, and the next request on the connection was never answered. Reading it here, for
every request, makes that impossible by construction, and lets a body over 1 MiB be refused with
413 on every endpoint before anything acts on the request.

A refused body is drained (read and discarded) up to `DRAIN_CAP` bytes and `DRAIN_SECONDS`, so a
client still sending it gets the 413 instead of a reset connection; when the drain does not reach
the end of the body, the answer closes the connection (`connection: close`).
"""

from __future__ import annotations

import re

import anyio

from memfs.limits import MAX_REQUEST_BODY

DRAIN_CAP = 16 * 1024 * 1024
DRAIN_SECONDS = 2.0


class BodyTooLarge(Exception):
    """The body passes 1 MiB. `drained`: the rest was read to its end (the connection can be kept)."""

    def __init__(self, drained: bool):
        super().__init__(f"request body is larger than {MAX_REQUEST_BODY} bytes (1 MiB)")
        self.drained = drained


class BadLength(Exception):
    """The Content-Length header is not a number."""


class ClientGone(Exception):
    """The client disconnected before sending the whole body: nobody is left to answer."""


def declares_body(scope) -> bool:
    """Whether the request says a body follows: a `Content-Length` other than 0 (or not a number:
    `read_whole` refuses it), or a `Transfer-Encoding` (chunked). HTTP/1.1 has no other body."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


def declared_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            if not value.isdigit():
                raise BadLength("Content-Length header is not a number")
            return int(value)
    return None


async def _drain(receive, seen: int) -> bool:
    """Read and discard the rest of the body, within the byte and time caps. True: it ended."""
    with anyio.move_on_after(DRAIN_SECONDS):
        while seen <= DRAIN_CAP:
            message = await receive()
            if message["type"] != "http.request":
                return False  # disconnected
            seen += len(message.get("body", b""))
            if not message.get("more_body", False):
                return True
    return False


async def read_whole(scope, receive) -> bytes:
    """The whole body, or BodyTooLarge / BadLength / ClientGone. Never buffers more than 1 MiB."""
    declared = declared_length(scope)
    if declared is not None and declared > MAX_REQUEST_BODY:
        # Refused on the declared length alone; a length past the drain cap is not even drained.
        raise BodyTooLarge(drained=declared <= DRAIN_CAP and await _drain(receive, 0))
    buf = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGone()
        buf += message.get("body", b"")
        if len(buf) > MAX_REQUEST_BODY:
            more = message.get("more_body", False)
            raise BodyTooLarge(drained=not more or await _drain(receive, len(buf)))
        if not message.get("more_body", False):
            return bytes(buf)


# The one route that takes a body past 1 MiB: the console's import (up to 256 MiB, spooled to
# disk by the form parser, never held in memory). It reads and caps its body itself, after it
# has checked the session; the frame hands it `Tracked` instead of reading the body first.
_STREAMED = re.compile(r"/console(/stores/[^/]+)?/import")


def streamed(scope) -> bool:
    return scope["method"] == "POST" and _STREAMED.fullmatch(scope["path"]) is not None


class Tracked:
    """The real `receive`, noting whether the body was read to its end: if it was not when the
    answer starts, the answer closes the connection (what is left of the body cannot be skipped)."""

    def __init__(self, receive):
        self._receive = receive
        self.ended = False

    async def __call__(self):
        message = await self._receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.ended = True
        return message


def replaying(body: bytes, receive):
    """A `receive` that hands the app the body already read, then waits on the real one (disconnect)."""
    pending = True

    async def receive_again():
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_again
