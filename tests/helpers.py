"""Small helpers shared by the tests: waiting on the database clock, reading rows."""

from __future__ import annotations

from typing import Any

import psycopg


def wait_for_lease_to_pass(db: psycopg.Connection[Any], job_id: int) -> None:
    """Sleep on the server until the job's lease is behind the server's clock.

    The wait is exactly as long as the lease has left, measured by the same clock that
    the claim and the reaper use, so the test never guesses at a duration.
    """
    db.execute(
        "SELECT pg_sleep(greatest(0, extract(epoch FROM lease_until - clock_timestamp()))"
        " + 0.001) FROM jobs WHERE id = %s",
        (job_id,),
    )
    row = db.execute("SELECT lease_until < now() AS passed FROM jobs WHERE id = %s", (job_id,))
    assert row.fetchone()["passed"]  # type: ignore[index]


def job_rows(db: psycopg.Connection[Any], *columns: str) -> list[tuple[Any, ...]]:
    """The chosen columns of every job, by id."""
    cols = ", ".join(columns)
    return [tuple(row.values()) for row in db.execute(f"SELECT {cols} FROM jobs ORDER BY id")]
