"""How an idle worker learns of new jobs: NOTIFY at commit, polling for delayed jobs."""

from __future__ import annotations

import asyncio

import psycopg

import pgbaton
from tests import app_under_test as tasks
from tests.worker_processes import scalar, wait_until

# Far longer than any test: a job that starts before it was enqueued by the poll timer
# can only have been started by a wake-up.
NEVER_POLL = ("--poll-interval", "3600")


def wait_for_listener(db, schema: str) -> None:
    """Wait until the worker's LISTEN connection is up (pg_listening_channels is per
    session, so look for the session whose last statement was its last LISTEN: after the
    ones on `<schema>_jobs` and `<schema>_cancelled`, the one on its own echo channel,
    `<schema>_echo_<6 hex digits>`)."""
    channel = schema + "_echo_"
    wait_until(
        lambda: scalar(
            db,
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s",
            f'%LISTEN "{channel}______";',
        ) == 1,
        timeout=30,
        what=f"the worker to LISTEN on {channel}",
    )


def done(db, job_id: int) -> bool:
    return scalar(db, "SELECT status FROM jobs WHERE id = %s", job_id) == "done"


def test_notify_wakes_an_idle_worker(start_worker, db, app_schema):
    """A job enqueued into an idle worker that never polls is run, woken by its NOTIFY."""
    worker = start_worker(*NEVER_POLL, "--no-maintenance")
    wait_for_listener(db, app_schema)
    job = tasks.work.enqueue({"seconds": 0})
    wait_until(lambda: done(db, job), timeout=10, what="the job to be done without a poll")
    assert scalar(db, "SELECT worker_pid FROM effects WHERE job_id = %s AND what = 'end'",
                  job) == worker.pid
    assert worker.stop() == 0
    stats = worker.final_stats()
    assert stats["wakeups_notify"] >= 1, stats
    assert stats["completed"] == 1, stats


def test_job_enqueued_in_a_transaction_waits_for_the_commit(start_worker, db, app_schema):
    """A job enqueued in an open transaction is not claimed before the commit, and is
    run promptly after it."""
    worker = start_worker(*NEVER_POLL, "--no-maintenance")
    wait_for_listener(db, app_schema)
    with psycopg.connect(tasks.app.dsn) as txn:
        hidden = tasks.work.enqueue({"seconds": 0}, conn=txn)
        # A probe committed after the hidden insert: once the worker has run it, it has
        # claimed (limit = its free slots) at a moment when the hidden row existed.
        probe = tasks.work.enqueue({"seconds": 0})
        wait_until(lambda: done(db, probe), timeout=10, what="the probe job to be done")
        row = txn.execute(
            f'SELECT status, attempts FROM "{app_schema}".jobs WHERE id = %s', (hidden,)
        ).fetchone()
        assert row == ("pending", 0)
        assert scalar(db, "SELECT count(*) FROM effects WHERE job_id = %s", hidden) == 0
        txn.commit()
    wait_until(lambda: done(db, hidden), timeout=10, what="the committed job to be done")
    assert worker.stop() == 0
    stats = worker.final_stats()
    assert stats["wakeups_notify"] >= 2, stats
    assert stats["completed"] == 2, stats


def test_delayed_job_is_picked_up_by_polling(start_worker, db, app_schema):
    """A job whose run_at is ahead sends no NOTIFY; the poll picks it up once it is due,
    not before."""
    worker = start_worker("--poll-interval", "0.2", "--no-maintenance")
    wait_for_listener(db, app_schema)
    job = tasks.work.enqueue({"seconds": 0}, delay=1.0)
    wait_until(lambda: done(db, job), timeout=10, what="the delayed job to be done")
    assert scalar(db, "SELECT started_at >= run_at FROM jobs WHERE id = %s", job)
    assert scalar(db, "SELECT min(at) >= (SELECT run_at FROM jobs WHERE id = %s)"
                  " FROM effects WHERE job_id = %s", job, job)
    assert worker.stop() == 0
    stats = worker.final_stats()
    # Nothing but the poll can have found it: the insert trigger skips jobs not yet due.
    assert stats.get("wakeups_notify", 0) == 0, stats
    assert stats["completed"] == 1, stats


def test_unknown_task_waits_for_a_worker_that_knows_it(start_worker, db, app_schema,
                                                       queue: pgbaton.Queue):
    """A worker claims only the tasks its App registers: a job of a task it lacks (a
    release not yet deployed) stays pending with no attempt spent while the worker runs
    the jobs it knows."""
    worker = start_worker("--poll-interval", "0.2", "--no-maintenance")
    unknown = queue.enqueue("no_such_task", max_attempts=1)
    later = tasks.work.enqueue({"seconds": 0})
    wait_until(lambda: done(db, later), timeout=10, what="the known job to be done")
    row = db.execute("SELECT status, attempts, errors FROM jobs WHERE id = %s",
                     (unknown,)).fetchone()
    assert (row["status"], row["attempts"], row["errors"]) == ("pending", 0, [])
    assert worker.stop() == 0
    assert worker.final_stats()["completed"] == 1


async def test_a_worker_told_to_claim_unknown_tasks_fails_them(aqueue, db):
    """claim_unknown_tasks=True: the job is claimed and fails with an error naming it."""
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)

    @app.task
    async def known() -> None: ...

    unknown = await aqueue.enqueue("no_such_task", max_attempts=1)
    worker = pgbaton.Worker(app, pgbaton.WorkerConfig(
        maintenance=False, poll_interval=0.1, claim_unknown_tasks=True))
    run = asyncio.create_task(worker.run())
    for _ in range(200):
        row = db.execute("SELECT status, errors FROM jobs WHERE id = %s", (unknown,)).fetchone()
        if row["status"] == "failed":
            break
        await asyncio.sleep(0.05)
    worker.request_stop()
    assert await asyncio.wait_for(run, 30) == 0
    assert row["status"] == "failed"
    assert row["errors"][0]["type"] == "UnknownTask"
    assert "'no_such_task'" in row["errors"][0]["message"]


def test_a_short_snooze_or_retry_runs_when_due_not_at_the_next_poll(
    start_worker, db, app_schema
):
    """A job becoming due sends no NOTIFY: a worker that never polls runs a job it
    snoozed for 0.3 s, one it retries after a 0.15 to 0.3 s backoff, and one that slept
    durably for 0.3 s, when they are due, because it wakes itself for the due times it
    wrote."""
    worker = start_worker(*NEVER_POLL, "--no-maintenance")
    wait_for_listener(db, app_schema)
    snoozed = tasks.snoozes_once.enqueue({"seconds": 0.3})
    retried = tasks.fails_once_slowly.enqueue({})
    slept = tasks.sleeps_durably.enqueue({"seconds": 0.3})
    wait_until(lambda: all(done(db, job) for job in (snoozed, retried, slept)), timeout=30,
               what="the snoozed, the retried and the sleeping job done without a poll")
    gaps = {row["job_id"]: float(row["gap"]) for row in db.execute(
        "SELECT job_id, extract(epoch FROM max(at) - min(at)) AS gap FROM effects"
        " WHERE what = 'start' GROUP BY job_id HAVING count(*) = 2")}
    assert set(gaps) == {snoozed, retried, slept}, gaps
    assert 0.3 <= gaps[snoozed] < 10, gaps
    assert 0.3 <= gaps[slept] < 10, gaps
    assert 0.15 <= gaps[retried] < 10, gaps
    assert worker.stop() == 0
