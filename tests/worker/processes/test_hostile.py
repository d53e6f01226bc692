"""Handlers and databases that misbehave: each ends as one failed attempt, a logged and
retried part, or a stopped handler; never as a worker that stalls or dies.

Each test runs a real `pgbaton worker` process and proves the outcome in SQL.
"""

from __future__ import annotations

import time

import psycopg

from tests import app_under_test as tasks
from tests.worker_processes import scalar, wait_until


def job(db, job_id: int):
    return db.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()


def overlapping_attempts(db) -> list:
    """Jobs of which one attempt started before an earlier attempt had ended."""
    return db.execute(
        "SELECT a.job_id, a.attempt, b.attempt AS later FROM effects AS a"
        " JOIN effects AS b ON b.job_id = a.job_id AND b.attempt > a.attempt"
        "  AND b.what = 'start'"
        " WHERE a.what = 'start' AND b.at < coalesce(("
        "   SELECT min(e.at) FROM effects AS e WHERE e.job_id = a.job_id"
        "   AND e.attempt = a.attempt AND e.what <> 'start'), 'infinity')"
    ).fetchall()


def settled(db) -> bool:
    return scalar(db, "SELECT count(*) FROM jobs WHERE status IN ('pending', 'running')") == 0


def test_results_that_cannot_be_stored_fail_the_attempt(start_worker, db, app_schema):
    """A set, an object(): the attempt fails with a message naming the task and the type,
    the job retries then ends failed, and the worker goes on to the next job."""
    bad = [tasks.returns_a_set.enqueue({"kind": kind}) for kind in ("set", "object")]
    good = tasks.work.enqueue({"seconds": 0})
    worker = start_worker("--lease", "5", "--no-maintenance", "--poll-interval", "0.2")
    wait_until(lambda: settled(db), 30, "every job finished")
    for job_id in bad:
        row = job(db, job_id)
        assert (row["status"], row["attempts"]) == ("failed", 2)
        message = row["errors"][-1]["message"]
        assert "result of task 'returns_a_set'" in message and "JSON" in message, message
    assert job(db, good)["status"] == "done"
    assert worker.stop() == 0


def test_a_retry_policy_that_raises_fails_the_job_with_its_error(start_worker, db, app_schema):
    """The policy's own error is recorded, and the job does not stay running."""
    job_id = tasks.fails_with_bad_policy.enqueue()
    worker = start_worker("--lease", "5", "--no-maintenance", "--poll-interval", "0.2")
    wait_until(lambda: job(db, job_id)["errors"] != [], 30, "the first attempt failed")
    row = job(db, job_id)
    # The policy cannot say when to retry: the default backoff applies, so the job is
    # pending again (or already failed, after three attempts), never stuck running.
    assert row["status"] in ("pending", "failed") and row["attempts"] >= 1, row
    assert "retry policy of task 'fails_with_bad_policy'" in row["errors"][0]["message"]
    assert "ZeroDivisionError" in row["errors"][0]["message"]
    assert worker.stop() == 0


def test_system_exit_and_interrupts_in_handlers_fail_only_their_job(
    start_worker, db, app_schema
):
    """sys.exit in a sync and an async handler, KeyboardInterrupt, a CancelledError of
    the handler's own: each fails its job; the bystander jobs finish; the worker lives."""
    hostile = [
        tasks.sync_exits.enqueue({"code": 3}),
        tasks.async_exits.enqueue({"how": "exit"}),
        tasks.async_exits.enqueue({"how": "interrupt"}),
        tasks.async_exits.enqueue({"how": "cancelled"}),
    ]
    bystanders = [tasks.work.enqueue({"seconds": 0.5}) for _ in range(4)]
    worker = start_worker("--lease", "5", "--no-maintenance", "--concurrency", "8")
    wait_until(lambda: settled(db), 30, "every job finished")
    for job_id in hostile:
        row = job(db, job_id)
        assert row["status"] == "failed", row
        assert row["errors"][0]["type"] == "HandlerExit", row["errors"]
    assert {job(db, j)["status"] for j in bystanders} == {"done"}
    assert worker.process.poll() is None, worker.log()
    later = tasks.work.enqueue({"seconds": 0})
    wait_until(lambda: job(db, later)["status"] == "done", 10, "the worker still claims")
    assert worker.stop() == 0


def test_heartbeat_follows_a_task_lease_shorter_than_the_workers(start_worker, db, app_schema):
    """@app.task(lease=1) on a worker with a 30 s lease, running 3 s: the lease is kept
    alive, so the reaper never hands it back and it runs exactly once."""
    job_id = tasks.short_lease.enqueue({"seconds": 3})
    worker = start_worker("--lease", "30", "--poll-interval", "0.2")  # with the reaper
    wait_until(lambda: job(db, job_id)["status"] == "done", 30, "the job done")
    row = job(db, job_id)
    assert row["attempts"] == 1 and row["errors"] == [], row
    assert scalar(db, "SELECT count(*) FROM effects WHERE job_id = %s AND what = 'start'",
                  job_id) == 1
    assert worker.stop() == 0


def test_a_sync_handler_past_its_timeout_keeps_its_slot(start_worker, db, app_schema):
    """One slot: a sync handler times out but its thread runs on for 2 s. The next job
    is claimed only once the thread has returned, and it runs (it is not failed for a
    timeout it never had the chance to reach)."""
    stubborn = tasks.ignores_stop.enqueue({"seconds": 2})
    worker = start_worker("--lease", "10", "--no-maintenance", "--concurrency", "1",
                          "--poll-interval", "0.2")
    wait_until(lambda: job(db, stubborn)["status"] == "failed", 15, "the timeout recorded")
    assert "timeout" in job(db, stubborn)["errors"][0]["message"]
    follower = tasks.work.enqueue({"seconds": 0})
    wait_until(lambda: job(db, follower)["status"] == "done", 15, "the next job done")
    returned = scalar(db, "SELECT at FROM effects WHERE job_id = %s AND what = "
                      "'thread-returned'", stubborn)
    assert job(db, follower)["started_at"] >= returned
    assert "still runs in its thread" in worker.log()
    assert worker.stop() == 0


def test_a_handler_that_blocks_the_loop_is_named(start_worker, db, app_schema):
    """time.sleep in an async def: the watchdog logs which task blocked the loop."""
    job_id = tasks.blocks_loop.enqueue({"seconds": 1.5})
    worker = start_worker("--lease", "2", "--no-maintenance")
    wait_until(lambda: job(db, job_id)["status"] == "done", 15, "the job done")
    worker.wait_for_log("blocked for", timeout=5)
    worker.wait_for_log(f"by task 'blocks_loop' (job {job_id})", timeout=5)
    assert worker.stop() == 0


def test_failures_are_logged_one_line_each(start_worker, db, app_schema):
    """Every failed attempt leaves a line with the job, task, queue, attempt and error."""
    job_id = tasks.always_fails.enqueue({"n": 41})
    worker = start_worker("--lease", "5", "--no-maintenance", "--poll-interval", "0.2")
    wait_until(lambda: job(db, job_id)["status"] == "failed", 15, "the job failed")
    worker.wait_for_log(
        f"job {job_id} (task 'always_fails', queue 'default') attempt 2/2 failed: "
        "RuntimeError: always fails (41); failed for good", timeout=5,
    )
    assert f"job {job_id} (task 'always_fails', queue 'default') attempt 1/2 failed" \
        in worker.log()
    assert worker.stop() == 0


def test_cancelled_statements_and_locks_do_not_stall_the_worker(
    start_worker, db, app_schema, dsn
):
    """The jobs table is locked for seconds, twice, and every statement the worker sends
    meanwhile is cancelled (QueryCanceled in the claim, the heartbeat, the completer and
    the listener). The worker logs, retries, and finishes every job once."""
    ids = [tasks.long_async.enqueue({"seconds": 0.3}) for _ in range(60)]
    worker = start_worker("--lease", "3", "--concurrency", "4", "--poll-interval", "0.2")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE status = 'done'") >= 4,
               15, "some jobs done")
    with psycopg.connect(dsn, autocommit=True) as canceller:
        for _ in range(2):
            with psycopg.connect(dsn) as locker:
                locker.execute(f'LOCK TABLE "{app_schema}".jobs IN ACCESS EXCLUSIVE MODE')
                deadline = time.monotonic() + 2.5
                cancelled = 0
                while time.monotonic() < deadline:
                    row = canceller.execute(
                        "SELECT count(*) FILTER (WHERE pg_cancel_backend(pid))"
                        " FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND pid <> pg_backend_pid() AND datname = current_database()"
                    ).fetchone()
                    assert row is not None
                    cancelled += row[0]
                    time.sleep(0.1)
                assert cancelled > 0
                locker.rollback()
            time.sleep(0.5)
    try:
        wait_until(lambda: settled(db), 60, "every job done")
    except AssertionError:
        print(db.execute("SELECT status, count(*) FROM jobs GROUP BY 1").fetchall())
        print(worker.log()[-8000:])
        raise
    assert worker.process.poll() is None, worker.log()
    assert scalar(db, "SELECT count(*) FROM jobs WHERE status = 'done' AND id = ANY(%s)",
                  ids) == len(ids)
    assert "canceling statement" in worker.log()
    # A write held up past the lease may let the job run again (at least once), but never
    # two attempts of one job at the same time.
    assert overlapping_attempts(db) == []
    assert worker.stop() == 0
