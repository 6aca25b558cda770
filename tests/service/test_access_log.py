"""The access log's line per request (access_log.RequestLine): the same line as `logger.info`,
written straight to the batched handler when its format is the plain text one."""

from __future__ import annotations

import io
import json
import logging
import time

import pytest

from memfs.logging_setup import TEXT_FORMAT, JsonFormatter
from memfs.service import access_log


@pytest.fixture
def installed(request):
    """A logger with `access_log.install`'s batched handler on a StringIO, removed afterwards."""
    made = []

    def make(formatter: logging.Formatter):
        name = f"test.access.{request.node.name}.{len(made)}"
        stream = io.StringIO()
        access_log.install(name, stream, formatter)
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        made.append(logger)
        return logger, stream

    yield make
    for logger in made:
        for h in list(logger.handlers):
            logger.removeHandler(h)
            h.close()


def _lines(logger, stream) -> list[str]:
    logger.handlers[0].flush()
    return stream.getvalue().splitlines()


@pytest.mark.timeout(30)
def test_the_direct_line_is_the_line_logger_info_writes(installed, monkeypatch):
    logger, stream = installed(logging.Formatter(TEXT_FORMAT))
    line = access_log.RequestLine(logger.name)
    for at in (1_764_640_000.0, 1_764_640_000.9994, 1_764_640_001.0205):
        monkeypatch.setattr(time, "time", lambda at=at: at)  # the record's time and the stamp's
        line("GET", "/v1/memory_stores/m/memories", 200, 0.0012345)
        logger.info("%s %s %d %.1fms", "GET", "/v1/memory_stores/m/memories", 200, 0.0012345 * 1000)
    got = _lines(logger, stream)
    assert len(got) == 6
    assert got[0::2] == got[1::2]
    assert got[0].endswith(" INFO " + logger.name + ": GET /v1/memory_stores/m/memories 200 1.2ms")


@pytest.mark.timeout(30)
def test_the_direct_line_takes_no_log_record_and_other_formats_get_logger_info(installed, monkeypatch):
    text, text_stream = installed(logging.Formatter(TEXT_FORMAT))
    made: list[str] = []
    real = logging.Logger.makeRecord

    def counting(self, name, *a, **kw):
        made.append(name)
        return real(self, name, *a, **kw)

    monkeypatch.setattr(logging.Logger, "makeRecord", counting)
    access_log.RequestLine(text.name)("GET", "/healthz", 200, 0.0001)
    assert made == []  # the cheaper path: no LogRecord
    assert _lines(text, text_stream)[0].endswith("GET /healthz 200 0.1ms")

    js, js_stream = installed(JsonFormatter())
    access_log.RequestLine(js.name)("POST", "/v1/sessions", 401, 0.25)
    assert made == [js.name]  # the ordinary logger.info
    assert json.loads(_lines(js, js_stream)[0])["message"] == "POST /v1/sessions 401 250.0ms"

    js.setLevel(logging.WARNING)  # a level above INFO: no line at all
    access_log.RequestLine(js.name)("GET", "/x", 200, 0.1)
    text.setLevel(logging.WARNING)
    access_log.RequestLine(text.name)("GET", "/x", 200, 0.1)
    assert len(_lines(js, js_stream)) == 1 and len(_lines(text, text_stream)) == 1
