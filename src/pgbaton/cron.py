"""A schedule's fire times: a cron expression read as wall-clock time in a zone, turned
into instants, and what a catch-up policy enqueues after an outage. No I/O here: the
leader's scheduler (maintenance/), the API and the dashboard all compute with it.

Daylight saving time (docs/explanation/schedules.md, "Time zones and daylight saving
time"): a wall-clock time that does not exist (spring forward) fires once, at the first
instant after the gap; one that happens twice (fall back) fires at its first occurrence
only, unless the expression's hour field is `*`, whose ticks fire in both occurrences.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from .errors import InvalidArgument

# A schedule that does not fire within this horizon is a mistake ("0 0 30 2 *").
HORIZON = dt.timedelta(days=5 * 366)
CATCH_UP_POLICIES = ("skip", "latest", "all")
DEFAULT_CATCH_UP_LIMIT = 100
# At most this many missed ticks enqueued by one run of the leader (one transaction).
MAX_LIMIT = 10_000
# No zone's clocks go back by more than this (Lord Howe's half hour, the usual hour,
# the two hours of some wartime rules): how far around an instant a repeated hour is
# looked for. Walking it costs one step per tick, so a `*`-hour schedule of every
# second pays some thousands of steps per tick in the hours around a fall-back.
_TRANSITION_REACH = dt.timedelta(hours=2)


# Files of the zone database that are no zone: the host's own setting, which differs
# from host to host, and a template.
_NOT_ZONES = ("localtime", "posixrules", "Factory")


def check_timezone(name: object) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"timezone must be an IANA zone name, got {name!r}")
    try:
        if name in _NOT_ZONES:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidArgument(
            f"unknown time zone {name!r}: give an IANA zone name such as 'UTC' or "
            "'Europe/Berlin'"
        ) from None


def check_catch_up(policy: object, limit: object) -> tuple[str, int]:
    if policy not in CATCH_UP_POLICIES:
        raise InvalidArgument(
            f"catch_up must be one of {', '.join(CATCH_UP_POLICIES)}, got {policy!r}"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"catch_up_limit must be a whole number from 1 to "
                              f"{MAX_LIMIT}, got {limit!r}")
    return str(policy), limit


# croniter's named expressions, as the five fields they stand for.
_ALIASES = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class Cron:
    """A cron expression (5 fields, or 6 with seconds last) in a time zone."""

    def __init__(self, expression: str, timezone: str = "UTC") -> None:
        if not isinstance(expression, str) or not croniter.is_valid(expression):
            raise InvalidArgument(f"not a cron expression: {expression!r}")
        self.expression = expression
        self.timezone = timezone
        self.zone = check_timezone(timezone)
        # `*` hours: ticks in both occurrences of a repeated hour
        # (docs/explanation/schedules.md).
        fields = _ALIASES.get(expression.strip().lower(), expression).split()
        self._every_hour = fields[1] == "*"

    def __repr__(self) -> str:
        return f"<Cron {self.expression!r} {self.timezone}>"

    def check_fires(self, now: dt.datetime) -> None:
        """Refuse an expression with no tick within HORIZON of now ("0 0 30 2 *")."""
        try:
            first = self.next_after(now)
        except Exception:  # croniter gives up on dates that never come
            first = None
        if first is None or first - now > HORIZON:
            raise InvalidArgument(
                f"cron {self.expression!r} never fires (no tick within five years): "
                "check the day and month fields"
            )

    def next_after(self, instant: dt.datetime) -> dt.datetime:
        """The first fire time strictly after instant, in UTC."""
        near = self._near_transition(instant)
        wall = self._wall(instant) - (_TRANSITION_REACH if near else dt.timedelta(0))
        walk = croniter(self.expression, wall)
        best: dt.datetime | None = None
        stop: dt.datetime | None = None
        while True:
            wall = walk.get_next(dt.datetime)
            if stop is not None and wall > stop:
                break
            later = [t for t in self._instants(wall) if t > instant]
            if later and (best is None or min(later) < best):
                best = min(later)
            if best is not None:
                if not near:
                    break  # away from a transition, instants follow the wall clock
                stop = stop or wall + _TRANSITION_REACH
        assert best is not None
        return best

    def prev_before(self, instant: dt.datetime) -> dt.datetime | None:
        """The last fire time at or before instant, in UTC (None: none in HORIZON)."""
        near = self._near_transition(instant)
        wall = self._wall(instant) + (_TRANSITION_REACH if near else dt.timedelta(0))
        walk = croniter(self.expression, wall + dt.timedelta(seconds=1))
        best: dt.datetime | None = None
        stop: dt.datetime | None = None
        floor = self._wall(instant) - HORIZON
        while True:
            wall = walk.get_prev(dt.datetime)
            if (stop is not None and wall < stop) or wall < floor:
                break
            earlier = [t for t in self._instants(wall) if t <= instant]
            if earlier and (best is None or max(earlier) > best):
                best = max(earlier)
            if best is not None:
                if not near:
                    break
                stop = stop or wall - _TRANSITION_REACH
        return best

    def ticks(self, after: dt.datetime, upto: dt.datetime) -> Iterator[dt.datetime]:
        """The fire times in (after, upto], oldest first."""
        tick = self.next_after(after)
        while tick <= upto:
            yield tick
            tick = self.next_after(tick)

    def newest(self, after: dt.datetime, upto: dt.datetime, count: int) -> list[dt.datetime]:
        """The newest `count` fire times in (after, upto], oldest first: walked back from
        upto, so a long outage of a frequent schedule costs `count` steps, not one per
        tick missed."""
        found: list[dt.datetime] = []
        tick = self.prev_before(upto)
        while tick is not None and tick > after and len(found) < count:
            found.append(tick)
            tick = self.prev_before(tick - dt.timedelta(microseconds=1))
        return found[::-1]

    def in_zone(self, instant: dt.datetime) -> dt.datetime:
        return instant.astimezone(self.zone)

    # -- wall clock to instants -----------------------------------------------------

    def _wall(self, instant: dt.datetime) -> dt.datetime:
        return instant.astimezone(self.zone).replace(tzinfo=None)

    def _near_transition(self, instant: dt.datetime) -> bool:
        """Whether a repeated hour near instant can put a later tick before an earlier
        one: only for `*` hours (ticks in both occurrences), only when clocks go back.
        Elsewhere instants follow the wall clock (a gap's ticks all fire at its end), so
        the first wall-clock tick after instant is the next instant."""
        if not self._every_hour:
            return False
        before = (instant - _TRANSITION_REACH).astimezone(self.zone).utcoffset()
        after = (instant + _TRANSITION_REACH).astimezone(self.zone).utcoffset()
        return before is not None and after is not None and before > after

    def _instants(self, wall: dt.datetime) -> list[dt.datetime]:
        """The instants (UTC) a wall-clock time of the zone fires at: one, or two in a
        repeated hour when the hour field is `*`."""
        first = wall.replace(tzinfo=self.zone, fold=0)
        second = wall.replace(tzinfo=self.zone, fold=1)
        if first.utcoffset() == second.utcoffset():
            return [first.astimezone(dt.UTC)]
        if first.astimezone(dt.UTC).astimezone(self.zone).replace(tzinfo=None) != wall:
            return [self._gap_end(second, first)]  # spring forward: it does not exist
        if self._every_hour:
            return [first.astimezone(dt.UTC), second.astimezone(dt.UTC)]
        return [first.astimezone(dt.UTC)]

    def _gap_end(self, low: dt.datetime, high: dt.datetime) -> dt.datetime:
        """The instant the clocks jumped (the first valid one after a nonexistent wall
        time), to the second: between the wall time read with the offset after the jump
        (low, still before it) and with the one before (high, already after it)."""
        after = low.utcoffset()
        lo, hi = int(low.timestamp()), int(high.timestamp())
        while hi - lo > 1:
            middle = (lo + hi) // 2
            if dt.datetime.fromtimestamp(middle, self.zone).utcoffset() == after:
                hi = middle
            else:
                lo = middle
        return dt.datetime.fromtimestamp(hi, dt.UTC)


@functools.lru_cache(maxsize=1024)
def cron_of(expression: str, timezone: str) -> Cron:
    """A Cron, kept: checking and parsing an expression costs about a millisecond, which
    the leader would otherwise pay for each due schedule at each run."""
    return Cron(expression, timezone)


@dataclass(frozen=True)
class Plan:
    """What one run of the leader does for one due schedule: the ticks to enqueue
    (oldest first), how many missed ticks the policy left out, and the schedule's new
    last_tick and next_tick."""

    ticks: list[dt.datetime]
    dropped: int
    last_tick: dt.datetime
    next_tick: dt.datetime


def plan(
    cron: Cron,
    *,
    last_tick: dt.datetime | None,
    now: dt.datetime,
    window: float,
    catch_up: str,
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
) -> Plan:
    """The ticks due at `now` since last_tick. Those of the last `window` seconds (the
    handover window) are on time and always enqueued; older ones were missed and the
    policy decides: skip none, `latest` the newest, `all` the newest catch_up_limit.
    `dropped` counts the missed ticks left out, up to catch_up_limit + 1 (a long outage
    is not counted to its end)."""
    edge = now - dt.timedelta(seconds=window)
    start = edge if last_tick is None else last_tick
    on_time = list(cron.ticks(max(start, edge), now))
    missed: list[dt.datetime] = []
    dropped = 0
    if start < edge:
        keep = {"skip": 0, "latest": 1, "all": catch_up_limit}[catch_up]
        looked = cron.newest(start, edge, keep + 1)
        missed = looked[max(0, len(looked) - keep):] if keep else []
        dropped = len(looked) - len(missed)
    ticks = missed + on_time
    newest = ticks[-1] if ticks else cron.prev_before(now)
    last = max(start, newest) if newest is not None else start
    return Plan(ticks, dropped, last, cron.next_after(now))
