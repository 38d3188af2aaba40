"""Structured JSON log lines (``--log-format json`` of ``dmn node`` and ``dmn controller``).

The project logs ``key=value`` pairs in its messages (``event=prepare-refused claim=<uid>
code=E_RESERVED``). The JSON formatter keeps the message and lifts every such pair into a
top-level field, so a log pipeline can filter on ``claim``, ``pod``, ``operation``,
``effect`` or ``code`` without parsing text; fields passed with ``extra=`` are added too.
Field names never overwrite the fixed keys (``ts``, ``level``, ``logger``, ``msg``).
"""

from __future__ import annotations

import atexit
import json
import logging
import re
import time
from typing import Any

from dmn.serial_worker import SerialWorker

_PAIR = re.compile(r"(?<![\w.-])([a-z][A-Za-z0-9_]*)=(\"[^\"]*\"|\S+)")
_FIXED = ("ts", "level", "logger", "msg")
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
}


def fields_of(message: str) -> dict[str, str]:
    """The ``key=value`` pairs of a message (a quoted value loses its quotes)."""
    out: dict[str, str] = {}
    for key, value in _PAIR.findall(message):
        out.setdefault(key, value[1:-1] if value.startswith('"') else value)
    return out


class JsonFormatter(logging.Formatter):
    converter = time.gmtime  # type: ignore[assignment]  # timestamps are UTC (the trailing Z)

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        entry: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": message,
        }
        for key, value in fields_of(message).items():
            if key not in _FIXED:
                entry[key] = value
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in _FIXED and not key.startswith("_"):
                entry[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _QueueingHandler(logging.Handler):
    """Queues the record itself for the writer, its message resolved now (arguments that
    change later cannot change the line); ``extra=`` fields and exception info are left
    for the writer's formatter, so the lines are exactly those a handler in the caller's
    thread wrote."""

    def __init__(self, writer: SerialWorker[logging.LogRecord]) -> None:
        super().__init__()
        self.writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None
        self.writer.put(record)


_writer: SerialWorker[logging.LogRecord] | None = None


def configure(level: str, fmt: str) -> None:
    """Root logging for a process: ``fmt`` is ``text`` (key=value lines) or ``json``.

    Lines are written by one writer thread, in order; a logging thread only queues its
    record. Why: an NRI hook logs a few lines, and each write to stderr (a file, or on a
    node the runtime's log pipe, which blocks while its reader lags) cost the hook the
    write and taking the interpreter lock back after it — 7.5 % of the agent's
    RunPodSandbox samples in ``benchmarks/pod_storm.py``. :func:`flush` waits until what
    was logged is written (before a last line written directly to stderr); interpreter
    exit drains the queue (``atexit``); a SIGKILL loses at most the lines still queued.
    Calling this again replaces the earlier writer, after draining it.
    """
    global _writer
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    writer: SerialWorker[logging.LogRecord] = SerialWorker(
        "log-writer", handler.handle, start_on_put=False
    ).start()
    root = logging.getLogger()
    root.handlers[:] = [_QueueingHandler(writer)]
    root.setLevel(level.upper())
    if _writer is not None:
        _writer.close(_DRAIN_TIMEOUT)
    else:
        atexit.register(_drain)
    _writer = writer


_DRAIN_TIMEOUT = 5.0


def flush() -> None:
    """Wait (5 s at most) until every line logged so far is written."""
    if _writer is not None:
        _writer.flush(_DRAIN_TIMEOUT)


def _drain() -> None:
    if _writer is not None:
        _writer.close(_DRAIN_TIMEOUT)
