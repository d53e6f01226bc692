"""Log output for the command line: readable text for people, one JSON object a line for
log collectors, each carrying a record's `extra` fields (job_id, task, queue, ...)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any, TextIO

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMATS = ("text", "json")

# Every attribute a LogRecord has before `extra` adds its own.
_RECORD_ATTRIBUTES = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None))
) | {"message", "asctime", "taskName"}


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a caller passed with `extra=`, in the order given."""
    return {
        name: value for name, value in vars(record).items()
        if name not in _RECORD_ATTRIBUTES and not name.startswith("_")
    }


def _timestamp(record: logging.LogRecord) -> str:
    moment = dt.datetime.fromtimestamp(record.created, tz=dt.UTC)
    return moment.isoformat(timespec="milliseconds")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the extra fields, and
    the traceback as `exception` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in extra_fields(record).items():
            entry.setdefault(name, value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message key=value ...`: the extra fields after the message."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        fields = " ".join(f"{k}={v}" for k, v in extra_fields(record).items())
        if fields:
            line = f"{line} {fields}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def configure(
    level: str = "INFO", log_format: str = "text", stream: TextIO | None = None
) -> None:
    """Send every logger's records (pgbaton's and the application's) to one stream."""
    if level.upper() not in LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r} is not one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
