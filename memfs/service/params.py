"""Reading and validating request input: the size-limited JSON body, body fields, query parameters.

Every rule broken here is a 400 with a message naming the field, never a 500.
"""

from __future__ import annotations

import json
import re
import unicodedata
from datetime import UTC, datetime
from typing import overload

from starlette.requests import ClientDisconnect, Request

from memfs.limits import MAX_REQUEST_BODY, PathError, check_content, check_store_path
from memfs.service.errors import ApiError, invalid

_SHA_RE = re.compile(r"^[0-9a-fA-F]{64}$")


async def read_body(request: Request) -> bytes:
    """The body. The app's outermost layer has already read it whole and refused it past 1 MiB
    (`memfs.service.body`), so this only collects what it replays."""
    buf = bytearray()
    try:
        async for chunk in request.stream():
            buf += chunk
    except ClientDisconnect:
        raise invalid("the client disconnected before sending the whole body") from None
    if len(buf) > MAX_REQUEST_BODY:  # a defence, should the app ever run without its frame
        raise ApiError(
            413, "request_too_large", f"request body is larger than {MAX_REQUEST_BODY} bytes (1 MiB)"
        )
    return bytes(buf)


async def json_object(request: Request, allowed: tuple[str, ...]) -> dict:
    """Parse the body as one JSON object whose keys are all in `allowed`. An empty body is `{}`."""
    raw = await read_body(request)
    if not raw.strip():
        return {}
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise invalid(f"request body must be a JSON object, not {type(body).__name__}")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise invalid(f"unknown field {unknown[0]!r}; allowed fields: {', '.join(allowed)}")
    return body


def parse_json(raw: bytes) -> object:
    """A body as JSON in UTF-8, as docs/API.md says: `json.loads(bytes)` would also take UTF-16,
    UTF-32 and a byte order mark. Nesting past the parser's recursion limit (~1,000 levels) is a
    400 like any other invalid body, not a RecursionError (500)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid("request body is not valid UTF-8") from None
    if text.startswith("\ufeff"):
        raise invalid("request body starts with a byte order mark: send UTF-8 without one") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise invalid("request body is nested too deeply") from None
    except ValueError as e:
        raise invalid(f"request body is not valid JSON: {e}") from None


# --- body fields ---------------------------------------------------------------------------------


def _type_name(v: object) -> str:
    return {
        dict: "object",
        list: "array",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }.get(type(v), type(v).__name__)


def text(
    value: object,
    field: str,
    *,
    max_chars: int,
    min_chars: int = 0,
    single_line: bool = False,
) -> str:
    """A free-text string: valid Unicode (no lone surrogates), no NUL; `single_line` forbids all controls."""
    if not isinstance(value, str):
        raise invalid(f"{field}: must be a string, not {_type_name(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(f"{field}: is not valid UTF-8 (lone surrogate)") from None
    if len(value) < min_chars:
        raise invalid(f"{field}: must be at least {min_chars} character(s) long")
    if len(value) > max_chars:
        raise invalid(f"{field}: must be at most {max_chars} characters long (got {len(value)})")
    for ch in value:
        if ch == "\x00" or (
            single_line and (unicodedata.category(ch) in _NOT_ONE_LINE or ch in _BIDI_CONTROLS)
        ):
            raise invalid(
                f"{field}: must not contain control characters, line separators or bidi controls "
                f"(found U+{ord(ch):04X})"
            )
    return value


# A one-line name (a store's, a metadata key) shows as written wherever it is listed: no control
# character, no line or paragraph separator (U+2028, U+2029), and none of the bidirectional
# controls that make a name read differently from what it is (U+202E turns "exe.txt" around).
_NOT_ONE_LINE = frozenset(("Cc", "Zl", "Zp"))
_BIDI_CONTROLS = frozenset("\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def store_name(value: object) -> str:
    return text(value, "name", min_chars=1, max_chars=255, single_line=True)


def store_description(value: object) -> str:
    return text(value, "description", max_chars=1024)


def metadata(value: object, *, patch: bool) -> dict:
    if not isinstance(value, dict):
        raise invalid(f"metadata: must be an object of string values, not {_type_name(value)}")
    # On create the object is the result; a patch is limited by its result (checked by the storage).
    if not patch and len(value) > 16:
        raise invalid(f"metadata: at most 16 key-value pairs (got {len(value)})")
    out: dict = {}
    for k, v in value.items():
        text(k, "metadata key", min_chars=1, max_chars=64, single_line=True)
        if v is None and patch:
            out[k] = None  # null removes the key
            continue
        out[k] = text(v, f"metadata[{k!r}]", max_chars=512)
    return out


def memory_path(value: object, field: str = "path") -> str:
    if not isinstance(value, str):
        raise invalid(f"{field}: must be a string, not {_type_name(value)}")
    try:
        return check_store_path(value)
    except PathError as e:
        raise invalid(f"{field}: {e}") from None


def memory_content(value: object) -> str:
    if not isinstance(value, str):
        raise invalid(f"content: must be a string, not {_type_name(value)}")
    try:
        check_content(value)
    except PathError as e:
        raise invalid(f"content: {e}") from None
    return value


def sha256(value: object, field: str) -> str:
    if not isinstance(value, str) or not _SHA_RE.match(value):
        raise invalid(f"{field}: must be 64 hexadecimal characters (the SHA-256 of the content)")
    return value.lower()


def precondition(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid(f"precondition: must be an object, not {_type_name(value)}")
    unknown = sorted(set(value) - {"type", "content_sha256"})
    if unknown:
        raise invalid(f"precondition: unknown field {unknown[0]!r}")
    if value.get("type") != "content_sha256":
        raise invalid("precondition.type: must be 'content_sha256'")
    if "content_sha256" not in value:
        raise invalid("precondition.content_sha256: is required")
    return sha256(value["content_sha256"], "precondition.content_sha256")


# --- query parameters ----------------------------------------------------------------------------


@overload
def q_int(request: Request, name: str, default: int, lo: int, hi: int | None) -> int: ...
@overload
def q_int(request: Request, name: str, default: None, lo: int, hi: int | None) -> int | None: ...
def q_int(request: Request, name: str, default: int | None, lo: int, hi: int | None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < lo or (hi is not None and value > hi):
        bounds = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise invalid(f"{name}: must be an integer {bounds} (got {raw!r})")
    return value


def q_bool(request: Request, name: str, default: bool) -> bool:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise invalid(f"{name}: must be true or false (got {raw!r})")


def q_choice(request: Request, name: str, choices: tuple[str, ...], default: str | None) -> str | None:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw not in choices:
        raise invalid(f"{name}: must be one of {', '.join(choices)} (got {raw!r})")
    return raw


def q_str(request: Request, name: str) -> str | None:
    raw = request.query_params.get(name)
    if raw is not None:
        text(raw, name, max_chars=1024, single_line=True)
    return raw


def q_time(request: Request, name: str) -> str | None:
    """An RFC 3339 timestamp, normalised to the fixed-width UTC form the storage compares as text."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        dt = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise invalid(f"{name}: not an RFC 3339 timestamp: {raw!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    try:
        return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise invalid(f"{name}: outside the years 1 to 9999 in UTC: {raw!r}") from None


def q_path_prefix(request: Request) -> str:
    raw = request.query_params.get("path_prefix")
    if raw is None or raw == "/":
        return "/"
    if not raw.startswith("/") or not raw.endswith("/"):
        raise invalid(f"path_prefix: must start and end with '/' (got {raw!r})")
    memory_path(raw[:-1], "path_prefix")
    return raw


def q_view(request: Request, default: str) -> bool:
    """True for view=full."""
    return q_choice(request, "view", ("basic", "full"), default) == "full"


def q_limit(request: Request, full: bool) -> int:
    # With view=full a page holds at most 20 items: larger limits are clamped, not refused.
    limit = q_int(request, "limit", 20, 1, 100)
    return min(limit, 20) if full else limit


def q_memory_listing(request: Request, store_id: str) -> tuple[bool, int, str, int, tuple]:
    """A memory listing's query, read in this order (so the first bad parameter is the one
    answered): (full view, depth, path prefix, limit, the listing its cursors are bound to).
    Read by the list route (routes/memories.py) and its fast path (list_path.py) alike."""
    full = q_view(request, "basic")
    depth = request.query_params.get("depth", "0")
    if depth not in ("0", "1"):
        raise invalid(f"depth: must be 0 (whole subtree) or 1 (direct children) (got {depth!r})")
    prefix, limit = q_path_prefix(request), q_limit(request, full)
    return full, int(depth), prefix, limit, ("memories", store_id, prefix, int(depth), full)
