"""A worker that stops while the thread of a cancelled keyed job runs on: it stops
extending the job's lease, lets nothing go (the key stays held until that lease ends)
and leaves no task or pool behind (runner._release_when_stopped)."""

from __future__ import annotations

import asyncio
import threading
import time

import pgbaton
from pgbaton.worker import Worker, WorkerConfig


async def test_a_stopping_worker_keeps_the_key_of_a_thread_that_runs_on(
    queue: pgbaton.Queue, db, dsn: str, schema: str
):
    app = pgbaton.App(dsn, schema=schema)
    gate, started = threading.Event(), threading.Event()

    @app.task
    def blocker() -> None:
        started.set()
        gate.wait(60)  # ignores should_stop

    job = blocker.using(key="k").defer()
    worker = Worker(app, WorkerConfig(lease=1.5, maintenance=False, poll_interval=0.05,
                                      shutdown_grace=0.5))
    running = asyncio.create_task(worker.run())
    try:
        assert await asyncio.to_thread(started.wait, 10)
        await asyncio.to_thread(queue.cancel, job)
        deadline = time.monotonic() + 10
        while worker.stats["claims_lost"] < 1:
            assert time.monotonic() < deadline, "the worker never saw the cancel"
            await asyncio.sleep(0.05)
        worker.request_stop()
        await running
        assert not worker._letting_go  # nothing left running after run() returned
        assert worker.queue.engine._db._pool is None  # and no pool opened again
        row = db.execute("SELECT status, claim_token IS NOT NULL AS held FROM jobs"
                         " WHERE id = %s", [job]).fetchone()
        assert row == {"status": "cancelled", "held": True}  # not let go: the thread runs
    finally:
        gate.set()
        app.queue.close()
