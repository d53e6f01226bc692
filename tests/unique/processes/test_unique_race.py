"""Unique jobs under a race: processes enqueueing the same unique jobs at the same
moments, on their own connections and in callers' transactions that commit or roll
back, leave exactly one blocking job per unique key and window, counted in SQL."""

from __future__ import annotations

import datetime as dt
import random
import traceback
from typing import Any

import psycopg
import pytest

import pgbaton
from tests.helpers import PROCESS_TIMEOUT_SECONDS, run_at_once

PROCESSES = 4
KEYS = 40
# Two windows of an hour, far enough ahead that no job is claimed or due meanwhile.
WINDOWS = [dt.datetime(2031, 1, 1, 10, 30, tzinfo=dt.UTC),
           dt.datetime(2031, 1, 1, 11, 30, tzinfo=dt.UTC)]


def _unique(conflict: str) -> pgbaton.Unique:
    if conflict == "debounce":
        return pgbaton.Unique(args=["n"], conflict="debounce", delay=3600)
    return pgbaton.Unique(args=["n"], period=3600, conflict=conflict)  # type: ignore[arg-type]


def enqueue_the_same(
    index: int, where: tuple[str, str], plan: tuple[str, int], start: Any, reports: Any
) -> None:
    """Every (key, window) in the order all processes share, each on a pooled
    connection, or in a transaction of this process's own that commits or rolls back,
    as this process draws (process 0 never rolls back); reports what each committed
    call was told."""
    (dsn, schema), (conflict, replay) = where, plan
    try:
        rng = random.Random(replay * 100 + index)
        wanted = [(n, w) for n in range(KEYS)
                  for w in (range(len(WINDOWS)) if conflict != "debounce" else [0])]
        random.Random(replay).shuffle(wanted)
        unique = _unique(conflict)
        told: list[tuple[int, int, int]] = []
        with pgbaton.Queue(dsn, schema=schema) as queue, psycopg.connect(dsn) as conn:
            queue.enqueue("warm", {})  # the pool's first connection, before the start
            start.wait(timeout=PROCESS_TIMEOUT_SECONDS)
            for n, w in wanted:
                run_at = None if conflict == "debounce" else WINDOWS[w] + dt.timedelta(
                    minutes=rng.randint(0, 29))
                args = {"n": n, "by": index}
                # Process 0 never rolls back, so that every key gets a job.
                how = rng.choice(["own", "commit"] + ["rollback"] * (index > 0))
                if how == "own":
                    job_id = queue.enqueue("t", args, run_at=run_at, unique=unique)
                else:
                    job_id = queue.enqueue("t", args, run_at=run_at, unique=unique, conn=conn)
                    if rng.random() < 0.5:
                        queue.enqueue("t", args, run_at=run_at, unique=unique, conn=conn)
                    if how == "commit":
                        conn.commit()
                    else:
                        conn.rollback()
                        continue
                told.append((n, w, job_id))
        reports.put({"index": index, "told": told})
    except BaseException:
        start.abort()
        reports.put({"index": index, "error": traceback.format_exc()})


def _race(dsn: str, schema: str, conflict: str, replay: int) -> list[tuple[int, int, int]]:
    ran = run_at_once(enqueue_the_same, PROCESSES, (dsn, schema), (conflict, replay))
    assert not ran.errors, ran.errors[0]
    return [tuple(t) for r in ran.reports for t in r["told"]]


@pytest.mark.slow
@pytest.mark.parametrize("conflict", ["keep", "replace", "debounce"])
def test_racing_enqueues_leave_one_job_per_key_and_window(queue, db, dsn, schema, conflict):
    """Four processes enqueueing the same 40 keys in two windows at once, in their own
    and in callers' transactions (some rolled back): one blocking job per key and
    window, no other job, and every committed call was told that job's id. Once the
    jobs are done, a second race lets exactly one new job per key and window in."""
    replay = random.randrange(1_000_000)
    windows = len(WINDOWS) if conflict != "debounce" else 1
    context = f"replay={replay}"
    told = _race(dsn, schema, conflict, replay)

    counted = db.execute(
        "SELECT count(*) AS jobs, count(DISTINCT unique_key) AS keys,"
        " count(*) FILTER (WHERE status = ANY (unique_states)) AS blocking"
        " FROM jobs WHERE task = 't'").fetchone()
    assert counted == {"jobs": KEYS * windows, "keys": KEYS * windows,
                       "blocking": KEYS * windows}, context
    # Each stored job's window is that of its run_at (replace moves run_at within it).
    stored = {
        (row["n"], row["w"]): row["id"] for row in db.execute(
            "SELECT (args ->> 'n')::int AS n, id,"
            " CASE WHEN run_at < %s THEN 0 ELSE 1 END AS w FROM jobs WHERE task = 't'",
            (WINDOWS[1] - dt.timedelta(minutes=30),)).fetchall()
    }
    if conflict == "debounce":
        stored = {(n, 0): job_id for (n, _), job_id in stored.items()}
    assert len(stored) == KEYS * windows, context
    wrong = [(n, w, job_id) for n, w, job_id in told if stored[n, w] != job_id]
    assert wrong == [], f"{wrong[:5]}; {context}"

    db.execute("UPDATE jobs SET status = 'done', finished_at = now() WHERE task = 't'")
    _race(dsn, schema, conflict, replay + 1)
    assert db.execute(
        "SELECT count(*) AS jobs, count(*) FILTER (WHERE status = 'pending') AS pending,"
        " count(DISTINCT unique_key) AS keys FROM jobs WHERE task = 't'"
    ).fetchone() == {"jobs": 2 * KEYS * windows, "pending": KEYS * windows,
                     "keys": KEYS * windows}, context
