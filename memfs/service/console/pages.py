"""Rendering: the Jinja2 environment (autoescaped), filters, and the headers every console answer carries."""

from __future__ import annotations

from datetime import datetime

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.responses import HTMLResponse

from memfs.service.storage import Actor

BASE = "/console"

# Nothing but this origin: no inline script or style, no frames, forms post only here.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
}
NO_STORE = {"cache-control": "no-store"}  # pages hold memory contents: keep them out of caches


def size(n: int | None) -> str:
    if n is None:
        return "—"
    if n < 1024:
        return f"{n} B"
    scaled = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        scaled /= 1024
        if scaled < 1024 or unit == "GiB":
            return f"{scaled:.1f} {unit}"
    return str(n)


def when(ts: str | None) -> str:
    if not ts:
        return "—"
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return ts


def actor(a: Actor | None) -> str:
    if a is None:
        return "—"
    return f"session {a.id}" if a.type == "session_actor" else f"key {a.id}"


def actor_short(a: Actor | None) -> str:
    """For narrow columns: the id cut to 12 characters after its prefix (the full one is the title)."""
    if a is None:
        return "—"
    prefix, _, rest = a.id.partition("_")
    ident = f"{prefix}_{rest[:8]}…" if len(rest) > 8 else a.id
    return f"session {ident}" if a.type == "session_actor" else f"key {ident}"


def short(sha: str | None) -> str:
    return sha[:12] if sha else "—"


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("memfs.service.console", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(size=size, when=when, actor=actor, actor_short=actor_short, short=short)
    env.globals["base"] = BASE
    return env


ENV = _env()


def render(template: str, status: int = 200, headers: dict | None = None, **ctx) -> HTMLResponse:
    html = ENV.get_template(template).render(**ctx)
    return HTMLResponse(html, status_code=status, headers={**NO_STORE, **(headers or {})})
