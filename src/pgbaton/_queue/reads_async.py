"""Reads (async source): a job wherever it is kept, the jobs of a filter, each queue's
counts, a job's log lines, dependencies and batch; and what App.wait (waiting.py)
watches: the marks that make a job's end send a NOTIFY, the LISTEN for them, and the
poll that finds the ends a NOTIFY missed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from .._checks import check_filter, check_job_id, check_limit, check_status
from ..dependencies import BatchInfo, Dependency
from ..integrations.connections import AsyncCallerConnection
from ..job_filter import JobFilter
from ..models import Job, JobLog, QueueStats
from .core_async import AsyncQueueCore


class AsyncReads(AsyncQueueCore):
    """Looking at jobs: get, jobs, stats, logs, dependencies, batch; App.wait's."""

    async def get(self, job_id: int) -> Job | None:
        """The job, wherever it is kept: in jobs, or moved to jobs_history (looked up
        there only when jobs does not have it); None when there is none."""
        params = {"id": check_job_id(job_id)}
        rows = await self._fetch("job_get", params)
        if not rows:
            rows = await self._fetch("job_get_archived", params)
        return Job.from_row(rows[0]) if rows else None

    async def jobs(
        self,
        *,
        status: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        key: str | None = None,
        text: str | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        ids: Sequence[int] | None = None,
        limit: int = 100,
        conn: AsyncCallerConnection | None = None,
    ) -> list[Job]:
        """The newest jobs first, filtered as a JobFilter filters (status, queue, task,
        key, a substring of args or errors, finished or created since/until, ids); with
        conn=, as the caller's transaction sees them (its own enqueues not yet committed
        included)."""
        check_status(status)
        check_filter("queue", queue)
        check_filter("task", task)
        job_filter = JobFilter(status=status, queue=queue, task=task, key=key, text=text,
                               since=since, until=until,
                               ids=tuple(ids) if ids is not None else None)
        params = {**job_filter.params(), "limit": check_limit(limit)}
        return [Job.from_row(row) for row in await self._fetch("job_list", params, conn)]

    async def stats(self) -> list[QueueStats]:
        """Per queue: jobs by status, expired leases, age of the oldest claimable job."""
        return [QueueStats.from_row(row) for row in await self._fetch("queue_stats")]

    async def logs(self, job_id: int) -> list[JobLog]:
        """What the job's handler logged, one JobLog per run that logged (a snooze, a
        durable sleep or a release runs an attempt again), in the order they ran
        (docs/howto/progress-and-logs.md); kept while the job is, in jobs or
        jobs_history."""
        rows = await self._fetch("job_logs_get", {"id": check_job_id(job_id)})
        return [JobLog.from_row(row) for row in rows]

    async def dependencies(self, job_id: int) -> list[Dependency]:
        """The jobs this job waits for (relation "parent") and those that wait for it
        ("child"), each with its status."""
        rows = await self._fetch("job_dependencies_get", {"id": check_job_id(job_id)})
        return [Dependency(**row) for row in rows]

    async def batch(self, batch_id: int) -> BatchInfo | None:
        """A batch's counts (Job.batch_id names a job's batch); None if there is none."""
        rows = await self._fetch("batch_get", {"id": check_job_id(batch_id)})
        return BatchInfo.from_row(rows[0]) if rows else None

    # App.wait's (waiting.py): a job's end wakes its waiters by NOTIFY.

    async def listen_ended(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """LISTEN on conn (autocommit, kept open) for the ends of awaited jobs."""
        await self._fetch("channel_listen_ended", None, conn)

    async def mark_awaited(self, job_id: int) -> bool:
        """Mark an unfinished job so that its end sends a NOTIFY (App.wait); False when
        it has ended already or is not in the jobs table."""
        return bool(await self._fetch("job_await", {"id": check_job_id(job_id)}))

    async def ended_among(
        self, job_ids: Iterable[int], conn: psycopg.AsyncConnection[Any] | None = None
    ) -> list[int]:
        """Which of these jobs are no longer unfinished in the jobs table (App.wait's
        fallback poll, in case a NOTIFY was missed)."""
        ids = [check_job_id(job_id) for job_id in job_ids]
        rows = await self._fetch("job_ended_among", {"ids": ids}, conn)
        return [int(row["id"]) for row in rows]
