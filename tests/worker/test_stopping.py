"""A Worker run in this process (not `pgbaton worker`, whose own timer ends the process)
stops within about FORCED_STOP_SECONDS of a second stop request, even while the first
stop's release of the jobs it holds waits for a row lock that is never let go."""

from __future__ import annotations

import asyncio
import time

import psycopg

import pgbaton
from pgbaton.worker import Worker, WorkerConfig
from pgbaton.worker.runner import FORCED_STOP_SECONDS, STOP_RELEASE_SECONDS
from tests.helpers import wait_for

DEADLINE_SECONDS = 30.0


async def test_a_second_stop_cuts_the_release_of_an_in_process_worker(queue, db, dsn, schema):
    app = pgbaton.App(dsn, schema=schema)

    @app.task
    async def slow() -> None:
        await asyncio.sleep(DEADLINE_SECONDS)

    jobs = [slow.defer() for _ in range(4)]
    worker = Worker(app, WorkerConfig(concurrency=1, claim_ahead=3, maintenance=False,
                                      poll_interval=0.05, shutdown_grace=0.2))
    running = asyncio.create_task(worker.run())

    def count(sql: str) -> int:
        return db.execute(sql).fetchone()["n"]  # type: ignore[index,no-any-return]

    try:
        await wait_for(lambda: count("SELECT count(*) AS n FROM jobs WHERE status = 'running'")
                       == len(jobs), "one job running and three held ahead")
        with psycopg.connect(dsn) as locker:
            locker.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
            locker.execute("SELECT 1 FROM jobs WHERE started_at IS NULL AND status = 'running'"
                           " ORDER BY id LIMIT 1 FOR UPDATE")
            worker.request_stop()
            # Blocked by this locker: another test's waits on a shared server are not it.
            await wait_for(lambda: count(
                "SELECT count(*) AS n FROM pg_stat_activity"
                f" WHERE {locker.info.backend_pid} = ANY(pg_blocking_pids(pid))") == 1,
                "the release waiting for the lock")
            asked = time.monotonic()
            worker.request_stop()
            code = await asyncio.wait_for(asyncio.shield(running), DEADLINE_SECONDS)
            took = time.monotonic() - asked
            locker.rollback()
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, DEADLINE_SECONDS)
    assert took < max(5 * FORCED_STOP_SECONDS, STOP_RELEASE_SECONDS / 2), took
    assert code == 0
    # Nothing half-written: what the release could not hand back is still held under the
    # worker's token, for its lease (and the reaper) to end.
    assert count("SELECT count(*) AS n FROM jobs WHERE status = 'running'"
                 " AND claim_token IS NOT NULL") >= 1
