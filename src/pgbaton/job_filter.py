"""JobFilter: which jobs an operator means ("failed jobs of task X since 10:00").

The dashboard's job list, its bulk actions and the command line's bulk forms all take
one, read from what a person typed by filter_of. Its fields are the parameters of the
job_filter fragment of the SQL (every statement that filters); None means "any".
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ._checks import check_text
from .errors import InvalidArgument
from .limits import INT8_MAX, MAX_DASHBOARD_PAGE, MAX_FILTER_TEXT
from .models import STATES


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Jobs by status, queue, task, key, a substring of their args or errors, the
    time they finished (or were created, while unfinished): since <= t < until, and
    `ids`, a selection (the dashboard's checked rows; at most MAX_SELECTED)."""

    status: str | None = None
    queue: str | None = None
    task: str | None = None
    key: str | None = None
    text: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.ids is not None:
            object.__setattr__(self, "ids", check_ids(self.ids))
        if self.status is not None and self.status not in STATES:
            raise InvalidArgument(
                f"status {self.status!r} is not one of {', '.join(STATES)}"
            )
        for name in ("queue", "task", "key", "text"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"{name} must be a non-empty string, got {value!r}")
            check_text(name, value)
            if len(value) > MAX_FILTER_TEXT:
                raise InvalidArgument(f"{name} is longer than {MAX_FILTER_TEXT} characters")
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, dt.datetime) or value.tzinfo is None
            ):
                raise InvalidArgument(f"{name} must be a datetime with a time zone")

    def params(self) -> dict[str, Any]:
        """The statements' filter parameters."""
        fields = asdict(self)
        fields["ids"] = list(self.ids) if self.ids is not None else None
        return fields

    def is_empty(self) -> bool:
        return not any(self.params().values())


def check_ids(ids: object) -> tuple[int, ...]:
    """A selection of job ids: 1 to MAX_SELECTED whole numbers, each a job id."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, (tuple, list)):
        raise InvalidArgument(f"ids must be a list of job ids, got {type(ids).__name__}")
    if not 1 <= len(ids) <= MAX_SELECTED:
        raise InvalidArgument(f"ids selects 1 to {MAX_SELECTED} jobs, got {len(ids)}")
    for value in ids:
        if isinstance(value, bool) or not isinstance(value, int) or not (
                1 <= value <= INT8_MAX):
            raise InvalidArgument(f"ids holds {value!r}, not a job id (1 to {INT8_MAX})")
    return tuple(dict.fromkeys(ids))


def check_upto(upto: int) -> int:
    """The newest job id a bulk action may touch (0 when the filter matched nothing)."""
    if isinstance(upto, bool) or not isinstance(upto, int) or not 0 <= upto <= INT8_MAX:
        raise InvalidArgument(f"upto is a job id from 0 to {INT8_MAX}, got {upto!r}")
    return upto


# The most jobs one selection names: a page of the dashboard's list.
MAX_SELECTED = MAX_DASHBOARD_PAGE

# A filter's fields as a person types them, in a form or as command-line options.
FILTER_FIELDS = ("status", "queue", "task", "key", "text", "since", "until")


def parse_time(name: str, text: str, now: dt.datetime | None = None) -> dt.datetime:
    """An ISO 8601 date or time ("2026-12-01T10:00", "2026-12-01", with or without a zone)
    or a time of day ("10:00": today); without a zone, this machine's local time."""
    now = now or dt.datetime.now().astimezone()
    text = text.strip()
    try:
        if len(text) <= 8 and ":" in text:
            clock = dt.time.fromisoformat(text)
            value = dt.datetime.combine(now.date(), clock)
        else:
            value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(
            f"{name}={text!r} is not a time: use 10:00, 2026-12-01 or 2026-12-01T10:00+00:00"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=now.tzinfo)
    return value


def filter_of(fields: Mapping[str, str | None]) -> JobFilter:
    """The filter of typed fields (FILTER_FIELDS; missing or blank means any), `since`
    and `until` read by parse_time; InvalidArgument names what was wrong."""
    values = {name: (fields.get(name) or "").strip() or None for name in FILTER_FIELDS}
    since = values.pop("since")
    until = values.pop("until")
    return JobFilter(
        status=values["status"], queue=values["queue"], task=values["task"],
        key=values["key"], text=values["text"],
        since=parse_time("since", since) if since else None,
        until=parse_time("until", until) if until else None,
    )
