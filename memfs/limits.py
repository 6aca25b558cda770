"""Limits shared by the service and the mount (docs/SEMANTICS.md#d-limits), and the memory path rules (docs/SEMANTICS.md#d-api).

Two path rules: `check_store_path` is what the store service accepts (the hosted API's rule, no
limit per segment); `check_memory_path` is what a mount can hold as a file (the same, plus the
255-byte name limit). The mount refuses locally (errno) everything the service would refuse
remotely (400), and a little more: names the kernel cannot carry.
"""

from __future__ import annotations

import unicodedata

MAX_CONTENT_BYTES = 102_400
MAX_PATH_BYTES = 1_024
MAX_SEGMENTS = 20
MAX_COMPONENT_BYTES = 255
MAX_STORES_PER_SESSION = 8
DEFAULT_MAX_FILES = 2_000
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_MEMORIES = 10_000
DEFAULT_SYNC_INTERVAL = 15.0
MIN_SYNC_INTERVAL = 5.0
# Without a counter (the hosted API, SEMANTICS.md#d-no-counter): polls while nobody uses the mount,
# the safety net's wide read of one store's version feed (round robin), at most this often, and its
# full listing of one store (round robin), at most this often (seconds).
IDLE_POLL_INTERVAL = 300.0
SAFETY_NET_INTERVAL = 300.0
FULL_LISTING_INTERVAL = 3600.0
FLUSH_TIMEOUT = 30.0
NOTICES_KEPT = 100
MAX_REQUEST_BODY = 1024 * 1024

# Names the mount reserves in every store root (docs/SEMANTICS.md#d-reserved).
MARKER_NAME = ".anthropic-memory-store"
NOTICES_NAME = ".sync-notices.log"
RESERVED_NAMES = frozenset({MARKER_NAME, NOTICES_NAME})


class PathError(ValueError):
    """A path or name breaks a rule. `too_long` distinguishes ENAMETOOLONG from EINVAL."""

    def __init__(self, message: str, *, too_long: bool = False):
        super().__init__(message)
        self.too_long = too_long


def _bad_char(ch: str) -> bool:
    if ch in ("\u2028", "\u2029", "\\"):
        return True
    cat = unicodedata.category(ch)
    # Cc: control characters (NUL, newline, DEL...), Cf: format characters (ZWJ, BOM, RLO...).
    return cat in ("Cc", "Cf")


def _check_segment(name: str) -> None:
    """The rules one path segment breaks on the store too: empty, `.`/`..`, characters, NFC."""
    if name in ("", ".", ".."):
        raise PathError(f"path segment {name!r} is not allowed")
    if name.isascii() and name.isprintable() and "\\" not in name:
        return  # the common case, checked at C speed: printable ASCII has no Cc/Cf and is NFC
    for ch in name:
        if _bad_char(ch):
            raise PathError(f"path segment contains a forbidden character U+{ord(ch):04X}")
    if unicodedata.normalize("NFC", name) != name:
        raise PathError("path segment is not NFC-normalised")


def check_component(name: str) -> None:
    """Validate one file or directory name in a mount: a store segment of at most 255 bytes."""
    if name in ("", ".", ".."):
        raise PathError(f"path segment {name!r} is not allowed")
    if len(name.encode("utf-8", errors="surrogatepass")) > MAX_COMPONENT_BYTES:
        raise PathError(f"path segment is longer than {MAX_COMPONENT_BYTES} bytes", too_long=True)
    _check_segment(name)


def check_component_bytes(raw: bytes) -> str:
    """Validate a name as the kernel hands it to us (bytes); return it as str."""
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PathError("name is not valid UTF-8") from None
    check_component(name)
    return name


def _segments(path: object) -> list[str]:
    if not isinstance(path, str):
        raise PathError("path must be a string")
    if not path.startswith("/"):
        raise PathError("path must start with '/'")
    if len(path.encode("utf-8", errors="surrogatepass")) > MAX_PATH_BYTES:
        raise PathError(f"path is longer than {MAX_PATH_BYTES} bytes", too_long=True)
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise PathError("path is not valid UTF-8") from None
    segments = path[1:].split("/")
    if len(segments) > MAX_SEGMENTS:
        raise PathError(f"path has more than {MAX_SEGMENTS} segments")
    return segments


def check_store_path(path: object) -> str:
    """The store service's path rule (docs/SEMANTICS.md#d-api): no limit per segment, as on the hosted API.

    Returns the path unchanged; raises PathError with a clear message."""
    segments = _segments(path)
    for seg in segments:
        if seg == "":
            raise PathError("path has an empty segment")
        _check_segment(seg)
    return path  # type: ignore[return-value]  # _segments checked it is a str


def _plain_memory_path(path: object) -> bool:
    """Whether `path` certainly passes `check_memory_path`, decided with a few whole-string
    checks at C speed: printable ASCII without a backslash (so every segment passes
    `_check_segment`, and bytes are characters), within the length and segment limits, no empty,
    `.` or `..` segment. False says nothing: the full check then decides and words the error.
    A first download checks every path twice (the plan, then the view), 4,000 paths a store."""
    if not (
        type(path) is str
        and path.isascii()
        and path.isprintable()
        and "\\" not in path
        and path.startswith("/")
        and len(path) <= MAX_PATH_BYTES
        and "//" not in path
        and not path.endswith("/")
        and "/." not in path
    ):
        return False
    # "/." excluded every `.` and `..` segment (and names starting with a dot: the full check
    # takes those); no empty segment is left, so only the counts remain.
    if path.count("/") > MAX_SEGMENTS:
        return False
    return len(path) <= MAX_COMPONENT_BYTES + 1 or all(
        len(seg) <= MAX_COMPONENT_BYTES for seg in path[1:].split("/")
    )


def check_memory_path(path: object) -> str:
    """A memory path that a mount can hold as a file: the store's rule, and every segment a valid
    name (at most 255 bytes, the kernel's NAME_MAX). A memory that passes `check_store_path` but
    not this one stays on the store and is not materialised (docs/SEMANTICS.md#d-three-way)."""
    if _plain_memory_path(path):
        return path  # type: ignore[return-value]  # _plain_memory_path checked it is a str
    for seg in _segments(path):
        if seg == "":
            raise PathError("path has an empty segment")
        check_component(seg)
    return path  # type: ignore[return-value]


def check_content(content: object) -> bytes:
    """Validate memory content; returns its UTF-8 bytes."""
    if not isinstance(content, str):
        raise PathError("content must be a string")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise PathError("content is not valid UTF-8") from None
    if len(data) > MAX_CONTENT_BYTES:
        raise PathError(
            f"content is {len(data)} bytes; the limit is {MAX_CONTENT_BYTES} bytes", too_long=True
        )
    return data


def slugify(name: str) -> str:
    """mount_path slug (docs/SEMANTICS.md#d-sessions): lowercase, runs of non [a-z0-9] become one '-', trimmed."""
    out: list[str] = []
    dash = False
    for ch in name.lower():
        if "a" <= ch <= "z" or "0" <= ch <= "9":
            out.append(ch)
            dash = False
        elif not dash:
            out.append("-")
            dash = True
    return "".join(out).strip("-") or "store"
