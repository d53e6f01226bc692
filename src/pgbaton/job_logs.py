"""Each job's own log lines: what a running handler logs, kept with its run (an attempt
may run more than once: a snooze, a durable sleep or a release gives it back), bounded
(docs/howto/progress-and-logs.md). No I/O: the completer writes what is kept here, and
the executor or the stopping worker what a run that suspends or is released kept.

One logging.Handler on the root logger per process (installed by the first worker that
wants it, removed by the last), and a context variable naming the attempt whose handler
runs in this context. asyncio gives each handler's task a copy of the context it was
made in, and the executor runs a sync handler in a copy of its task's context, so a
record finds its attempt in either, and a record logged outside any handler (the
worker's own, another thread's) finds none and costs one look-up. An attempt's
AttemptLog is made at its first record kept: a job that logs nothing costs one
variable set (most jobs, at a drain's thousands a second).
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
import time
from typing import Any, Protocol

from .limits import MAX_JOB_LOG_BYTES, MAX_JOB_LOG_LINE_CHARS, MAX_JOB_LOG_LINES
from .outcomes import Discard

# How a run ended, as its job_logs row says (`ended`) and every reader shows it.
ENDINGS = frozenset({
    "succeeded", "failed", "discarded", "cancelled", "snoozed", "slept", "waited",
    "released",
})


def ending(*, ok: bool, snoozed: bool, end: str | None, error: object) -> str:
    """How a run whose outcome is written ended: `failed` whether or not it is retried;
    `discarded` for pgbaton.Discard (it ends the job as failed at once)."""
    if ok:
        return "succeeded"
    if snoozed:
        return "snoozed"
    if end == "cancelled":
        return "cancelled"
    return "discarded" if isinstance(error, Discard) else "failed"


class Attempt(Protocol):
    """Where a running attempt's records go (the worker's Running): the level kept
    from, and its AttemptLog, None until its first record kept."""

    log_level: int
    log: AttemptLog | None


_current: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar(
    "pgbaton_attempt_log", default=None
)


def _storable(text: str) -> tuple[str, int]:
    """Text jsonb can hold (no NUL character, no lone surrogate) and its size in UTF-8."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        return text, len(text.encode("utf-8"))
    except UnicodeEncodeError:
        encoded = text.encode("utf-8", "backslashreplace")
        return encoded.decode("utf-8"), len(encoded)


@functools.lru_cache(maxsize=1024)
def _logger_name(name: str) -> str:
    """A logger's name as stored: the few names a process logs under, made storable once."""
    return _storable(name)[0]


# The ISO 8601 text of the last second stamped: datetime's isoformat() would cost most
# of a captured line's time. One tuple in a list: a thread reads it whole.
_LAST_SECOND: list[tuple[int, str]] = [(-1, "")]


def _stamp(created: float) -> str:
    """record.created as ISO 8601 in UTC, to the microsecond."""
    second = int(created)
    cached = _LAST_SECOND[0]
    if cached[0] != second:
        cached = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        _LAST_SECOND[0] = cached
    return f"{cached[1]}.{int((created - second) * 1e6):06d}+00:00"


# One lock for every attempt's adds, as a logging.Handler has one for its emits: held
# for a few list operations, and made once, not once per job. Re-entrant, as logging's
# own: a garbage collection in the middle of an add can run a finaliser that logs (an
# asyncio future whose exception was never retrieved), in the same thread and the same
# attempt's context; a plain lock would stop that thread for good, and with the event
# loop's thread the whole worker.
_ADD_LOCK = threading.RLock()


class AttemptLog:
    """The lines one attempt has logged so far, at most MAX_JOB_LOG_LINES lines and
    MAX_JOB_LOG_BYTES bytes of message text; the rest is counted in `dropped`. Threads
    of one attempt (a sync handler and the loop) may add at once: _ADD_LOCK keeps the
    counts whole."""

    __slots__ = ("dropped", "level", "lines", "size")

    def __init__(self, level: int = logging.INFO) -> None:
        self.level = level
        self.lines: list[dict[str, Any]] = []
        self.dropped = 0
        self.size = 0

    def add(self, record: logging.LogRecord, message: str) -> None:
        if len(message) > MAX_JOB_LOG_LINE_CHARS:
            message = message[:MAX_JOB_LOG_LINE_CHARS] + " [cut]"
        message, size = _storable(message)
        # Built before the lock: what runs Python code (and so may log) stays outside it.
        line = {
            "at": _stamp(record.created),
            "level": record.levelname,
            "logger": _logger_name(record.name),
            "message": message,
        }
        with _ADD_LOCK:
            if len(self.lines) >= MAX_JOB_LOG_LINES or self.size + size > MAX_JOB_LOG_BYTES:
                self.dropped += 1
                return
            self.size += size
            self.lines.append(line)

    def take(self) -> tuple[list[dict[str, Any]], int] | None:
        """The lines and the dropped count, once; None when nothing was logged."""
        if not self.lines and not self.dropped:
            return None  # the usual case, read without the lock
        with _ADD_LOCK:
            lines, dropped = self.lines, self.dropped
            self.lines, self.dropped, self.size = [], 0, 0
        return lines, dropped


class JobLogCapture(logging.Handler):
    """Hands each record to the attempt running in the context it was logged in."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self._formatter = logging.Formatter()

    def handle(self, record: logging.LogRecord) -> bool:
        # Not Handler.handle: no handler-wide lock for every record of the process;
        # AttemptLog takes its own, and only for a record of a running attempt.
        attempt = _current.get()
        if attempt is None or record.levelno < attempt.log_level:
            return False
        self.emit_to(attempt.log or _opened(attempt), record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        attempt = _current.get()
        if attempt is not None and record.levelno >= attempt.log_level:
            self.emit_to(attempt.log or _opened(attempt), record)

    def emit_to(self, log: AttemptLog, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message = f"{message}\n{self._formatter.formatException(record.exc_info)}"
            elif record.exc_text:
                message = f"{message}\n{record.exc_text}"
        except Exception as error:  # a bad format string must not break the handler
            message = f"(a record whose message could not be formatted: {error!r}; " \
                      f"msg={record.msg!r})"
        log.add(record, message)


class _Installation:
    """The one capture of this process and how many workers asked for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.handler: JobLogCapture | None = None
        self.users = 0


_INSTALLATION = _Installation()


def install() -> None:
    """Put the capture on the root logger, once per process however many workers ask."""
    with _INSTALLATION.lock:
        _INSTALLATION.users += 1
        if _INSTALLATION.handler is None:
            _INSTALLATION.handler = JobLogCapture()
            logging.getLogger().addHandler(_INSTALLATION.handler)


def uninstall() -> None:
    """The last worker that installed the capture takes it off the root logger."""
    with _INSTALLATION.lock:
        _INSTALLATION.users = max(0, _INSTALLATION.users - 1)
        if _INSTALLATION.users == 0 and _INSTALLATION.handler is not None:
            logging.getLogger().removeHandler(_INSTALLATION.handler)
            _INSTALLATION.handler = None


def _opened(attempt: Attempt) -> AttemptLog:
    """The attempt's log, made at its first record (a sync handler's thread and the
    loop may log their first at once: one log)."""
    with _ADD_LOCK:
        if attempt.log is None:
            attempt.log = AttemptLog(attempt.log_level)
        return attempt.log


# begin_attempt(attempt) routes the records of the current context to `attempt` (a
# handler's own task: the variable is set in that task's context only), whose log is
# made at the first; end_attempt(the token it returned) when the attempt ends. The
# variable's own methods: no Python call of ours, each job.
begin_attempt = _current.set
end_attempt = _current.reset


class _Holder:
    __slots__ = ("log", "log_level")
    log: AttemptLog | None
    log_level: int

    def __init__(self, log: AttemptLog) -> None:
        self.log_level, self.log = log.level, log


def begin(level: int) -> AttemptLog:
    """Start capturing for the attempt running in the current context into a log made
    now (begin_attempt, with a log at once)."""
    log = AttemptLog(level)
    begin_attempt(_Holder(log))
    return log


def current() -> AttemptLog | None:
    attempt = _current.get()
    return None if attempt is None else attempt.log
