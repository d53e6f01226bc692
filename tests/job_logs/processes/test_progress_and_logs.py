"""Progress and each job's own log lines in real `pgbaton worker` processes: two
workers run async and sync handlers that log and report at once; every line lands
with its own job and attempt, progress shows while the jobs run and stays at their
end, and --no-job-logs keeps nothing. Checked in SQL."""

from __future__ import annotations

from tests import app_under_test as tasks
from tests.worker_processes import scalar, wait_until

JOBS_PER_KIND = 30
LINES = 8


def test_two_workers_keep_every_line_with_its_own_job_and_attempt(start_worker, db):
    """Sixty jobs, async and sync, some failing their first attempt, on two workers of
    eight slots: each attempt's row holds exactly its own lines, at its level."""
    ids, failing_first = {}, set()
    for n in range(JOBS_PER_KIND):
        job_id = tasks.logs_and_reports.defer(lines=LINES, fail_first=n % 5 == 0)
        ids[job_id] = "async"
        if n % 5 == 0:
            failing_first.add(job_id)
        ids[tasks.sync_logs_and_reports.defer(lines=LINES)] = "sync"
    workers = [start_worker("--concurrency", "8", "--poll-interval", "0.2", "--no-maintenance")
               for _ in range(2)]
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE status = 'done'")
               == len(ids), 60, "every job done")
    for worker in workers:
        assert worker.stop() == 0
    rows = db.execute("SELECT job_id, attempt, lines, dropped FROM job_logs").fetchall()
    kept = {(r["job_id"], r["attempt"]): r for r in rows}
    expected = {(job_id, attempt) for job_id in ids
                for attempt in ((1, 2) if job_id in failing_first else (1,))}
    assert set(kept) == expected
    for (job_id, attempt), row in kept.items():
        assert row["dropped"] == 0
        assert [e["message"] for e in row["lines"]] == [
            f"job {job_id} attempt {attempt} line {n}" for n in range(LINES)]
        assert {e["level"] for e in row["lines"]} == (
            {"INFO"} if ids[job_id] == "async" else {"WARNING"})
    progress = db.execute("SELECT DISTINCT progress, progress_note FROM jobs").fetchall()
    assert {(r["progress"], r["progress_note"]) for r in progress} == {
        (1.0, f"line {LINES} of {LINES}"), (1.0, None)}


def test_progress_shows_while_the_job_runs_and_no_job_logs_keeps_none(start_worker, db):
    """The flush writes a running job's progress within its interval; with
    --no-job-logs nothing is kept, and the worker's own log is as before."""
    job_id = tasks.logs_and_reports.defer(lines=4, hold=3.0)
    worker = start_worker("--no-job-logs", "--poll-interval", "0.2", "--no-maintenance")
    wait_until(lambda: db.execute(
        "SELECT status = 'running' AND progress = 1 AND progress_note = 'line 4 of 4'"
        " AND progress_at >= started_at AS shown FROM jobs WHERE id = %s",
        (job_id,)).fetchone()["shown"], 30, "the progress of the running job")
    wait_until(lambda: scalar(db, "SELECT status FROM jobs WHERE id = %s", job_id) == "done",
               30, "the job to finish")
    assert worker.stop() == 0
    assert scalar(db, "SELECT count(*) FROM job_logs") == 0
    assert f"job {job_id} attempt 1 line 0" in worker.log()  # the worker's own stream
