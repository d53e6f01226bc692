"""Priority aging: jobs that waited long gain priority, bounded, once per `every`; the
claim still reads jobs_claimable and serves the aged jobs first."""

from __future__ import annotations

import pytest

import pgbaton
from pgbaton import _sql
from tests.engine.test_claim_index import _assert_served_by_jobs_claimable


def _priorities(db) -> dict[str, list[int]]:
    rows = db.execute("SELECT task, array_agg(priority ORDER BY id) AS p FROM jobs"
                      " GROUP BY task").fetchall()
    return {row["task"]: row["p"] for row in rows}


def test_old_jobs_gain_priority_up_to_the_cap_once_per_pass(queue: pgbaton.Queue, db):
    """Jobs due for longer than `every` gain `step` per pass, never past `cap`; new jobs,
    scheduled jobs, other queues and a second pass within `every` change nothing."""
    db.execute(
        "INSERT INTO jobs (queue, task, priority, run_at) VALUES"
        " ('reports', 'old', 0, now() - interval '1 hour'),"
        " ('reports', 'old', 9, now() - interval '1 hour'),"
        " ('reports', 'new', 0, now()),"
        " ('reports', 'later', 0, now() + interval '1 hour'),"
        " ('mail', 'other', 0, now() - interval '1 hour')"
    )
    settings = queue.set_aging("reports", every=60, step=5, cap=10)
    assert settings.aging == pgbaton.flow.Aging(60.0, 5, 10)
    assert queue.age_priorities() == 2
    assert _priorities(db) == {"old": [5, 10], "new": [0], "later": [0], "other": [0]}
    assert queue.age_priorities() == 0  # the next pass is due in a minute
    db.execute("UPDATE queues SET aged_at = now() - interval '2 minutes'")
    assert queue.age_priorities() == 1
    assert _priorities(db)["old"] == [10, 10]
    db.execute("UPDATE queues SET aged_at = now() - interval '2 minutes'")
    assert queue.age_priorities() == 0  # at the cap
    assert queue.set_aging("reports", every=None).aging is None
    db.execute("UPDATE queues SET aged_at = NULL")
    assert queue.age_priorities() == 0


def test_the_claim_serves_aged_jobs_first_through_jobs_claimable(queue: pgbaton.Queue, db):
    """After aging, an old job outranks a flood of newer high-priority ones, and the
    claim's plan is still the head of jobs_claimable with no sort."""
    db.execute("INSERT INTO jobs (task, priority, run_at) VALUES"
               " ('starved', 0, now() - interval '1 hour')")
    db.execute("INSERT INTO jobs (task, priority) SELECT 'flood', 5 FROM generate_series(1, 2000)")
    db.execute("ANALYZE jobs")
    queue.set_aging("default", every=60, step=10, cap=10)
    assert queue.age_priorities() == 1
    [claim] = queue.claim("w", limit=1)
    assert claim.task == "starved"
    [row] = db.execute(
        "EXPLAIN (FORMAT JSON) " + _sql.queries(queue.schema)["job_claim_many"],
        {"worker_id": "w", "limit": 10, "lease": 30.0, "queues": None, "tasks": None,
         "starting": 10, "after": None},
        prepare=False,
    ).fetchall()
    _assert_served_by_jobs_claimable(row["QUERY PLAN"][0]["Plan"])


@pytest.mark.parametrize(
    ("policy", "message"),
    [((0, 1, 5), "aging every must be 1 s"), ((float("inf"), 1, 5), "aging every"),
     ((60, 0, 5), "aging step must be"), ((60, 1, 2**31), "aging cap must be"),
     (("60", 1, 5), "aging every")],
)
def test_bad_aging_is_refused(queue: pgbaton.Queue, db, policy, message):
    """Nothing is written for an aging policy that cannot be meant."""
    every, step, cap = policy
    with pytest.raises(pgbaton.InvalidArgument, match=message):
        queue.set_aging("reports", every=every, step=step, cap=cap)
    assert db.execute("SELECT count(*) AS n FROM queues").fetchone() == {"n": 0}


def test_the_workers_leader_ages_jobs_pass_by_pass_up_to_the_cap(
    queue: pgbaton.Queue, db, start_worker
):
    """A running worker's maintenance leader applies a queue's aging every `every`: a job
    due for long climbs step by step to the cap and stays there."""
    from tests.worker_processes import wait_until

    db.execute("INSERT INTO jobs (queue, task, run_at) VALUES"
               " ('reports', 'work', now() - interval '1 hour')")
    worker = start_worker("--queues", "elsewhere")
    queue.set_aging("reports", every=1, step=1, cap=3)
    seen: set[int] = set()

    def priority() -> int:
        row = db.execute("SELECT priority FROM jobs WHERE queue = 'reports'").fetchone()
        return int(row["priority"])

    def at_cap() -> bool:
        seen.add(priority())
        return 3 in seen

    wait_until(at_cap, timeout=60, what="the job's priority aged to the cap")
    assert seen <= {0, 1, 2, 3}
    passes = db.execute("SELECT aged_at FROM queues").fetchone()["aged_at"]
    wait_until(lambda: db.execute("SELECT aged_at FROM queues").fetchone()["aged_at"] > passes,
               timeout=30, what="one more aging pass")
    assert priority() == 3
    assert worker.stop() == 0, worker.log()
