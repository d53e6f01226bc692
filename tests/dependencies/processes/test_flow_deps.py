"""Dependencies and batches under racing worker processes
(docs/explanation/dependencies.md): a job never starts before all its parents are done,
and each batch's callbacks are enqueued exactly once, counted in SQL once every process
has exited."""

from __future__ import annotations

import random

import pytest

import pgbaton
from tests.dependencies.processes._deps_hammer import enqueue_graph, work_until_nothing_is_left
from tests.hammer import run_workers

WORKERS = 4
BATCHES = 1000

EFFECTS = (
    "CREATE TABLE effects (job_id bigint NOT NULL, worker text NOT NULL,"
    " began timestamptz NOT NULL, ended timestamptz)"
)


@pytest.mark.slow
def test_a_dependent_job_never_starts_before_its_parents_are_done(queue, db, dsn, schema):
    """1,200 jobs in a random graph (labels within a call, ids across calls, one in 15
    failing, some running after a failure), worked by four processes: every job that ran
    began after each of its parents ended, ran at most once, and only when its parents
    allowed it; every job that did not run was cancelled for a parent's failure."""
    replay = random.randrange(1_000_000)
    enqueue_graph(queue, random.Random(replay), calls=10, per_call=120)
    db.execute("ANALYZE jobs")
    db.execute(EFFECTS)
    summaries = run_workers(work_until_nothing_is_left, WORKERS, dsn, schema, replay)
    context = f"replay={replay} workers={summaries}"

    shape = db.execute(
        "SELECT (SELECT count(*) FROM job_dependencies) AS edges,"
        " (SELECT count(*) FROM jobs WHERE status = 'done') AS done,"
        " (SELECT count(*) FROM jobs WHERE status = 'failed') AS failed,"
        " (SELECT count(*) FROM jobs WHERE status = 'cancelled') AS cancelled,"
        " (SELECT count(*) FROM jobs) AS jobs"
    ).fetchone()
    assert shape["done"] + shape["failed"] + shape["cancelled"] == shape["jobs"] == 1200, context
    # The run means something only if the graph was dense and failures cascaded.
    assert shape["edges"] > 1000 and shape["failed"] > 20 and shape["cancelled"] > 20, shape

    assert db.execute(
        "SELECT job_id, count(*) FROM effects GROUP BY job_id HAVING count(*) > 1"
    ).fetchall() == [], context
    early = db.execute(
        "SELECT d.parent_id, d.child_id, p.ended, c.began"
        " FROM job_dependencies AS d"
        " JOIN effects AS c ON c.job_id = d.child_id"
        " JOIN effects AS p ON p.job_id = d.parent_id"
        " WHERE c.began <= p.ended LIMIT 5"
    ).fetchall()
    assert early == [], f"children began before a parent ended: {early} {context}"
    not_allowed = db.execute(
        "SELECT d.parent_id, p.status, d.child_id FROM job_dependencies AS d"
        " JOIN effects AS c ON c.job_id = d.child_id"
        " JOIN jobs AS p ON p.id = d.parent_id"
        " WHERE NOT (p.status = 'done'"
        "            OR (d.run_after_failure AND p.status IN ('failed', 'cancelled')))"
        " LIMIT 5"
    ).fetchall()
    assert not_allowed == [], f"children ran after a parent that did not allow it: {context}"
    # Each job ran exactly when it should have: cancelled jobs never ran and have a
    # parent that stopped them; every other job ran once and ended as its args said.
    wrong = db.execute(
        "SELECT j.id, j.status, e.job_id IS NOT NULL AS ran FROM jobs AS j"
        " LEFT JOIN effects AS e ON e.job_id = j.id"
        " WHERE CASE j.status"
        "   WHEN 'cancelled' THEN e.job_id IS NOT NULL OR NOT EXISTS ("
        "       SELECT 1 FROM job_dependencies AS d JOIN jobs AS p ON p.id = d.parent_id"
        "       WHERE d.child_id = j.id AND NOT d.run_after_failure"
        "         AND p.status IN ('failed', 'cancelled'))"
        "   ELSE e.job_id IS NULL OR j.status <> CASE WHEN (j.args->>'fail')::boolean"
        "                                         THEN 'failed' ELSE 'done' END"
        " END LIMIT 5"
    ).fetchall()
    assert wrong == [], f"{wrong} {context}"


@pytest.mark.slow
def test_each_batch_calls_back_exactly_once_with_racing_workers(queue, db, dsn, schema):
    """1,000 batches of 1 to 3 jobs (one job in 20 failing) finished by four racing
    processes: each batch enqueued on_finish exactly once, on_success exactly once when
    every job was done and never otherwise, with counts that match its jobs."""
    replay = random.randrange(1_000_000)
    rng = random.Random(replay)
    batch = pgbaton.Batch(
        on_finish=pgbaton.Callback("finished"), on_success=pgbaton.Callback("succeeded")
    )
    for _ in range(BATCHES):
        queue.enqueue_many(
            [{"task": "member", "args": {"fail": rng.random() < 0.05}, "max_attempts": 1}
             for _ in range(rng.randint(1, 3))],
            batch=batch,
        )
    db.execute("ANALYZE jobs")
    db.execute(EFFECTS)
    summaries = run_workers(work_until_nothing_is_left, WORKERS, dsn, schema, replay)
    context = f"replay={replay} workers={summaries}"

    assert db.execute(
        "SELECT count(*) AS batches, count(*) FILTER (WHERE finished_at IS NULL) AS open"
        " FROM batches"
    ).fetchone() == {"batches": BATCHES, "open": 0}, context
    per_batch = db.execute(
        """
        WITH members AS (
            SELECT batch_id AS id, count(*) AS jobs,
                   count(*) FILTER (WHERE status = 'done') AS done,
                   count(*) FILTER (WHERE status = 'failed') AS failed
            FROM jobs WHERE task = 'member' GROUP BY batch_id
        ),
        calls AS (
            SELECT (args->'batch'->>'id')::bigint AS id,
                   count(*) FILTER (WHERE task = 'finished') AS finished,
                   count(*) FILTER (WHERE task = 'succeeded') AS succeeded,
                   min(args->'batch'->>'done') FILTER (WHERE task = 'finished') AS said_done,
                   min(args->'batch'->>'failed') FILTER (WHERE task = 'finished') AS said_failed
            FROM jobs WHERE task IN ('finished', 'succeeded') GROUP BY 1
        )
        SELECT count(*) AS batches,
               count(*) FILTER (WHERE calls.finished = 1) AS finished_once,
               count(*) FILTER (WHERE calls.succeeded = CASE WHEN m.done = m.jobs
                                                               THEN 1 ELSE 0 END)
                   AS succeeded_right,
               count(*) FILTER (WHERE calls.said_done::int = m.done
                                  AND calls.said_failed::int = m.failed) AS counted_right,
               count(*) FILTER (WHERE m.done < m.jobs) AS with_failures
        FROM members AS m JOIN batches AS b USING (id) LEFT JOIN calls USING (id)
        """
    ).fetchone()
    assert per_batch["with_failures"] > 10, per_batch  # both callbacks' cases occurred
    assert per_batch == {
        "batches": BATCHES, "finished_once": BATCHES, "succeeded_right": BATCHES,
        "counted_right": BATCHES, "with_failures": per_batch["with_failures"],
    }, context
    # The race happened: in many batches, two jobs were worked at once by two processes.
    raced = db.execute(
        "SELECT count(DISTINCT a.batch_id) AS n FROM"
        " (SELECT j.batch_id, e.* FROM effects AS e JOIN jobs AS j ON j.id = e.job_id) AS a"
        " JOIN (SELECT j.batch_id, e.* FROM effects AS e JOIN jobs AS j ON j.id = e.job_id)"
        "   AS b ON a.batch_id = b.batch_id AND a.job_id < b.job_id AND a.worker <> b.worker"
        " WHERE a.began < b.ended AND b.began < a.ended"
    ).fetchone()["n"]
    assert raced > 0, context
    assert db.execute(
        "SELECT count(*) AS n FROM jobs WHERE status <> 'done' AND task <> 'member'"
    ).fetchone()["n"] == 0, context
    print(f"batches raced by two workers at once: {raced}; {context}")
