"""No double hand-out: eight OS processes race to claim 20,000 jobs, and SQL proves each
job was handed to exactly one claim and done exactly once."""

from __future__ import annotations

import random

import pytest

import pgbaton
from tests.hammer import claim_until_empty, run_workers

JOBS = 20_000
WORKERS = 8


@pytest.mark.slow
def test_eight_processes_claim_every_job_exactly_once(
    queue: pgbaton.Queue, db, dsn: str, schema: str
):
    """Eight processes claiming 20,000 jobs in random batches hand each job to exactly one
    claim, and every completion is accepted."""
    ids = queue.enqueue_many([{"task": "hammer", "args": {"n": n}} for n in range(JOBS)])
    assert len(ids) == JOBS
    # Until autovacuum gets to it the planner believes the fresh table is empty and every
    # claim sorts all 20,000 pending rows; a live queue's table has statistics.
    db.execute("ANALYZE jobs")
    # No constraints: a job handed out twice must show up as two rows, not as an error
    # inside a worker.
    db.execute(
        "CREATE TABLE claims_log (job_id bigint NOT NULL, token uuid NOT NULL,"
        " worker text NOT NULL, attempts integer NOT NULL, completed boolean NOT NULL)"
    )
    # The one number that replays this run's random choices; printed on failure.
    replay = random.randrange(1_000_000)

    summaries = run_workers(claim_until_empty, WORKERS, dsn, schema, replay)

    context = f"replay={replay} workers={summaries}"
    # The race was real: every process won part of the work.
    assert all(summary["claims"] > 0 for summary in summaries), context

    assert db.execute(
        "SELECT count(*) AS jobs,"
        " count(*) FILTER (WHERE status = 'done') AS done,"
        " count(*) FILTER (WHERE attempts = 1) AS claimed_once,"
        " count(*) FILTER (WHERE claim_token IS NULL AND lease_until IS NULL) AS unheld"
        " FROM jobs"
    ).fetchone() == {"jobs": JOBS, "done": JOBS, "claimed_once": JOBS, "unheld": JOBS}, context

    doubles = db.execute(
        "SELECT job_id, array_agg(worker ORDER BY worker) AS workers FROM claims_log"
        " GROUP BY job_id HAVING count(*) > 1 ORDER BY job_id LIMIT 10"
    ).fetchall()
    assert doubles == [], f"jobs handed to more than one claim: {doubles}; {context}"

    assert db.execute(
        "SELECT count(*) AS claims, count(DISTINCT job_id) AS jobs,"
        " count(DISTINCT token) AS tokens,"
        " count(*) FILTER (WHERE completed) AS accepted,"
        " count(*) FILTER (WHERE attempts = 1) AS first_attempts"
        " FROM claims_log"
    ).fetchone() == {
        "claims": JOBS,
        "jobs": JOBS,
        "tokens": JOBS,
        "accepted": JOBS,
        "first_attempts": JOBS,
    }, context

    # The log and the table agree job by job on who held it and whose result was kept.
    disagreements = db.execute(
        "SELECT j.id, j.worker_id, j.result, l.job_id AS logged, l.worker"
        " FROM jobs AS j FULL JOIN claims_log AS l ON l.job_id = j.id"
        " WHERE j.id IS NULL OR l.job_id IS NULL"
        "    OR j.worker_id IS DISTINCT FROM l.worker"
        "    OR j.result ->> 'by' IS DISTINCT FROM l.worker"
        " LIMIT 10"
    ).fetchall()
    assert disagreements == [], f"{disagreements}; {context}"
