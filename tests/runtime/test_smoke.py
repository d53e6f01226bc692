"""A worker process runs async and sync handlers and writes their outcomes."""

from __future__ import annotations

from tests.runtime import app_under_test as tasks
from tests.runtime.conftest import scalar, wait_until


def test_worker_runs_jobs_and_stops_cleanly(start_worker, db, app_schema):
    """Jobs of both kinds end done, failures end failed with their error, SIGTERM exits 0."""
    ids = [tasks.work.enqueue({"seconds": 0.01}) for _ in range(5)]
    ids.append(tasks.sync_work.enqueue({"seconds": 0.01}))
    failing = tasks.always_fails.enqueue({"n": 7})
    worker = start_worker("--lease", "5", "--no-maintenance")
    wait_until(
        lambda: scalar(db, "SELECT count(*) FROM jobs WHERE status IN ('done', 'failed')") == 7,
        what="all jobs finished",
    )
    assert worker.stop() == 0
    assert scalar(db, "SELECT count(*) FROM jobs WHERE status = 'done' AND id = ANY(%s)", ids) == 6
    row = db.execute(
        "SELECT status, attempts, errors FROM jobs WHERE id = %s", (failing,)
    ).fetchone()
    assert (row["status"], row["attempts"]) == ("failed", 2)
    assert [e["message"] for e in row["errors"]] == ["always fails (7)"] * 2
    assert worker.final_stats()["completed"] == 6
