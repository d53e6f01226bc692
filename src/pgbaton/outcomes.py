"""What a handler may raise to end its attempt otherwise than by returning or failing:
Snooze (later, the attempt not counted), Cancel (ends `cancelled`) and Discard (ends
`failed` at once). docs/howto/retries.md.

    PgbatonError
     +-- HandlerOutcome        raised by a handler; the worker writes it, fenced
          +-- Snooze           back to pending, run_at moved, attempt given back
          +-- Cancel           cancelled, with its reason; no retry
          +-- Discard          failed at once, whatever attempts are left
     +-- SnoozeLimit           the error of a job that snoozed past its max_snoozes

Each checks what it is given when it is made: a bad value raises InvalidArgument from
the handler's own raise, so its attempt fails as any error would and nothing else is
written.
"""

from __future__ import annotations

import datetime as dt

from ._checks import check_run_at, check_seconds
from .errors import InvalidArgument, PgbatonError
from .limits import MAX_OUTCOME_TEXT


def _check_text(what: str, text: object, *, required: bool) -> str | None:
    if text is None and not required:
        return None
    if not isinstance(text, str) or (required and not text):
        raise InvalidArgument(
            f"{what} must be a{' non-empty' if required else ''} string, got {text!r:.80}"
        )
    if len(text) > MAX_OUTCOME_TEXT:
        raise InvalidArgument(
            f"{what} must be at most {MAX_OUTCOME_TEXT:,} characters (limits.py), got "
            f"{len(text):,}"
        )
    return text


class HandlerOutcome(PgbatonError):
    """Base of the exceptions a handler raises to choose how its job goes on. A worker
    that lost the claim writes none of them (they are fenced like every outcome)."""


class Snooze(HandlerOutcome):
    """Try again later without spending an attempt: `raise Snooze(30)` or
    `raise Snooze(until=datetime)`. The job goes back to pending with its run_at moved
    and its claim released; its `snoozes` count goes up by one, and past its task's
    max_snoozes the job ends `failed` (SnoozeLimit). A keyed job stays its key's oldest:
    the later jobs of its key wait for it. `note` says why, in the worker's log, the
    job.snoozed event, and the error of a job that snoozed too often."""

    def __init__(
        self,
        seconds: float | None = None,
        *,
        until: dt.datetime | None = None,
        note: str | None = None,
    ) -> None:
        if (seconds is None) == (until is None):
            raise InvalidArgument(
                "Snooze takes either seconds or until=, not "
                + ("both" if seconds is not None else "neither")
            )
        self.seconds = None if seconds is None else check_seconds("Snooze seconds", seconds)
        self.until = None if until is None else check_run_at(until)
        self.note = _check_text("Snooze note", note, required=False)
        when = (f"{self.seconds:g} s" if self.seconds is not None
                else f"until {self.until.isoformat()}" if self.until is not None else "")
        super().__init__(f"snoozed {when}" + (f": {self.note}" if self.note else ""))


class Cancel(HandlerOutcome):
    """End the job as `cancelled`, its reason kept in its errors; it is not retried.
    The jobs that wait for it are cancelled too (docs/explanation/dependencies.md)."""

    def __init__(self, reason: str) -> None:
        self.reason = _check_text("Cancel reason", reason, required=True)
        super().__init__(reason)


class Discard(HandlerOutcome):
    """End the job as `failed` now, whatever attempts it has left, with the reason as
    its error: the work can never succeed (bad input, a deleted record)."""

    def __init__(self, reason: str) -> None:
        self.reason = _check_text("Discard reason", reason, required=True)
        super().__init__(reason)


class SnoozeLimit(PgbatonError):
    """The error a job ends `failed` with when its handler snoozed once more past its
    task's max_snoozes."""
