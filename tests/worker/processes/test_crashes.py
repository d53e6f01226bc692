"""Workers that die, stall, are stopped, or lose their claim: the queue stays correct.

Every test runs real `pgbaton worker` processes against the test schema and proves the
outcome from the jobs and effects tables, not from the workers' own word.
"""

from __future__ import annotations

import os
import signal
import time

from tests import app_under_test as tasks
from tests.worker_processes import scalar, wait_until


def effects(db, job_id: int, what: str) -> list[tuple[int, int]]:
    """(attempt, worker_pid) of each effect of one kind for one job, in order."""
    rows = db.execute(
        "SELECT attempt, worker_pid FROM effects WHERE job_id = %s AND what = %s ORDER BY id",
        (job_id, what),
    )
    return [(row["attempt"], row["worker_pid"]) for row in rows]


def count_effects(db, ids: list[int], what: str, pid: int | None = None) -> int:
    return scalar(
        db,
        "SELECT count(*) FROM effects WHERE job_id = ANY(%s) AND what = %s"
        " AND (%s::int IS NULL OR worker_pid = %s::int)",
        ids, what, pid, pid,
    )


def test_killed_worker_jobs_are_finished_by_another_worker(start_worker, db, app_schema):
    """After SIGKILL, the jobs the dead worker held are reaped and run again elsewhere."""
    ids = [tasks.work.enqueue({"seconds": 2}) for _ in range(4)]
    # Two slots for four jobs: two are held by A when it dies, two were never touched.
    a = start_worker("--lease", "1", "--concurrency", "2", "--no-maintenance")
    wait_until(lambda: count_effects(db, ids, "start", a.pid) == 2, 10, "A started two jobs")
    os.kill(a.pid, signal.SIGKILL)
    assert a.process.wait(10) == -signal.SIGKILL
    held = [
        row["job_id"] for row in db.execute(
            "SELECT job_id FROM effects WHERE worker_pid = %s AND what = 'start' ORDER BY job_id",
            (a.pid,),
        )
    ]
    # Two seconds of work each: A cannot have finished any before it died.
    assert count_effects(db, ids, "end", a.pid) == 0
    assert scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status = 'running'",
                  held) == 2

    b = start_worker("--lease", "5", "--poll-interval", "0.2")
    wait_until(
        lambda: scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status = 'done'",
                       ids) == 4,
        15, "B finished every job",
    )
    assert b.stop(timeout=10) == 0

    for job in db.execute("SELECT id, attempts, errors FROM jobs WHERE id = ANY(%s)", (ids,)):
        if job["id"] in held:
            assert job["attempts"] == 2, job
            [error] = job["errors"]
            assert error["type"] == "LeaseExpired"
            assert error["worker_id"].rsplit(":", 2)[1] == str(a.pid)
            # At least once: A began the work, B did it again and finished it.
            assert effects(db, job["id"], "start") == [(1, a.pid), (2, b.pid)]
            assert effects(db, job["id"], "end") == [(2, b.pid)]
        else:
            assert (job["attempts"], job["errors"]) == (1, [])
            assert effects(db, job["id"], "start") == [(1, b.pid)]
            assert effects(db, job["id"], "end") == [(1, b.pid)]


def test_stalled_worker_cannot_overwrite_the_job_another_worker_took(
    start_worker, db, app_schema
):
    """A worker that wakes after its lease was reaped and re-claimed writes nothing."""
    job = tasks.stall_first_attempt.enqueue()
    a = start_worker("--lease", "1", "--no-maintenance")
    wait_until(lambda: effects(db, job, "start") == [(1, a.pid)], 10, "A started the job")
    # B leads maintenance, so it reaps A's expired lease and claims attempt 2.
    b = start_worker("--lease", "5", "--poll-interval", "0.2")
    wait_until(lambda: effects(db, job, "woke") != [], 15, "A woke after B took the job")
    # A wakes while B still holds the job running, the seed's dangerous moment; stopping
    # A drains its outcome writer, so its late completion has been tried and answered.
    assert a.stop(timeout=10) == 0
    row = db.execute(
        "SELECT status, attempts, claim_token, worker_id, result FROM jobs WHERE id = %s", (job,)
    ).fetchone()
    assert (row["status"], row["attempts"], row["result"]) == ("running", 2, None)
    assert row["claim_token"] is not None and row["worker_id"].rsplit(":", 2)[1] == str(b.pid)
    lost = a.final_stats()
    assert lost.get("completed", 0) == 0
    assert (
        lost.get("claims_lost", 0) + lost.get("results_discarded", 0)
        + lost.get("outcomes_refused", 0)
    ) >= 1, lost

    db.execute("INSERT INTO effects (job_id, what) VALUES (%s, 'proceed')", (job,))
    wait_until(lambda: scalar(db, "SELECT status FROM jobs WHERE id = %s", job) == "done",
               10, "B finished the job")
    assert b.stop(timeout=10) == 0
    row = db.execute("SELECT attempts, result, errors FROM jobs WHERE id = %s",
                     (job,)).fetchone()
    assert row["attempts"] == 2
    assert row["result"] == f"attempt 2 by pid {b.pid}"
    assert [e["type"] for e in row["errors"]] == ["LeaseExpired"]
    assert effects(db, job, "end") == [(2, b.pid)]
    assert b.final_stats()["completed"] >= 1


def test_sigterm_lets_short_jobs_finish(start_worker, db, app_schema):
    """On SIGTERM, jobs shorter than the grace finish, nothing new is claimed, exit is 0."""
    ids = [tasks.work.enqueue({"seconds": 1}) for _ in range(3)]
    ids.append(tasks.sync_work.enqueue({"seconds": 1}))
    later = tasks.work.enqueue({"seconds": 0})
    worker = start_worker("--lease", "5", "--concurrency", "4", "--shutdown-grace", "10",
                          "--no-maintenance")
    wait_until(lambda: count_effects(db, ids, "start") == 4, 10, "four jobs started")
    started = time.monotonic()
    assert worker.stop(timeout=10) == 0
    # Exited because the jobs ended, not because the grace ran out.
    assert time.monotonic() - started < 8
    assert scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status = 'done'",
                  ids) == 4
    assert count_effects(db, ids, "end", worker.pid) == 4
    # A slot freed during the grace, but a stopping worker claims nothing.
    assert scalar(db, "SELECT status || '/' || attempts FROM jobs WHERE id = %s",
                  later) == "pending/0"
    assert scalar(db, "SELECT count(*) FROM jobs WHERE status = 'running'") == 0
    stats = worker.final_stats()
    assert (stats["completed"], stats.get("released", 0)) == (4, 0)


def test_sigterm_releases_jobs_longer_than_the_grace(start_worker, db, app_schema):
    """On SIGTERM, jobs still running when the grace ends are released, not left running."""
    sync_job = tasks.sync_work.enqueue({"seconds": 60})
    async_job = tasks.work.enqueue({"seconds": 60})
    worker = start_worker("--lease", "5", "--shutdown-grace", "0.5", "--no-maintenance")
    wait_until(lambda: count_effects(db, [sync_job, async_job], "start") == 2, 10,
               "both jobs started")
    assert worker.stop(timeout=10) == 0
    rows = db.execute(
        "SELECT status, attempts, claim_token, lease_until, worker_id, started_at"
        " FROM jobs WHERE id = ANY(%s)", ([sync_job, async_job],),
    ).fetchall()
    assert rows == [
        {"status": "pending", "attempts": 0, "claim_token": None, "lease_until": None,
         "worker_id": None, "started_at": None},
    ] * 2
    # The sync handler was told why it had to stop, and had the chance to act on it.
    wait_until(lambda: effects(db, sync_job, "stopped:shutdown") != [], 5,
               "the sync handler's 'stopped:shutdown' effect (did the worker exit first?)")
    assert count_effects(db, [sync_job, async_job], "end") == 0
    assert worker.final_stats()["released"] == 2


def test_second_sigterm_stops_at_once(start_worker, db, app_schema):
    """A second SIGTERM releases the running jobs without waiting out the grace."""
    ids = [tasks.sync_work.enqueue({"seconds": 60}), tasks.work.enqueue({"seconds": 60})]
    worker = start_worker("--lease", "5", "--shutdown-grace", "60", "--no-maintenance")
    wait_until(lambda: count_effects(db, ids, "start") == 2, 10, "both jobs started")
    worker.process.send_signal(signal.SIGTERM)
    worker.wait_for_log("stopping:", 5)
    started = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(10) == 0
    assert time.monotonic() - started < 5
    assert "second stop request" in worker.log()
    assert scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status = 'pending'"
                  " AND attempts = 0", ids) == 2
    assert worker.final_stats()["released"] == 2


def test_cancelling_a_running_job_stops_its_handler(start_worker, db, app_schema, queue):
    """A cancelled job's async handler is cancelled, its sync handler told to stop (with
    the reason 'cancelled'), and the worker writes nothing over the cancellation."""
    async_job = tasks.wait_to_be_cancelled.enqueue()
    sync_job = tasks.sync_work.enqueue({"seconds": 60})
    worker = start_worker("--lease", "2", "--no-maintenance")
    wait_until(lambda: count_effects(db, [async_job, sync_job], "start") == 2, 10,
               "both jobs started")
    assert queue.cancel(async_job)
    assert queue.cancel(sync_job)
    cancelled_at = {
        row["id"]: row["finished_at"]
        for row in db.execute("SELECT id, finished_at FROM jobs WHERE id = ANY(%s)",
                              ([async_job, sync_job],))
    }
    # The cancel's notification (or else the next heartbeat) finds the token gone.
    wait_until(lambda: effects(db, async_job, "cancelled") != [], 5, "async handler cancelled")
    # The handler is told why: cancelled, not merely lost; and the log says so.
    wait_until(lambda: effects(db, sync_job, "stopped:cancelled") != [], 5,
               "sync handler stopped")
    assert worker.stop(timeout=10) == 0
    for job in (async_job, sync_job):
        assert f"lost the claim on job {job} (it was cancelled)" in worker.log()

    for row in db.execute(
        "SELECT id, status, attempts, result, errors, finished_at, claim_token"
        " FROM jobs WHERE id = ANY(%s)", ([async_job, sync_job],),
    ):
        assert (row["status"], row["attempts"], row["result"], row["errors"]) == (
            "cancelled", 1, None, []
        ), row
        assert row["finished_at"] == cancelled_at[row["id"]]
        assert row["claim_token"] is None
    assert count_effects(db, [async_job, sync_job], "end") == 0
    stats = worker.final_stats()
    assert stats["claims_lost"] == 2
    assert stats["results_discarded"] == 2
    assert stats.get("completed", 0) == stats.get("outcomes_refused", 0) == 0
