"""job_context() for calling handlers directly; workers a test starts and stops."""

from __future__ import annotations

import threading

import psycopg
from psycopg.rows import DictRow

import pgbaton
from pgbaton.testing import WorkerThread, job_context, wait_for_job


def test_a_built_context_answers_as_a_workers_would() -> None:
    """Job id, attempt, key and queue as given; stop() turns should_stop and heartbeats."""
    app = pgbaton.App()

    @app.task(queue="mail", pass_context=True)
    def mail(ctx: pgbaton.JobContext, to: str) -> bool:
        return ctx.wait_for_stop(timeout=0)

    ctx = job_context(mail, {"to": "a"}, job_id=9, attempt=3, idempotency_key="order-9")
    assert (ctx.job_id, ctx.attempt, ctx.claim.queue) == (9, 3, "mail")
    assert ctx.idempotency_key == "order-9"
    assert job_context(mail, job_id=4).idempotency_key == "pgbaton-job-4"
    assert mail(ctx, to="a") is False
    assert ctx.heartbeat_sync() is True
    ctx.stop("cancelled")
    assert (ctx.should_stop, ctx.stop_reason, mail(ctx, to="a")) == (True, "cancelled", True)
    assert ctx.heartbeat_sync() is False
    assert ctx.heartbeats == 2


def test_a_worker_thread_runs_off_the_main_thread(
    queue: pgbaton.Queue, dsn: str, schema: str, db: psycopg.Connection[DictRow]
) -> None:
    """The worker runs in its own thread (no signal handlers needed) and stops cleanly."""
    app = pgbaton.App(dsn, schema=schema)
    threads: list[str] = []

    @app.task
    async def where() -> None:
        threads.append(threading.current_thread().name)

    worker = WorkerThread(app).start()
    job = wait_for_job(app, where.defer())
    assert worker.stop() == 0
    assert job.status == "done"
    assert threads == ["pgbaton-worker"]
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE status <> 'done'").fetchone() == {
        "n": 0
    }
