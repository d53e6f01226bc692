"""JobFilter: which jobs an operator means ("failed jobs of task X since 10:00").

The dashboard's job list, its bulk actions and the command line's bulk forms all take
one. Its fields are the parameters of the filtered statements in sql/dashboard.sql and
of the *_matching actions in sql/queries.sql; None means "any".
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

from ._checks import check_text
from .errors import InvalidArgument
from .limits import INT8_MAX
from .models import STATUSES

MAX_TEXT = 200


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Jobs by status, queue, task, key, a substring of their args or errors, and the
    time they finished (or were created, while unfinished): since <= t < until."""

    status: str | None = None
    queue: str | None = None
    task: str | None = None
    key: str | None = None
    text: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in STATUSES:
            raise InvalidArgument(
                f"status {self.status!r} is not one of {', '.join(STATUSES)}"
            )
        for name in ("queue", "task", "key", "text"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"{name} must be a non-empty string, got {value!r}")
            check_text(name, value)
            if len(value) > MAX_TEXT:
                raise InvalidArgument(f"{name} is longer than {MAX_TEXT} characters")
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, dt.datetime) or value.tzinfo is None
            ):
                raise InvalidArgument(f"{name} must be a datetime with a time zone")

    def params(self) -> dict[str, Any]:
        """The statements' filter parameters."""
        return asdict(self)

    def is_empty(self) -> bool:
        return not any(self.params().values())


def check_upto(upto: int) -> int:
    """The newest job id a bulk action may touch (0 when the filter matched nothing)."""
    if isinstance(upto, bool) or not isinstance(upto, int) or not 0 <= upto <= INT8_MAX:
        raise InvalidArgument(f"upto is a job id from 0 to {INT8_MAX}, got {upto!r}")
    return upto
