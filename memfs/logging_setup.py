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
import sys
import time

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


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
    formatter = JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return formatter
