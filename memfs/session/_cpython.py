"""Every private name memfs takes from CPython's own C modules, in one place: the per-call hook's start.

`memfs sync` runs as a process before every tool call, so its start is its cost
(docs/SEMANTICS.md#d-commands), and the public modules it would need cost more than the hook itself:
measured with `python -X importtime` (median of 30 runs, this 2-core machine, after the hook's own
imports) `json` ~7 ms (json.decoder imports re, which imports enum and functools), `socket` ~3 ms
(enum again, selectors), `hashlib` ~3 ms (OpenSSL), against ~6 ms for the hook's whole import. So
the hook, the control channel (control.py) and the standby (standby.py) take them from the C
modules under those public ones, through this module alone:

- `loads` / `dumps`: JSON through `_json`'s C scanner (`make_scanner`, given the defaults of
  json.loads) and C string encoder (`encode_basestring_ascii`): what json.loads/dumps run.
- `csocket`: `_socket`, the C module `socket` wraps (socket objects, AF_UNIX, SO_PEERCRED).
- `sha256_hex`: `_sha2` (3.12) or `_sha256` (3.11), the built-in sha256 that hashlib falls back on.

Each falls back to the public module where the private one is missing (slower, never wrong).
Checked on CPython 3.11 (CPYTHON_VERSIONS_CHECKED; pyproject.toml allows >=3.11):
tests/rules/test_fences.py fails on another version, and names what moved when one of
these names moves or reads JSON differently from the json module.
"""

import _socket as csocket

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["CPYTHON_VERSIONS_CHECKED", "csocket", "dumps", "loads", "sha256_hex"]

# The interpreters (major.minor) whose C modules this module was read and tested against.
CPYTHON_VERSIONS_CHECKED = ("3.11",)


class _ScanContext:
    """What `_json.make_scanner` reads from json.JSONDecoder: the defaults of json.loads."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


_scan: "Any" = None  # the C scanner once made; False where `_json` has none


def loads(text: str | bytes) -> "Any":
    """json.loads(text) for one JSON value with whitespace around it, through `_json`'s C scanner
    (what json.loads itself runs) without importing the json package; ValueError when the text is
    not one JSON value."""
    global _scan
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if _scan is None:
        try:
            from _json import make_scanner
        except ImportError:
            _scan = False
        else:
            context: Any = _ScanContext()  # typeshed wants a JSONDecoder; it reads only these six
            _scan = make_scanner(context)
    if _scan is False:
        import json

        return json.loads(text)
    text = text.strip(" \t\n\r")
    try:
        value, end = _scan(text, 0)
    except StopIteration as exc:  # the scanner's "no JSON value starts here"
        raise ValueError(f"not JSON at character {exc.value}") from None
    if end != len(text):
        raise ValueError(f"extra data after the JSON value at character {end}")
    return value


def dumps(value: "Any") -> str:
    """json.dumps(value) (compact separators) for the flat requests and registry entries written
    here: strings through `_json`'s C encoder, the rest by hand; json.dumps for anything else."""
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        q: Any
        try:
            from _json import encode_basestring_ascii as q
        except ImportError:
            q = None
        if q is not None:
            parts = []
            for k, v in value.items():
                if v is True or v is False or v is None:
                    enc = "true" if v is True else "false" if v is False else "null"
                elif isinstance(v, str):
                    enc = q(v)
                elif type(v) is int:
                    enc = str(v)
                else:
                    break
                parts.append(f"{q(k)}:{enc}")
            else:
                return "{" + ",".join(parts) + "}"
    import json

    return json.dumps(value, separators=(",", ":"))


def sha256_hex(data: bytes) -> str:
    # CPython's built-in sha256 module, where there is one: hashlib loads OpenSSL (~4 ms).
    try:
        from _sha2 import sha256  # 3.12+
    except ImportError:
        try:
            from _sha256 import sha256  # 3.11
        except ImportError:
            from hashlib import sha256
    return sha256(data).hexdigest()
