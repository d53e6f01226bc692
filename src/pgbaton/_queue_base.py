"""What the queue's twins share, without I/O: parameters that the queue's parts
(_queue/*_async.py) and their generated twins build alike, and the reading of their
rows. The engine's are in _engine_base.py.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

import psycopg

from ._checks import check_int4, check_name
from ._encoding import to_json
from .actions import Action
from .errors import InvalidArgument
from .job_filter import JobFilter, check_upto
from .limits import MAX_EVENT_PAYLOAD_BYTES
from .models import Enqueued


def schedule_now(now: dt.datetime | None) -> dt.datetime:
    """The clock of a schedule change: now, or the caller's (tests drive it)."""
    if now is None:
        return dt.datetime.now(dt.UTC)
    if not isinstance(now, dt.datetime) or now.utcoffset() is None:
        raise InvalidArgument(f"now must be an aware datetime, got {now!r}")
    return now


def unique_enqueued(row: dict[str, Any]) -> Enqueued:
    """What job_insert_unique's row says it did."""
    return Enqueued(id=int(row["id"]), created=row["outcome"] == "created",
                    outcome=row["outcome"], status=row["status"])


def unique_refused(error: psycopg.errors.UniqueViolation, which: str) -> Exception:
    """An operator action that would bring back a unique job whose key a newer job holds
    (docs/howto/unique.md): refused in the database, said plainly; else the error."""
    if error.diag.constraint_name != "jobs_unique_key":
        return error
    return InvalidArgument(
        f"{which} cannot be sent back: a newer job of its unique key blocks it (the "
        "database holds one per key); nothing was changed"
    )


def action_params(action: Action, priority: int | None, channel: str) -> dict[str, Any]:
    """An operator action's own parameters: its priority, and the channel it wakes."""
    params: dict[str, Any] = {}
    if action.takes_priority:
        # None is refused by check_int4, with the message the API always gave.
        params["priority"] = check_int4("priority", cast(int, priority))
    elif priority is not None:
        raise InvalidArgument(f"{action.name} takes no priority")
    if action.wakes:
        params["channel"] = channel
    return params


def filter_params(job_filter: JobFilter) -> dict[str, Any]:
    if not isinstance(job_filter, JobFilter):
        raise InvalidArgument(
            f"job_filter must be a pgbaton.JobFilter, got {type(job_filter).__name__}"
        )
    return job_filter.params()


def matching_params(job_filter: JobFilter, upto: int) -> dict[str, Any]:
    """A bulk action's: the filter, and the highest id it may act on."""
    return {**filter_params(job_filter), "upto": check_upto(upto)}


def event_params(event: str, payload: Any) -> dict[str, Any]:
    """An event's name and payload, checked before anything is sent."""
    name = check_name("event name", event)
    return {"event": name,
            "payload": to_json(payload, f"the payload of event {name!r}",
                               MAX_EVENT_PAYLOAD_BYTES)}
