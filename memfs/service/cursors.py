"""Page cursors: opaque, signed, and valid only for the listing that produced them (docs/SEMANTICS.md#d-api).

A backend pages by position (the last path or sequence number a page ended on); this module turns
a position into the `next_page` token a client sees and back. The token is url-safe base64 of a
format byte, the position and an HMAC-SHA256 tag over the position *and the listing's identity*
(kind, store, filters, view, depth, prefix): a token edited by the client, made up, or taken from
another listing fails the tag and is a 400. Signed, not encrypted: a memory listing's cursor
carries the path it resumes after, which its holder has just been shown.

The key is derived from the admin key, which every replica of one service shares, so a cursor
issued by one replica is accepted by all of them; changing the admin key invalidates cursors.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

_FORMAT = b"\x01"
_TAG_BYTES = 16


class CursorError(ValueError):
    """The token is not a cursor this service issued for this listing."""


class Cursors:
    def __init__(self, secret: str):
        self._key = hashlib.sha256(b"memfs-page-cursor:" + secret.encode("utf-8")).digest()
        # keyed once and copied per tag: `hmac.new` per tag was ~1.5 % of a hosted list page's CPU
        self._keyed = hmac.new(self._key, digestmod=hashlib.sha256)

    def _tag(self, listing: tuple, position: bytes) -> bytes:
        ident = json.dumps(listing, separators=(",", ":"), ensure_ascii=False).encode()
        mac = self._keyed.copy()
        mac.update(len(ident).to_bytes(4, "big") + ident + position)
        return mac.digest()[:_TAG_BYTES]

    def encode(self, listing: tuple, position: str | int | None) -> str | None:
        if position is None:
            return None
        if isinstance(position, bool) or not isinstance(position, str | int):
            raise TypeError(f"a cursor position is a str or an int, not {type(position).__name__}")
        raw = (b"s" + position.encode()) if isinstance(position, str) else (b"i" + str(position).encode())
        return base64.urlsafe_b64encode(_FORMAT + raw + self._tag(listing, raw)).decode().rstrip("=")

    def decode(self, listing: tuple, token: str | None) -> str | int | None:
        if token is None:
            return None
        try:
            blob = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (ValueError, TypeError):
            raise CursorError("page: not a page cursor returned by this service") from None
        if len(blob) < 2 + _TAG_BYTES or blob[:1] != _FORMAT:
            raise CursorError("page: not a page cursor returned by this service")
        raw, tag = blob[1:-_TAG_BYTES], blob[-_TAG_BYTES:]
        if not hmac.compare_digest(tag, self._tag(listing, raw)):
            raise CursorError(
                "page: this cursor was not returned by this listing (cursors are valid only with the "
                "same store, filters, view, depth and path_prefix)"
            )
        kind, value = raw[:1], raw[1:]
        try:
            return value.decode() if kind == b"s" else int(value.decode())
        except (UnicodeDecodeError, ValueError):  # a tag we made never covers such a value
            raise CursorError("page: not a page cursor returned by this service") from None
