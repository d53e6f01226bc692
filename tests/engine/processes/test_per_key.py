"""Per-key serialisation: jobs of one key run one at a time, oldest first, while jobs of
different keys run side by side."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

import pgbaton
from tests.hammer import keyed_jobs_under_an_operator, run_workers, work_keyed_jobs

KEYS = 300
JOBS_PER_KEY = 5
UNKEYED = 300
WORKERS = 4


def keyed_and_unkeyed_jobs(rng: random.Random, keys: int, per_key: int, unkeyed: int):
    """Job specs for enqueue_many: `per_key` jobs of each of `keys` keys and `unkeyed`
    jobs without a key, shuffled together so that jobs of one key often sit close enough
    to land in one claim window, and with random priorities so that the claim's scan
    order often reaches a later job of a key before its oldest one."""
    specs: list[dict] = [{"task": "unkeyed", "args": {"u": u}} for u in range(unkeyed)] + [
        {"task": "keyed", "args": {"n": n, "nth": nth}, "key": f"customer-{n}"}
        for n in range(keys)
        for nth in range(per_key)
    ]
    rng.shuffle(specs)
    for spec in specs:
        spec["priority"] = rng.randrange(3)
    return specs


@pytest.mark.slow
def test_keys_run_one_job_at_a_time_in_order_and_keys_do_not_wait_for_each_other(
    queue: pgbaton.Queue, db, dsn: str, schema: str
):
    """Four processes working 1,500 jobs of 300 keys and 300 unkeyed jobs never run two jobs
    of one key at once, start each key's jobs in enqueue order, and run different keys at once."""
    # The one number that replays this run's random choices; printed on failure.
    replay = random.randrange(1_000_000)
    specs = keyed_and_unkeyed_jobs(random.Random(replay), KEYS, JOBS_PER_KEY, UNKEYED)
    total = len(specs)
    queue.enqueue_many(specs)
    # Until autovacuum gets to it the planner believes the fresh table is empty and every
    # claim sorts all pending rows; a live queue's table has statistics.
    db.execute("ANALYZE jobs")
    # Intervals come from clock_timestamp() in the workers, not from jobs.started_at and
    # finished_at: those are now(), the start of each statement's transaction, which is
    # taken before the claim's snapshot, so the next job of a key can carry a started_at
    # a hair earlier than the finished_at of the job it waited for.
    db.execute(
        "CREATE TABLE effects (job_id bigint NOT NULL, token uuid NOT NULL, key text,"
        " worker text NOT NULL, began timestamptz NOT NULL, ended timestamptz,"
        " completed boolean)"
    )
    db.execute("CREATE INDEX ON effects (key)")

    summaries = run_workers(work_keyed_jobs, WORKERS, dsn, schema, replay)

    context = f"replay={replay} workers={summaries}"
    assert db.execute(
        "SELECT count(*) AS jobs,"
        " count(*) FILTER (WHERE status = 'done' AND attempts = 1) AS done_once"
        " FROM jobs"
    ).fetchone() == {"jobs": total, "done_once": total}, context
    assert db.execute(
        "SELECT count(*) AS claims, count(DISTINCT e.job_id) AS jobs,"
        " count(*) FILTER (WHERE e.completed AND e.ended >= e.began) AS accepted,"
        " count(*) FILTER (WHERE e.key IS NOT DISTINCT FROM j.key) AS right_key"
        " FROM effects AS e JOIN jobs AS j ON j.id = e.job_id"
    ).fetchone() == {"claims": total, "jobs": total, "accepted": total, "right_key": total}

    overlaps = db.execute(
        "SELECT a.key, a.job_id AS first, b.job_id AS second"
        " FROM effects AS a JOIN effects AS b ON a.key = b.key AND a.job_id < b.job_id"
        " WHERE a.began < b.ended AND b.began < a.ended"
        " ORDER BY a.key, a.job_id LIMIT 10"
    ).fetchall()
    assert overlaps == [], f"two jobs of one key ran at once: {overlaps}; {context}"

    out_of_order = db.execute(
        "SELECT key, array_agg(job_id ORDER BY began) AS by_start,"
        "       array_agg(job_id ORDER BY job_id) AS by_id"
        " FROM effects WHERE key IS NOT NULL GROUP BY key"
        " HAVING array_agg(job_id ORDER BY began) <> array_agg(job_id ORDER BY job_id)"
        " ORDER BY key LIMIT 10"
    ).fetchall()
    assert out_of_order == [], f"keys started out of enqueue order: {out_of_order}; {context}"

    # Keys did not wait for each other: keyed jobs held by different processes ran at
    # the same moments. (Jobs of one batch overlap trivially, hence other workers only.)
    side_by_side = db.execute(
        "SELECT count(DISTINCT a.job_id) AS jobs FROM effects AS a JOIN effects AS b"
        " ON a.worker <> b.worker AND a.key <> b.key"
        " WHERE a.began < b.ended AND b.began < a.ended"
    ).fetchone()["jobs"]
    keyed = KEYS * JOBS_PER_KEY
    assert side_by_side >= keyed // 4, (
        f"only {side_by_side} of {keyed} keyed jobs ran beside another process's keyed "
        f"job; {context}"
    )


def test_one_batch_claim_takes_only_the_oldest_job_of_each_key(queue: pgbaton.Queue):
    """A claim of up to 50 on jobs with several per key returns the oldest job of each key
    and every unkeyed job, and the next job of a key becomes claimable once that one is done."""
    specs = keyed_and_unkeyed_jobs(random.Random(7), keys=12, per_key=3, unkeyed=5)
    ids = queue.enqueue_many(specs)
    by_key: dict[str | None, list[int]] = defaultdict(list)
    for job_id, spec in zip(ids, specs, strict=True):
        by_key[spec.get("key")].append(job_id)
    unkeyed = set(by_key.pop(None))

    claims = queue.claim("solo", limit=50, lease=60)
    assert len(claims) == 12 + 5
    assert {claim.id for claim in claims if claim.key is None} == unkeyed
    assert {claim.key: claim.id for claim in claims if claim.key is not None} == {
        key: min(job_ids) for key, job_ids in by_key.items()
    }
    # Every key has a job running, so its later jobs are held back.
    assert queue.claim("solo", limit=50, lease=60) == []

    assert queue.complete_many([(claim, None) for claim in claims]) == [True] * len(claims)
    following = queue.claim("solo", limit=50, lease=60)
    assert {claim.key: claim.id for claim in following} == {
        key: sorted(job_ids)[1] for key, job_ids in by_key.items()
    }


def test_a_running_job_holds_back_only_its_own_key(queue: pgbaton.Queue):
    """While the oldest job of one key runs, its next job is held back and every other
    key's oldest job and every unkeyed job can still be claimed."""
    busy_first, busy_next = queue.enqueue_many(
        [{"task": "keyed", "key": "customer-busy", "priority": 1}] * 2
    )
    other_first, _ = queue.enqueue_many([{"task": "keyed", "key": "customer-other"}] * 2)
    unkeyed = queue.enqueue("unkeyed")

    [held] = queue.claim("one", lease=60)
    assert held.id == busy_first
    claimed = queue.claim("two", limit=50, lease=60)
    assert sorted(claim.id for claim in claimed) == [other_first, unkeyed]

    assert queue.complete(held) is True
    assert [claim.id for claim in queue.claim("one", limit=50, lease=60)] == [busy_next]


@pytest.mark.slow
def test_keys_stay_one_at_a_time_while_an_operator_cancels_and_retries(
    queue: pgbaton.Queue, db, dsn: str, schema: str
):
    """Three worker processes and an operator process that cancels running keyed jobs and
    often retries them a moment later: no two handlers of one key (the same job run
    again included) ever overlap, though lost handlers run on after the cancel."""
    # The one number that replays this run's random choices; printed on failure.
    replay = random.randrange(1_000_000)
    specs = keyed_and_unkeyed_jobs(random.Random(replay), keys=60, per_key=4, unkeyed=0)
    queue.enqueue_many(specs)
    db.execute("ANALYZE jobs")
    db.execute(
        "CREATE TABLE effects (job_id bigint NOT NULL, token uuid NOT NULL, key text,"
        " worker text NOT NULL, began timestamptz NOT NULL, ended timestamptz)"
    )
    db.execute("CREATE TABLE operator_done (done boolean)")

    summaries = run_workers(keyed_jobs_under_an_operator, WORKERS, dsn, schema, replay)

    context = f"replay={replay} workers={summaries}"
    operator = summaries[0]
    assert operator["cancelled"] >= 10 and operator["retried"] >= 3, context
    assert sum(s["lost"] for s in summaries[1:]) >= 5, context
    assert db.execute(
        "SELECT count(*) FILTER (WHERE status NOT IN ('done', 'cancelled')) AS unfinished,"
        " count(*) FILTER (WHERE claim_token IS NOT NULL) AS held FROM jobs"
    ).fetchone() == {"unfinished": 0, "held": 0}, context
    assert db.execute(
        "SELECT count(*) AS open FROM effects WHERE ended IS NULL OR ended < began"
    ).fetchone() == {"open": 0}, context
    # Some retried jobs ran twice: the case where a job could overlap with itself.
    assert db.execute(
        "SELECT count(*) AS n FROM (SELECT job_id FROM effects GROUP BY job_id"
        " HAVING count(*) > 1) AS again"
    ).fetchone()["n"] >= 1, context

    overlaps = db.execute(
        "SELECT a.key, a.job_id AS first, b.job_id AS second, a.worker AS first_worker,"
        " b.worker AS second_worker"
        " FROM effects AS a JOIN effects AS b ON a.key = b.key AND a.token < b.token"
        " WHERE a.began < b.ended AND b.began < a.ended"
        " ORDER BY a.key LIMIT 10"
    ).fetchall()
    assert overlaps == [], f"handlers of one key overlapped: {overlaps}; {context}"
