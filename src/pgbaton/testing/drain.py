"""drain(): run every due job through the real worker, in the test's process, and say
what happened to each.

A real Worker (producer, executor with the App's middleware, heartbeat, completer) runs
on an event loop in this process; the claim and the fenced completions are pgbaton's
own statements. The worker is stopped once the database holds no due job and no running
one in the drained queues, and nothing is left in the worker's hands.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ..app import App
from ..errors import ConfigurationError, PgbatonError
from ..events import Event
from ..queue_async import AsyncQueue
from ..worker import Worker, WorkerConfig
from .results import JobResult

IDLE_CHECK_SECONDS = 0.02


class DrainTimeout(PgbatonError):
    """drain() did not see its queues empty within its timeout."""


def drain(
    app: App,
    queue: str | None = None,
    *,
    timeout: float = 60.0,
    concurrency: int = 1,
) -> list[JobResult]:
    """Run every due job of `queue` (every queue when None) until none is due or running;
    returns one JobResult per job that ran, in the order they were first claimed.

    Jobs that the handlers enqueue run too, when due. A failed attempt is retried within
    the drain only when its retry is due at once (a task with `retry=lambda attempt: 0`);
    otherwise its JobResult says `pending`. Call drain_async() inside an event loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(
            drain_async(app, queue, timeout=timeout, concurrency=concurrency)
        )
    raise ConfigurationError(
        "drain() was called inside a running event loop: use `await drain_async(app)`"
    )


async def drain_async(
    app: App,
    queue: str | None = None,
    *,
    timeout: float = 60.0,
    concurrency: int = 1,
) -> list[JobResult]:
    """drain() on the running event loop."""
    queues = None if queue is None else [queue]
    # claim_ahead=0: a test's drain claims what it runs at once, never holds a job
    # behind another, and so sees each job's attempts as they were before the drain.
    worker = Worker(app, WorkerConfig(
        queues=queues, concurrency=concurrency, claim_ahead=0, maintenance=False,
        poll_interval=0.05, shutdown_grace=timeout,
        worker_id=f"pgbaton-drain-{threading.get_ident()}",
    ))
    claimed: list[int] = []

    def on_claimed(event: Event) -> None:
        if event.worker_id == worker.worker_id and event.job_id not in claimed:
            assert event.job_id is not None
            claimed.append(event.job_id)

    app.events.subscribe(on_claimed, ["job.claimed"])
    # The worker's database: a routed queue's (App.route), else the App's own.
    probe = AsyncQueue(worker.queue.dsn, schema=app.schema, pool_size=1)
    running = asyncio.create_task(worker.run(), name="pgbaton-drain")
    try:
        await _until_idle(worker, running, probe, queue, timeout)
        worker.request_stop()
        status = await running
        if status != 0:
            raise PgbatonError(
                f"the draining worker failed (exit status {status}); its log says why"
            )
        app.events.flush(timeout=timeout)
        jobs = [(await probe.get(job_id), await probe.logs(job_id)) for job_id in claimed]
    finally:
        app.events.unsubscribe(on_claimed)
        if not running.done():
            worker.request_stop()
            worker.request_stop()  # the second request releases what it still holds
            await asyncio.gather(running, return_exceptions=True)
        await probe.close()
    return [JobResult.from_job(job, logs) for job, logs in jobs if job is not None]


async def _until_idle(
    worker: Worker,
    running: asyncio.Task[int],
    probe: AsyncQueue,
    queue: str | None,
    timeout: float,
) -> None:
    """Wait until the database has no due and no running job in the drained queues and
    the worker holds nothing. The database is asked first: a claim in flight shows
    there as a pending or a running job until the worker holds it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not running.done():
        if await _database_idle(probe, queue) and not len(worker.held):
            return
        if loop.time() > deadline:
            raise DrainTimeout(
                f"drain() gave up after {timeout:g} s: jobs were still due or running"
            )
        await asyncio.sleep(IDLE_CHECK_SECONDS)
    await running  # the worker ended on its own: its error, if any, is raised here


async def _database_idle(probe: AsyncQueue, queue: str | None) -> bool:
    stats: list[Any] = [s for s in await probe.stats() if queue is None or s.queue == queue]
    return all(s.running == 0 and s.oldest_pending_seconds is None for s in stats)
