"""Idempotency keys under a race: processes enqueueing the same keys at the same moment
make one job per task and key, and every process is told that job's id."""

from __future__ import annotations

import random

import pytest

import pgbaton
from tests.hammer import RACED_KEYS as KEYS
from tests.hammer import enqueue_keys_once, run_workers

PROCESSES = 4


@pytest.mark.slow
@pytest.mark.parametrize("global_index", [True, False], ids=["this-release", "contracted"])
def test_racing_producers_make_one_job_per_task_and_key(
    queue: pgbaton.Queue, db, dsn: str, schema: str, global_index: bool
):
    """Four processes enqueueing the same 300 keys for each of two tasks at the same
    moments, singly and in batches, make exactly one job per task and key, all processes
    get that job's id, and at most one enqueue_once per job reports it as created; with
    the previous release's global index (the tasks' keys then differ) and without it (as
    the next release leaves the schema; the tasks then share their keys)."""
    if not global_index:
        db.execute("DROP INDEX jobs_idempotency_key_unique")
    db.execute(
        "CREATE TABLE outcomes (process text NOT NULL, task text NOT NULL,"
        " idempotency_key text NOT NULL, job_id bigint NOT NULL, created boolean)"
    )
    # The one number that replays this run's random choices; printed on failure.
    replay = random.randrange(1_000_000)

    summaries = run_workers(enqueue_keys_once, PROCESSES, dsn, schema, replay)

    context = f"replay={replay} processes={summaries}"
    assert db.execute(
        "SELECT count(*) AS jobs, count(DISTINCT (task, idempotency_key)) AS pairs FROM jobs"
    ).fetchone() == {"jobs": 2 * KEYS, "pairs": 2 * KEYS}, context
    disagreements = db.execute(
        "SELECT o.task, o.idempotency_key, o.process, o.job_id, j.id AS stored"
        " FROM outcomes AS o LEFT JOIN jobs AS j"
        "   ON j.task = o.task AND j.idempotency_key = o.idempotency_key"
        " WHERE j.id IS DISTINCT FROM o.job_id LIMIT 10"
    ).fetchall()
    assert disagreements == [], f"{disagreements}; {context}"
    assert db.execute("SELECT count(*) AS n FROM outcomes").fetchone() == {
        "n": PROCESSES * 2 * KEYS
    }, context
    # A job made by enqueue_once was reported created to exactly one caller, and a job
    # made by a batch to none.
    claimed_twice = db.execute(
        "SELECT job_id, count(*) AS n FROM outcomes WHERE created"
        " GROUP BY job_id HAVING count(*) > 1 LIMIT 10"
    ).fetchall()
    assert claimed_twice == [], f"{claimed_twice}; {context}"
