"""The one log setup of every memfs process: `memfs serve`, the mount's daemon, `memfs worker` and
the dev mount all call `setup_logging` once, first thing.

One line per record on stderr (the daemon's stderr is its state dir's memfs.log; a container's is
its log), as text or as JSON for a log collector. The root logger's handlers are replaced, not
added to, so a second call never doubles a line. httpx logs every request at INFO: that is noise
at a sync tick's rate, so it is held to warnings. Like `limits.py`, this imports nothing from memfs.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time

from memfs.protocol import LOG_FORMATS as LOG_FORMATS  # the command line's vocabulary

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


# What would break a log line or mislead its reader: C0 and C1 controls (newline, NUL, escape
# sequences), DEL, the Unicode line and paragraph separators, and the bidi controls that reorder
# what a terminal shows. A request path, a file name or a store name can carry any of them.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape_char(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_line(text: str) -> str:
    """`text` on one line and as it reads: the characters above as \\xNN / \\uNNNN."""
    return _UNSAFE.sub(_escape_char, text) if _UNSAFE.search(text) else text


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT with the message escaped (`escape_line`): a value logged from a request or a
    file name never forges a line. A traceback (exc_text) stays on its own lines, after it."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_line(record.message)
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(fmt: str = "text", level: int = logging.INFO) -> logging.Formatter:
    """Returns the formatter, for a process that gives one logger a handler of its own (serve's
    batched access log) with the same line format."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {LOG_FORMATS}, got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    formatter = JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return formatter
