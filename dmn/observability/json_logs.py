"""Structured JSON log lines (``--log-format json`` of ``dmn node`` and ``dmn controller``).

The project logs ``key=value`` pairs in its messages (``event=prepare-refused claim=<uid>
code=E_RESERVED``). The JSON formatter keeps the message and lifts every such pair into a
top-level field, so a log pipeline can filter on ``claim``, ``pod``, ``operation``,
``effect`` or ``code`` without parsing text; fields passed with ``extra=`` are added too.
Field names never overwrite the fixed keys (``ts``, ``level``, ``logger``, ``msg``).
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

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


def configure(level: str, fmt: str) -> None:
    """Root logging for a process: ``fmt`` is ``text`` (key=value lines) or ``json``."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
