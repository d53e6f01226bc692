"""A sync handler that outlives its timeout keeps its claim until its thread returns:
the job stays running (its lease extended), so its key and its queue's concurrency
stay taken, and the timeout's outcome is written once the thread has returned.

Real `pgbaton worker` processes; every attempt's start and end are rows of the effects
table, and the overlaps are looked for in SQL."""

from __future__ import annotations

from tests import app_under_test as tasks
from tests.worker_processes import scalar, wait_until

KEYS = 2
JOBS_PER_KEY = 5
SOLO_JOBS = 4


def _spans(db) -> str:
    return """
        WITH spans AS (
            SELECT e.job_id, e.attempt, j.key, j.queue,
                   min(e.at) FILTER (WHERE e.what = 'start') AS began,
                   max(e.at) FILTER (WHERE e.what = 'end') AS ended
            FROM effects AS e JOIN jobs AS j ON j.id = e.job_id
            WHERE j.task = 'overruns'
            GROUP BY e.job_id, e.attempt, j.key, j.queue
        )"""


def test_a_timed_out_sync_handler_holds_its_key_and_queue_slot_until_it_returns(
    start_worker, db, app_schema, queue
):
    """Three worker processes, sync handlers that run 0.6 s past a 0.2 s timeout and
    retry once: no two attempts of one key, nor two of a queue limited to one, ever run
    at the same time, and each failure is written after its thread returned."""
    queue.set_concurrency("solo", 1)
    keyed = [tasks.overruns.enqueue({"seconds": 0.6}, key=f"k{k}")
             for _ in range(JOBS_PER_KEY) for k in range(KEYS)]
    solo = [tasks.overruns.enqueue({"seconds": 0.6}, queue="solo") for _ in range(SOLO_JOBS)]
    workers = [start_worker("--concurrency", "3", "--lease", "5", "--no-maintenance",
                            "--poll-interval", "0.1") for _ in range(3)]
    every = keyed + solo
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s)"
                              " AND status = 'failed'", every) == len(every),
               timeout=90, what="every job failed after its two attempts")
    for worker in workers:
        assert worker.stop() == 0

    overlaps = db.execute(_spans(db) + """
        SELECT a.job_id, a.attempt, b.job_id AS other, b.attempt AS other_attempt,
               a.key, a.queue
        FROM spans AS a JOIN spans AS b
          ON (a.job_id, a.attempt) < (b.job_id, b.attempt)
         AND (a.key = b.key OR (a.queue = 'solo' AND b.queue = 'solo'))
        WHERE a.began < coalesce(b.ended, 'infinity')
          AND b.began < coalesce(a.ended, 'infinity')
        ORDER BY a.job_id LIMIT 10""").fetchall()
    assert overlaps == [], f"attempts of one key or of the solo queue overlapped: {overlaps}"
    assert db.execute(_spans(db) + """
        SELECT count(*) AS spans, count(ended) AS closed FROM spans""").fetchone() == {
        "spans": 2 * len(every), "closed": 2 * len(every)}
    # Each failure was written once its thread had returned, and says so.
    late = db.execute(_spans(db) + """
        SELECT s.job_id, s.attempt FROM spans AS s JOIN jobs AS j ON j.id = s.job_id
        WHERE (j.errors -> (s.attempt - 1) ->> 'at')::timestamptz < s.ended""").fetchall()
    assert late == []
    for row in db.execute("SELECT errors FROM jobs WHERE id = ANY(%s)", (every,)):
        for error in row["errors"]:
            assert error["type"] == "JobTimeout", error
            assert "ran past its timeout of 0.2 s" in error["message"], error
            assert "its thread returned" in error["message"], error


def test_the_claim_of_a_timed_out_handler_outlives_its_lease_while_the_thread_runs(
    start_worker, db, app_schema, queue
):
    """A 1 s lease, a thread that runs 4 s past its timeout: the job stays running with
    its lease extended the whole time (the reaper, run all along, never hands it back),
    the log says why the job is still held, and the timeout is written when the thread
    returns."""
    job_id = tasks.overruns.enqueue({"seconds": 4.0}, max_attempts=1)
    worker = start_worker("--concurrency", "1", "--lease", "1", "--poll-interval", "0.1",
                          "--no-maintenance")
    worker.wait_for_log(f"job {job_id}: the sync handler of task 'overruns' ran past its "
                        "timeout", timeout=10)

    def reaped_and_past(seconds: float) -> bool:
        assert queue.reap() == 0
        return scalar(db, "SELECT clock_timestamp() - started_at > make_interval("
                      "secs => %s) FROM jobs WHERE id = %s", seconds, job_id)

    wait_until(lambda: reaped_and_past(2.5), timeout=10, what="2.5 s past the start")
    row = db.execute("SELECT status, lease_until > now() AS leased, errors FROM jobs"
                     " WHERE id = %s", (job_id,)).fetchone()
    assert row == {"status": "running", "leased": True, "errors": []}
    wait_until(lambda: scalar(db, "SELECT status FROM jobs WHERE id = %s", job_id)
               == "failed", timeout=15, what="the timeout written")
    [error] = scalar(db, "SELECT errors FROM jobs WHERE id = %s", job_id)
    assert error["type"] == "JobTimeout" and "its thread returned" in error["message"]
    assert scalar(db, "SELECT count(*) FROM effects WHERE job_id = %s AND what = 'end'",
                  job_id) == 1
    assert worker.stop() == 0


def test_a_stopping_worker_writes_the_timeout_of_a_thread_that_never_returns(
    start_worker, db, app_schema
):
    """A thread that runs on far past its timeout holds its job until the worker
    stops; then, after the grace, the timeout is written with its attempt spent (a
    release would give the attempt back, and a job that hangs for ever would come back
    after every stop), and the worker exits without waiting for the thread."""
    job_id = tasks.overruns.enqueue({"seconds": 600.0}, max_attempts=3)
    worker = start_worker("--concurrency", "1", "--lease", "5", "--no-maintenance",
                          "--shutdown-grace", "1")
    worker.wait_for_log(f"job {job_id}: the sync handler of task 'overruns' ran past its "
                        "timeout", timeout=10)
    assert worker.stop() == 0
    row = db.execute("SELECT status, attempts, claim_token, errors FROM jobs WHERE id = %s",
                     (job_id,)).fetchone()
    assert (row["status"], row["attempts"], row["claim_token"]) == ("pending", 1, None)
    [error] = row["errors"]
    assert error["type"] == "JobTimeout"
    assert "its thread still ran when the worker stopped" in error["message"], error
