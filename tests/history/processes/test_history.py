"""The history retention mode with real workers (docs/explanation/retention.md): a fleet
of worker processes drains while a mover runs beside it and nothing is lost or doubled;
the leader's Pruner in history mode moves, drops and prunes on its own."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

import pgbaton
from pgbaton.testing import WorkerThread
from tests.worker_processes import scalar, wait_until

DAY = 86400.0


@pytest.mark.slow
def test_a_mover_beside_a_draining_fleet_loses_and_doubles_nothing(
    start_worker, queue: pgbaton.Queue, db
):
    """Two worker processes drain 3,000 jobs while this process moves done jobs to
    jobs_history in a loop (after=0: each as soon as it is done). Afterwards every job
    id is in exactly one of jobs and jobs_history, once, done after one attempt; and
    the mover really moved jobs while others were still pending or running. (The
    leader's periodic ticks carry idempotency keys: they stay in jobs, left out here.)"""
    total = 3000
    ids = queue.enqueue_many([{"task": "noop"} for _ in range(total)])
    supervisor = start_worker("--processes", "2", "--concurrency", "8",
                              "--retention-mode", "history", "--poll-interval", "0.2")
    moved = moved_during_drain = 0
    deadline = time.monotonic() + 120
    while True:
        unfinished = scalar(
            db, "SELECT count(*) FROM jobs WHERE task = 'noop' AND status <> 'done'")
        batch = queue.archive(after=0, partition=60, limit=200)
        moved += batch
        if unfinished:
            moved_during_drain += batch
        elif not batch:
            break
        assert time.monotonic() < deadline, f"{unfinished} jobs unfinished after 120 s"
    assert supervisor.stop() == 0

    rows = db.execute(
        "SELECT count(*) AS n, count(DISTINCT id) AS ids, bool_and(status = 'done') AS done,"
        " bool_and(attempts = 1) AS once, min(id) AS first, max(id) AS last"
        " FROM (SELECT id, status, attempts FROM jobs WHERE task = 'noop'"
        "       UNION ALL SELECT id, status, attempts FROM jobs_history) AS every_job"
    ).fetchone()
    assert rows == {"n": total, "ids": total, "done": True, "once": True,
                    "first": ids[0], "last": ids[-1]}
    assert scalar(db, "SELECT count(*) FROM jobs_history") == moved
    assert moved_during_drain > 0, "the mover never ran beside the drain"
    assert scalar(db, "SELECT count(*) FROM jobs WHERE task = 'noop'") == 0


def test_the_leaders_pruner_in_history_mode_moves_drops_and_prunes(
    dsn: str, schema: str, queue: pgbaton.Queue, db
):
    """A real worker with maintenance on, retention_mode="history" and short intervals:
    the jobs it runs move to jobs_history once history_after has passed; old done jobs
    move and their expired partition is dropped; an old done job with an idempotency
    key and an old failed job are deleted after the retention; and each step is an
    event with its count."""
    app = pgbaton.App(dsn, schema=schema)  # no periodic schedule: only these jobs

    @app.task
    async def noop() -> None:
        pass

    old = queue.enqueue_many([{"task": "noop"} for _ in range(20)])
    old_keyed = queue.enqueue_once("noop", idempotency_key="order-1").id
    old_failed = queue.enqueue("noop", max_attempts=1)
    claims = {c.id: c for c in queue.claim("w", limit=30)}
    for job_id in (*old, old_keyed):
        assert queue.complete(claims[job_id])
    assert queue.fail(claims[old_failed], "boom")
    db.execute("UPDATE jobs SET finished_at = now() - interval '3 days',"
               " created_at = now() - interval '3 days'")
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def count(event: pgbaton.Event) -> None:
        with lock:
            counts[event.name] += event.detail["count"]

    app.subscribe(count, names=["job.archived", "history.dropped", "job.pruned"])
    try:
        with WorkerThread(app, maintenance=True, retention_mode="history",
                          history_after=0.5, history_partition=60, retention=DAY,
                          prune_interval=0.2, reap_interval=0.2, elect_interval=0.2,
                          poll_interval=0.2, concurrency=4):
            fresh = queue.enqueue_many([{"task": "noop"} for _ in range(30)])
            wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs_history") == 30,
                       timeout=60, what="the 30 fresh jobs to move")
            wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs") == 0,
                       timeout=30, what="the old keyed and failed jobs to be pruned")

            def all_counted() -> bool:
                # The pruner sends its events once its whole pass has run: the history's
                # rows can be seen before the job.archived of their move.
                app.events.flush()
                with lock:
                    return (counts["job.archived"] >= 50 and counts["job.pruned"] >= 2
                            and counts["history.dropped"] >= 1)

            wait_until(all_counted, timeout=30, what="the pruner's events")
    finally:
        app.events.unsubscribe(count)
    # The old done jobs went (moved, then their partition of three days ago dropped);
    # the fresh ones are in the history, in the current minutes' partitions.
    assert sorted(r["id"] for r in db.execute("SELECT id FROM jobs_history")) == fresh
    assert all(queue.get(job_id) is None for job_id in (*old, old_keyed, old_failed))
    assert queue.get(fresh[0]).status == "done"  # type: ignore[union-attr]
    partitions = queue.history_partitions()
    assert partitions and all(p.name.startswith("jobs_history_2") for p in partitions)
    assert counts["job.archived"] == 50
    assert counts["history.dropped"] >= 1
    assert counts["job.pruned"] == 2
