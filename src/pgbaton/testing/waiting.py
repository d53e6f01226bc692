"""wait_for_job(): wait, with a deadline, until a worker has finished one job."""

from __future__ import annotations

import asyncio
import time

from ..app import App
from ..models import Job
from ..queue import Queue
from ..queue_async import AsyncQueue

FINISHED = ("done", "failed", "cancelled")
POLL_SECONDS = 0.02


def wait_for_job(source: App | Queue, job_id: int, *, timeout: float = 30.0) -> Job:
    """The job once it is done, failed or cancelled; AssertionError after `timeout`."""
    queue = source.queue if isinstance(source, App) else source
    deadline = time.monotonic() + timeout
    while True:
        job = queue.get(job_id)
        if job is not None and job.status in FINISHED:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(_not_finished(job_id, job, timeout))
        time.sleep(POLL_SECONDS)


async def wait_for_job_async(
    source: App | AsyncQueue, job_id: int, *, timeout: float = 30.0
) -> Job:
    """wait_for_job() for an async test (the worker may run on the same loop)."""
    queue = source.async_queue if isinstance(source, App) else source
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        job = await queue.get(job_id)
        if job is not None and job.status in FINISHED:
            return job
        if loop.time() > deadline:
            raise AssertionError(_not_finished(job_id, job, timeout))
        await asyncio.sleep(POLL_SECONDS)


def _not_finished(job_id: int, job: Job | None, timeout: float) -> str:
    state = "does not exist" if job is None else f"is still {job.status}"
    return f"job {job_id} {state} after {timeout:g} s"
