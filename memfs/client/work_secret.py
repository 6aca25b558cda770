"""The sessions token inside a work secret (`ANTHROPIC_WORK_SECRET`).

A module of its own, importing nothing heavy: `memfs mount` reads the token before it forks its
early download (memfs/session/early_fetch.py), before httpx is imported."""

from __future__ import annotations

import base64
import json


def sessions_token_from_secret(secret: str | None) -> str | None:
    """The `sessions_token` inside a work secret (url-safe base64 JSON, padding optional)."""
    if not secret:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4)))
    except (ValueError, TypeError):
        return None
    token = payload.get("sessions_token") if isinstance(payload, dict) else None
    return token if isinstance(token, str) and token else None
