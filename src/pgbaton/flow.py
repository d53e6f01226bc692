"""Flow control's plain data: a queue's settings, rate limits and their parsing, and the
checks of every limit. No I/O (the statements are queue_* and job_claim_flow in
sql/queues.sql and sql/jobs.sql; the design is docs/explanation/flow_control.md)."""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._checks import _brief, check_ascii, parse_whole
from .errors import InvalidArgument
from .limits import (
    INT4_MAX,
    INT4_MIN,
    MAX_CONCURRENCY,
    MAX_RATE_LIMIT,
    MAX_RATE_PERIOD_SECONDS,
    MIN_AGING_SECONDS,
    MIN_RATE_PERIOD_SECONDS,
)
from .models import Claim

_UNIT_SECONDS = {
    "ms": 0.001,
    "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}
# ASCII only (check_ascii says why); a sign is read, so that '-1/s' is refused as the
# limit out of range it is, not as text that is not a rate.
_RATE = re.compile(r"\s*([+-]?[0-9]+)\s*/\s*([0-9]+(?:\.[0-9]+)?)?\s*([a-z]+)\s*", re.ASCII)


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `limit` starts in any sliding window of `period` seconds."""

    limit: int
    period: float

    def __str__(self) -> str:
        for unit in ("d", "h", "min", "s"):
            if self.period == _UNIT_SECONDS[unit]:
                return f"{self.limit}/{unit}"
        return f"{self.limit}/{self.period:g}s"


@dataclass(frozen=True, slots=True)
class Aging:
    """Every `every` seconds, the queue's jobs due at least that long gain `step` of
    priority, up to `cap`: old jobs are not starved by a flood of newer, higher ones."""

    every: float
    step: int
    cap: int


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """One queue's flow settings as stored, and how many of its jobs are held now."""

    name: str
    paused: bool
    concurrency: int | None
    rate: Rate | None
    held: int
    updated_at: dt.datetime | None
    aging: Aging | None = None
    key_concurrency: int | None = None  # per limit key (enqueue's limit_key=)
    key_rate: Rate | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> QueueSettings:
        rate = None
        if row["rate_limit"] is not None:
            rate = Rate(row["rate_limit"], float(row["rate_period_seconds"]))
        aging = None
        if row.get("aging_step") is not None:
            aging = Aging(float(row["aging_every_seconds"]), row["aging_step"],
                          row["aging_cap"])
        return cls(
            name=row["name"], paused=bool(row["paused"]), concurrency=row["concurrency"],
            rate=rate, held=int(row["held"] or 0), updated_at=row["updated_at"],
            aging=aging, key_concurrency=row.get("key_concurrency"),
            key_rate=None if row.get("key_rate_limit") is None else Rate(
                row["key_rate_limit"], float(row["key_rate_period_seconds"])),
        )


def parse_rate(value: object) -> Rate | None:
    """A rate as `Rate`, `(limit, seconds)` or text such as "100/s", "10/min", "5/2h";
    None means no rate limit. Anything else is refused with one line saying why."""
    if value is None:
        rate = None
    elif isinstance(value, Rate) or (isinstance(value, tuple) and len(value) == 2):
        # A Rate is a dataclass that converts nothing: Rate(1.5, 1) would be stored
        # as 2 per second.
        limit, period = (value.limit, value.period) if isinstance(value, Rate) else value
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise InvalidArgument(f"rate limit must be a whole number, got {_brief(limit)}")
        if isinstance(period, bool) or not isinstance(period, int | float):
            raise InvalidArgument(f"rate period must be seconds, got {_brief(period)}")
        if isinstance(period, int) and period > MAX_RATE_PERIOD_SECONDS:
            period = math.inf  # float() of a huge int raises OverflowError
        rate = Rate(limit, float(period))
    elif isinstance(value, str):
        shown = _brief(value)
        check_ascii(f"rate {shown}", value)
        match = _RATE.fullmatch(value.lower())
        if not match or match.group(3) not in _UNIT_SECONDS:
            raise InvalidArgument(
                f"rate {shown} is not understood: write starts per period, such as "
                "'100/s', '10/min', '5/2h' (units: ms, s, min, h, d)"
            )
        count, every, unit = match.groups()
        limit = parse_whole(f"rate {shown}", count)
        rate = Rate(limit, float(every or 1) * _UNIT_SECONDS[unit])
    else:
        raise InvalidArgument(
            f"rate must be text such as '100/s', a (limit, seconds) pair or None, "
            f"got {value!r}"
        )
    if rate is None:
        return None
    if isinstance(value, Rate | tuple):
        shown = str(rate)
    if rate.limit < 1:
        raise InvalidArgument(
            f"rate {shown} allows {rate.limit} starts per window: the limit must be at "
            "least 1 (pause the queue to start none)"
        )
    if rate.limit > MAX_RATE_LIMIT:
        raise InvalidArgument(
            f"rate {shown} allows {rate.limit} starts per window: the limit must be at "
            f"most {MAX_RATE_LIMIT:,} (a shorter window for more)"
        )
    if not (
        math.isfinite(rate.period)
        and MIN_RATE_PERIOD_SECONDS <= rate.period <= MAX_RATE_PERIOD_SECONDS
    ):
        raise InvalidArgument(
            f"rate period of {rate.period:g} s is out of range: use "
            f"{MIN_RATE_PERIOD_SECONDS:g} s to {MAX_RATE_PERIOD_SECONDS / 86400:g} days"
        )
    return rate


def check_concurrency(value: object) -> int | None:
    """A concurrency limit: None (no limit) or a whole number from 1 up."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"concurrency must be a whole number or None, got {value!r}")
    if not 1 <= value <= MAX_CONCURRENCY:
        raise InvalidArgument(
            f"concurrency must be 1 to {MAX_CONCURRENCY:,} (pause the queue to run none), "
            f"got {value}"
        )
    return value


@dataclass(frozen=True, slots=True)
class ClaimBatch:
    """What one claim got, and, when a rate-limited queue it serves is full, in how
    many seconds its next start is due (so the worker sleeps until then, not polls)."""

    claims: list[Claim]
    next_slot_in: float | None = None


def check_aging(every: object, step: object, cap: object) -> Aging | None:
    """An aging policy: `every` seconds (1 s to a week), `step` >= 1, `cap` a priority;
    every=None turns aging off."""
    if every is None:
        return None
    if isinstance(every, bool) or not isinstance(every, int | float) or not (
        math.isfinite(every) and MIN_AGING_SECONDS <= every <= MAX_RATE_PERIOD_SECONDS
    ):
        raise InvalidArgument(
            f"aging every must be {MIN_AGING_SECONDS:g} s to "
            f"{MAX_RATE_PERIOD_SECONDS / 86400:g} days, "
            f"got {every!r}"
        )
    if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= INT4_MAX:
        raise InvalidArgument(f"aging step must be a whole number from 1, got {step!r}")
    if isinstance(cap, bool) or not isinstance(cap, int) or not INT4_MIN <= cap <= INT4_MAX:
        raise InvalidArgument(f"aging cap must be a priority (a 32-bit integer), got {cap!r}")
    return Aging(float(every), step, cap)
