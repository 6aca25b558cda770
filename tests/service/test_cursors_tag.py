"""Page cursors keyed once (cursors.py): the same tokens as a fresh HMAC per tag, still checked."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from memfs.service.cursors import CursorError, Cursors


def _reference(secret: str, listing: tuple, position: str | int) -> str:
    """A token as the cursors were made before: `hmac.new` per tag."""
    key = hashlib.sha256(b"memfs-page-cursor:" + secret.encode()).digest()
    raw = (b"s" + position.encode()) if isinstance(position, str) else (b"i" + str(position).encode())
    ident = json.dumps(listing, separators=(",", ":"), ensure_ascii=False).encode()
    tag = hmac.new(key, len(ident).to_bytes(4, "big") + ident + raw, hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(b"\x01" + raw + tag).decode().rstrip("=")


@pytest.mark.timeout(30)
def test_tokens_are_unchanged_and_still_bound_to_their_listing():
    c = Cursors("admin-key-ü")
    cases = [
        (("memories", "memstore_a", "/", 0, False), "/a/b.md"),
        (("memories", "memstore_a", "/d/", 1, True), "/d/e/"),
        (("stores", False, None, None, None), 42),
    ]
    for listing, position in cases * 2:  # twice: the keyed HMAC is copied, never used up
        token = c.encode(listing, position)
        assert token == _reference("admin-key-ü", listing, position)
        assert c.decode(listing, token) == position
        with pytest.raises(CursorError):
            c.decode((*listing[:-1], "other"), token)
    with pytest.raises(CursorError):
        Cursors("another-key").decode(cases[0][0], c.encode(*cases[0]))
