"""The history mover's partition arithmetic (pgbaton/history.py), which runs between
the statements of sql/history.sql: missing ranges and names, whatever the time zone of
the datetimes the session hands back."""

from __future__ import annotations

import datetime as dt

from pgbaton import history

UTC = dt.UTC
HOUR = dt.timedelta(hours=1)


def at(hour: float, tz: dt.tzinfo = UTC) -> dt.datetime:
    return (dt.datetime(2026, 1, 15, tzinfo=UTC) + hour * HOUR).astimezone(tz)


def test_gaps_are_the_parts_of_each_bin_no_partition_covers():
    """An uncovered bin is one gap; a bin covered in part gets the ranges around the
    partitions; a covered bin, and partitions far from any bin, give nothing."""
    width = 6 * HOUR
    partitions = [(at(1), at(2)), (at(4), at(8)), (at(30), at(31))]
    assert history.gaps([at(0), at(6), at(12)], width, partitions) == [
        (at(0), at(1)), (at(2), at(4)), (at(8), at(12)), (at(12), at(18)),
    ]
    assert history.gaps([at(0)], width, [(at(-1), at(7))]) == []
    assert history.gaps([], width, partitions) == []


def test_names_are_the_start_in_utc_with_the_time_unless_whole_days():
    """A range of whole days (UTC) is named by its date, any other by date and time;
    a datetime in another zone is named as the same instant in UTC."""
    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert history.partition_name(at(0, plus_two), at(24, plus_two)) == "jobs_history_20260115"
    assert history.partition_name(at(0), at(13)) == "jobs_history_20260115_0000"
    assert history.partition_name(at(13.5, plus_two), at(14)) == "jobs_history_20260115_1330"
