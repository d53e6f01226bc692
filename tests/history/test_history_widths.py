"""The history mover's partitions when the width changes: a bin that partitions of
another width cover in part gets partitions for its gaps only, never an overlap
(docs/explanation/retention.md); the ranges are worked out by pgbaton/history.py between the
statements of sql/history.sql."""

from __future__ import annotations

import datetime as dt

DAY = 86400.0
UTC = dt.UTC


def _finish_at(queue, db, at: str) -> int:
    job_id = queue.enqueue("t")
    [claim] = queue.claim("w")
    assert queue.complete(claim)
    db.execute("UPDATE jobs SET finished_at = %s WHERE id = %s", (at, job_id))
    return job_id


def test_a_wider_bin_over_a_narrower_partition_gets_its_gaps_only(queue, db):
    """An hour's partition made first, then a day-wide move of the same day: the day is
    covered by two new partitions around the hour, named by their starts (not whole
    days, so with the time); a later move of that day creates nothing more."""
    hourly = _finish_at(queue, db, "2026-01-15 13:45+00")
    assert queue.archive(after=0, partition=3600) == 1
    daily = _finish_at(queue, db, "2026-01-15 09:10+00")
    assert queue.archive(after=0, partition=DAY) == 1
    day = dt.datetime(2026, 1, 15, tzinfo=UTC)
    expected = [
        ("jobs_history_20260115_0000", day, day + dt.timedelta(hours=13)),
        ("jobs_history_20260115_1300", day + dt.timedelta(hours=13),
         day + dt.timedelta(hours=14)),
        ("jobs_history_20260115_1400", day + dt.timedelta(hours=14),
         day + dt.timedelta(days=1)),
    ]
    assert [(p.name, p.from_at, p.to_at) for p in queue.history_partitions()] == expected
    late = _finish_at(queue, db, "2026-01-15 20:00+00")
    assert queue.archive(after=0, partition=DAY) == 1
    assert [(p.name, p.from_at, p.to_at) for p in queue.history_partitions()] == expected
    rows = db.execute(
        "SELECT tableoid::regclass::text AS part, id FROM jobs_history ORDER BY id"
    ).fetchall()
    assert [(r["part"], r["id"]) for r in rows] == [
        ("jobs_history_20260115_1300", hourly),
        ("jobs_history_20260115_0000", daily),
        ("jobs_history_20260115_1400", late),
    ]


def test_a_narrower_bin_inside_a_wider_partition_creates_nothing(queue, db):
    """A day's partition, then hour-wide moves inside that day: already covered."""
    _finish_at(queue, db, "2026-01-15 13:45+00")
    assert queue.archive(after=0, partition=DAY) == 1
    _finish_at(queue, db, "2026-01-15 18:05+00")
    assert queue.archive(after=0, partition=3600) == 1
    assert [p.name for p in queue.history_partitions()] == ["jobs_history_20260115"]
    assert db.execute("SELECT count(*) AS n FROM jobs_history").fetchone()["n"] == 2
