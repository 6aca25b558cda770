"""Console sign-in: a signed, expiring session cookie and the CSRF tokens bound to it.

The cookie holds `expiry.nonce.signature`, signed with a key derived from the admin key: any
replica that knows the admin key accepts it (no shared session table), changing the admin key signs
everyone out, and a forged or expired cookie is refused. The CSRF token of a session is derived
from its nonce, so it cannot be guessed without the cookie and needs no storage either. Signing out
expires the cookie in the browser and revokes its nonce in this process until it would have expired.
The sign-in form has its own token, bound to a short-lived pre-session cookie (login CSRF).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time

SESSION_COOKIE = "memfs_console"
LOGIN_COOKIE = "memfs_console_login"
SESSION_SECONDS = 8 * 3600
LOGIN_SECONDS = 30 * 60
COOKIE_PATH = "/console"


class ConsoleSessions:
    def __init__(self, admin_key: str):
        self._key = hmac.new(admin_key.encode("utf-8"), b"memfs-console-session-v1", hashlib.sha256).digest()
        self._revoked: dict[str, float] = {}  # nonce -> expiry
        self._lock = threading.Lock()

    def _sign(self, *parts: str) -> str:
        return hmac.new(self._key, "|".join(parts).encode(), hashlib.sha256).hexdigest()

    # --- sessions ------------------------------------------------------------------------------

    def new_session(self, now: float | None = None) -> str:
        expiry = str(int((now or time.time()) + SESSION_SECONDS))
        nonce = secrets.token_urlsafe(24)
        return f"{expiry}.{nonce}.{self._sign('session', expiry, nonce)}"

    def nonce_of(self, cookie: str | None, now: float | None = None) -> str | None:
        """The session's nonce if the cookie is genuine, unexpired and not signed out; else None."""
        if not cookie or cookie.count(".") != 2:
            return None
        expiry, nonce, sig = cookie.split(".")
        if not hmac.compare_digest(sig, self._sign("session", expiry, nonce)):
            return None
        if not expiry.isdigit() or int(expiry) < (now or time.time()):
            return None
        with self._lock:
            if nonce in self._revoked:
                return None
        return nonce

    def revoke(self, cookie: str | None) -> None:
        nonce = self.nonce_of(cookie)
        if cookie is None or nonce is None:
            return
        now = time.time()
        with self._lock:
            self._revoked = {n: e for n, e in self._revoked.items() if e > now}  # forget expired ones
            self._revoked[nonce] = int(cookie.split(".")[0])

    def csrf_token(self, nonce: str) -> str:
        return self._sign("csrf", nonce)

    def csrf_ok(self, nonce: str, token: str | None) -> bool:
        return token is not None and token != "" and hmac.compare_digest(token, self.csrf_token(nonce))

    # --- the sign-in form ----------------------------------------------------------------------

    @staticmethod
    def new_login_nonce() -> str:
        return secrets.token_urlsafe(24)

    def login_token(self, login_nonce: str) -> str:
        return self._sign("login", login_nonce)

    def login_ok(self, login_nonce: str | None, token: str | None) -> bool:
        if not login_nonce or not token:
            return False
        return hmac.compare_digest(token, self.login_token(login_nonce))
