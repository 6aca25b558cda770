"""The access log's handler: one line per request, written in batches, not one write() per line.

Why: a `logging.StreamHandler` writes and flushes every record, one write(2) per request; on the
counter path that was ~40 µs of ~330 µs per request here (benchmarks/measure/counter_rate.py, uvicorn). This
handler formats each record when it is logged (so its time and content are the request's) and
writes the lines collected so far every `FLUSH_S` seconds, when `MAX_LINES` are waiting, and at
exit. A line therefore reaches the stream at most `FLUSH_S` after its request; warnings and errors
(other loggers, their own handler) are written at once and may appear before the access lines of
the same half second. A process killed with SIGKILL loses at most that half second of access lines.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time

from memfs.logging_setup import TextFormatter, escape_line

FLUSH_S = 0.5
MAX_LINES = 512


def _formats_like_add_message(f: logging.Formatter) -> bool:
    """`f.format` of an INFO record is `add_message`'s line: the local time stamp to the second,
    `,` and milliseconds, the level, the logger's name, the message (TEXT_FORMAT's layout)."""
    record = logging.LogRecord("memfs.probe", logging.INFO, __file__, 0, "GET /probe 200 1.0ms", None, None)
    second = int(record.created)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
    try:
        return f.format(record) == f"{stamp},{int(record.msecs):03d} INFO memfs.probe: GET /probe 200 1.0ms"
    except Exception:
        return False


class BatchedLineHandler(logging.Handler):
    def __init__(self, stream, formatter: logging.Formatter | None = None):
        super().__init__()
        self.stream = stream
        if formatter is not None:
            self.setFormatter(formatter)
        self._lines: list[str] = []
        self._stamp_second = -1  # add_message's time stamp (to the second) and its second
        self._stamp = ""
        self._probed: logging.Formatter | None = None  # plain_text's last formatter, and its verdict
        self._probe_ok = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flush_periodically, name="access-log", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    @property
    def plain_text(self) -> bool:
        """The formatter writes an INFO line as `add_message` does: checked once per formatter
        (this runs per request) through its public `format()` on a probe record, not by reading
        its private format string."""
        f = self.formatter
        if f is None or type(f) not in (logging.Formatter, TextFormatter):  # a subclass may do more
            return False
        if f is not self._probed:
            self._probed, self._probe_ok = f, _formats_like_add_message(f)
        return self._probe_ok

    def add_message(self, logger_name: str, message: str) -> None:
        """An INFO line of `logger_name`, formatted here as the text formatter would (same time
        stamp, level, name, message) without a `LogRecord`, `findCaller` and `strftime` per line
        (~20 µs of a list page's service CPU; the stamp's seconds are formatted once a second).
        Only for a `plain_text` handler (RequestLine checks)."""
        now = time.time()
        second = int(now)
        if second != self._stamp_second:
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
            self._stamp_second = second
        line = f"{self._stamp},{int((now - second) * 1000):03d} INFO {logger_name}: {message}"
        with self.lock:  # type: ignore[union-attr]
            self._lines.append(line)
            full = len(self._lines) >= MAX_LINES
        if full:
            self.flush()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        with self.lock:  # type: ignore[union-attr]
            self._lines.append(line)
            full = len(self._lines) >= MAX_LINES
        if full:
            self.flush()

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            lines, self._lines = self._lines, []
        if lines:
            try:
                self.stream.write("\n".join(lines) + "\n")
                self.stream.flush()
            except (OSError, ValueError):  # the stream is gone (closed at shutdown): nothing to do
                pass

    def _flush_periodically(self) -> None:
        while not self._stop.wait(FLUSH_S):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        self.flush()
        super().close()


def install(logger_name: str, stream, formatter: logging.Formatter) -> None:
    """Give `logger_name` its own batched handler on `stream` (instead of the parent's)."""
    logger = logging.getLogger(logger_name)
    if any(isinstance(h, BatchedLineHandler) for h in logger.handlers):
        return
    logger.addHandler(BatchedLineHandler(stream, formatter))
    logger.propagate = False


class RequestLine:
    """The access log's line per request (method, path, status, time: every request is logged), as
    `logger.info("%s %s %d %.1fms", …)` would write it. When the logger's one handler is a plain
    text `BatchedLineHandler` (what `memfs serve` installs) and nothing filters, the line goes
    to it directly (`add_message`); any other setup (JSON lines, a test's handler, a filter) gets
    the ordinary `logger.info`."""

    def __init__(self, logger_name: str):
        self.logger = logging.getLogger(logger_name)

    def __call__(self, method: str, path: str, status: int, seconds: float) -> None:
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        # The decoded path, escaped: `%0a` or `%00` in a URL (unauthenticated) must not forge a line.
        method, path = escape_line(method), escape_line(path)
        handlers = logger.handlers
        if (
            len(handlers) == 1
            and type(handlers[0]) is BatchedLineHandler
            and not logger.propagate
            and not logger.filters
            and not handlers[0].filters
            and handlers[0].level <= logging.INFO
            and handlers[0].plain_text
        ):
            handlers[0].add_message(logger.name, f"{method} {path} {status} {seconds * 1000:.1f}ms")
            return
        logger.info("%s %s %d %.1fms", method, path, status, seconds * 1000)
