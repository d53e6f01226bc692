"""A worker process runs async and sync handlers and writes their outcomes."""

from __future__ import annotations

import json

from tests import app_under_test as tasks
from tests.worker_processes import scalar, wait_until


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


def test_processes_option_runs_several_worker_processes(start_worker, db, app_schema):
    """--processes 2 supervises two worker processes that share the work and both stop
    cleanly on one SIGTERM to the supervisor."""
    ids = [tasks.work.enqueue({"seconds": 0.3}) for _ in range(12)]
    supervisor = start_worker("--processes", "2", "--concurrency", "2", "--no-maintenance")
    wait_until(
        lambda: scalar(db, "SELECT count(*) FROM jobs WHERE status = 'done'") == len(ids),
        what="all jobs done",
    )
    pids = {row["worker_pid"] for row in db.execute("SELECT DISTINCT worker_pid FROM effects")}
    assert len(pids) == 2 and supervisor.pid not in pids
    assert supervisor.stop() == 0
    finals = [json.loads(supervisor.stats_path.with_suffix(f".json.{n}").read_text())
              for n in range(2)]
    assert sum(f["stats"]["completed"] for f in finals) == len(ids)
    assert all(f["exit_status"] == 0 for f in finals)
    assert scalar(db, "SELECT count(*) FROM jobs WHERE status = 'running'") == 0
