"""The partition arithmetic of the history retention mode, without I/O: which ranges a
batch's bins still lack, what their partitions are called, and their DDL statements.

AsyncQueue.archive and drop_history run the statements of sql/history.sql and call
these in between (docs/explanation/retention.md).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

from psycopg import sql

_MIDNIGHT = dt.time(0, 0)


def gaps(
    bins: Iterable[dt.datetime],
    width: dt.timedelta,
    partitions: Sequence[tuple[dt.datetime, dt.datetime]],
) -> list[tuple[dt.datetime, dt.datetime]]:
    """The ranges of the bins (each `width` long from its start) that no partition
    covers, in order. Partitions never overlap one another, but may overlap a bin in
    part (the width was changed): the bin then gets its gaps only, never an overlap."""
    missing: list[tuple[dt.datetime, dt.datetime]] = []
    ordered = sorted(partitions)
    for start in sorted(set(bins)):
        end = start + width
        gap_from = start
        for from_at, to_at in ordered:
            if from_at >= end or to_at <= start:
                continue
            if from_at > gap_from:
                missing.append((gap_from, from_at))
            gap_from = max(gap_from, to_at)
        if gap_from < end:
            missing.append((gap_from, end))
    return missing


def partition_name(from_at: dt.datetime, to_at: dt.datetime) -> str:
    """Named after its start in UTC so that an operator reads it: jobs_history_20261201
    for a range of whole days, jobs_history_20261201_1300 otherwise."""
    start, end = from_at.astimezone(dt.UTC), to_at.astimezone(dt.UTC)
    whole_days = start.time() == _MIDNIGHT == end.time()
    return "jobs_history_" + start.strftime("%Y%m%d" if whole_days else "%Y%m%d_%H%M")


def partition_ddl(
    template: str,
    name: str,
    from_at: dt.datetime | None = None,
    to_at: dt.datetime | None = None,
) -> sql.Composed:
    """A *_ddl statement of sql/history.sql with its partition's name (an identifier)
    and bounds (literals) filled in: DDL takes no parameters."""
    return sql.SQL(template).format(
        partition=sql.Identifier(name),
        from_at=sql.Literal(from_at),
        to_at=sql.Literal(to_at),
    )
