"""Inline mode: enqueue runs the job at once, in the test's process, with no database.

For unit tests of the code that enqueues. The arguments go through the checks of the
real path (the handler's signature, the enqueue options, JSON encoding), the handler
gets them back decoded from JSON as a worker would, and it runs through the real
Executor: the App's middleware, the task's timeout, the check that its result can be
stored. One attempt runs; retries, delays and per-key order need the database (use
drain()). A handler's Snooze, Cancel or Discard is reported as the worker would leave
the job (a snooze: pending, one snooze counted, not slept), never raised.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import logging
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from .. import dependencies, job_logs
from .._checks import job_params, many_job_params
from ..app import App, Task
from ..context import JobContext
from ..dependencies import Batch
from ..errors import ConfigurationError, InvalidArgument, UnknownTask
from ..models import Claim, JobLog
from ..outcomes import HandlerOutcome
from ..worker.executor import Executor
from ..worker.held import HeldJobs, Outcome, Running
from .results import JobResult

if TYPE_CHECKING:
    from ..queue import Queue
    from ..queue_async import AsyncQueue

INLINE_WORKER_ID = "pgbaton-inline"
INLINE_LEASE_SECONDS = 30.0


class InlineJobs:
    """The jobs run by one inline() block, in the order they were enqueued."""

    def __init__(self, app: App, *, raise_errors: bool) -> None:
        self.app = app
        self.raise_errors = raise_errors
        self.results: list[JobResult] = []
        self._ids = itertools.count(1)
        self._batch_ids = itertools.count(1)
        self._by_idempotency_key: dict[str, int] = {}

    def __iter__(self) -> Iterator[JobResult]:
        return iter(list(self.results))

    def __len__(self) -> int:
        return len(self.results)

    def of(self, task: Task | str) -> list[JobResult]:
        """The results of one task's jobs."""
        name = task.name if isinstance(task, Task) else task
        return [r for r in self.results if r.task == name]

    def prepare(self, task_name: str, args: Mapping[str, Any] | None,
                options: dict[str, Any]) -> tuple[Task, Claim] | int:
        """Check one job as the real enqueue does; the claim to run it with, or the id of
        the job its idempotency key already made."""
        params = job_params(task_name, args, **options)
        task = self.app.tasks.get(task_name)
        if task is None:
            raise UnknownTask(
                f"no task named {task_name!r} is registered in this App "
                f"(it has: {', '.join(sorted(self.app.tasks)) or 'none'})"
            )
        task.check_args(args)
        key = params["idempotency_key"]
        if key is not None and key in self._by_idempotency_key:
            return self._by_idempotency_key[key]
        job_id = next(self._ids)
        if key is not None:
            self._by_idempotency_key[key] = job_id
        now = dt.datetime.now(dt.UTC)
        claim = Claim(
            id=job_id, token=uuid.uuid4(), attempts=1, max_attempts=params["max_attempts"],
            task=task_name, args=json.loads(params["args"]), key=params["key"],
            queue=params["queue"], priority=params["priority"],
            lease_until=now + dt.timedelta(seconds=INLINE_LEASE_SECONDS), created_at=now,
            job_idempotency_key=key, run_at=now,
        )
        return task, claim

    def blocked(self, options: dict[str, Any]) -> str | None:
        """Take after/after_failure out of a job's options; why the job may not run
        (a parent that did not end done), or None. Its parents ran before it: inline
        runs every job when it is enqueued."""
        after = options.pop("after", None)
        run_anyway = dependencies.check_after_failure("", options.pop("after_failure", "cancel"))
        by_id = {result.id: result for result in self.results}
        for parent in dependencies.check_after("", after, labels=False):
            assert isinstance(parent, int)
            if parent not in by_id:
                raise InvalidArgument(
                    f"after: no job {parent} ran in this inline block; nothing was written"
                )
            ended = by_id[parent]
            if ended.status != "done" and not run_anyway:
                return (f"DependencyFailed: job {parent} (task {ended.task}) that this job "
                        f"waits for ended {ended.status}")
        return None

    def cancel(self, claim: Claim, reason: str) -> int:
        self.results.append(JobResult(
            id=claim.id, task=claim.task, args=claim.args, queue=claim.queue,
            status="cancelled", attempts=0, error=reason,
        ))
        return claim.id

    def many_in_order(
        self, jobs: list[Mapping[str, Any]], batch: Batch | None, queue: InlineQueue
    ) -> list[int]:
        """enqueue_many with labels, after or a batch: each job after its parents, then
        the batch's callbacks with the counts the database would give them."""
        plan = dependencies.plan(jobs)
        many_job_params(plan.jobs)
        ids = [0] * len(plan.jobs)
        for position in plan.order():
            job = dict(plan.jobs[position])
            job["after"] = [ids[plan.positions[p]] if isinstance(p, str) else p
                            for p in plan.parents[position]]
            job["after_failure"] = "run" if plan.run_after_failure[position] else "cancel"
            ids[position] = queue.enqueue(job.pop("task"), job.pop("args", None), **job)
        if batch is not None:
            batch.params(len(ids))  # the same checks as the database path
            statuses = [r.status for r in self.results if r.id in set(ids)]
            counts = {"id": next(self._batch_ids), "jobs": len(ids),
                      **{s: statuses.count(s) for s in ("done", "failed", "cancelled")}}
            due = [batch.on_finish]
            if counts["done"] == len(ids):
                due.append(batch.on_success)
            for callback in due:
                if callback is not None:
                    queue.enqueue(
                        callback.task, {**(callback.args or {}), "batch": counts},
                        **callback.job_options(),
                    )
        return ids

    async def run(self, claim: Claim) -> int:
        outcome = await _execute(self.app, claim)
        error = outcome.error
        self.results.append(JobResult(
            id=claim.id, task=claim.task, args=claim.args, queue=claim.queue,
            status=_status(outcome), attempts=0 if outcome.snooze is not None else 1,
            result=outcome.result if outcome.ok else None,
            error=None if outcome.ok else _describe(error),
            snoozes=1 if outcome.snooze is not None else 0,
            progress=None if outcome.progress is None else outcome.progress[0],
            progress_note=None if outcome.progress is None else outcome.progress[1],
            logs=[] if outcome.logs is None else [JobLog(
                attempt=1, lines=outcome.logs[0], dropped=outcome.logs[1],
                created_at=dt.datetime.now(dt.UTC), run=1,
                ended=job_logs.ending(ok=outcome.ok, snoozed=outcome.snooze is not None,
                                      end=outcome.end, error=outcome.error))],
        ))
        # What the handler chose (Snooze, Cancel, Discard) is reported, never raised:
        # it is how the job was meant to end (a snooze is not slept either).
        chosen = isinstance(error, HandlerOutcome)
        if not outcome.ok and self.raise_errors and not chosen:
            if isinstance(error, BaseException):
                raise error
            raise RuntimeError(str(error))
        return claim.id

    def run_blocking(self, claim: Claim) -> int:
        """run() from sync code: on a loop of its own, in a thread when this thread
        already runs one (a sync enqueue inside an async test)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(claim))
        outcome: list[int] = []
        failure: list[BaseException] = []

        def target() -> None:
            try:
                outcome.append(asyncio.run(self.run(claim)))
            except BaseException as error:
                failure.append(error)

        thread = threading.Thread(target=target, name="pgbaton-inline")
        thread.start()
        thread.join()
        if failure:
            raise failure[0]
        return outcome[0]


async def _execute(app: App, claim: Claim) -> Outcome:
    """One attempt through the worker's own Executor, with a lease that always holds."""
    held = HeldJobs(1)

    async def extend(_: JobContext) -> bool:
        return True

    async def start(_: Running) -> bool:
        return True  # never called: an inline claim is started (Claim.started)

    executor = Executor(
        held=held, tasks=app.tasks, middlewares=app.middlewares,
        worker_id=INLINE_WORKER_ID, claim_lease=INLINE_LEASE_SECONDS,
        extend_one=extend, start_ahead=start, notify=lambda *_, **__: None,
        on_dropped=lambda _: None, job_log_level=logging.INFO,
    )
    job_logs.install()
    try:
        executor.start([claim], held.now())
        running = held.get(claim.token)
        assert running is not None and running.handler is not None
        await running.handler
        (outcome,) = held.take_outcomes(1)
    finally:
        executor.shutdown()
        job_logs.uninstall()
    return outcome


def _status(outcome: Outcome) -> str:
    """The status the worker's write would leave after this one attempt: a snooze is
    pending again; an end is its own; any other failure is reported as failed (inline
    runs one attempt)."""
    if outcome.ok:
        return "done"
    if outcome.snooze is not None:
        return "failed" if outcome.max_snoozes == 0 else "pending"  # max_snoozes=0
    return outcome.end or "failed"


def _describe(error: BaseException | str | None) -> str:
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    return f"Error: {error}"


class _NoDatabase:
    # Inline mode joins no transaction (assertions ask this before they read).
    connection_provider = None

    def __init__(self, jobs: InlineJobs) -> None:
        self._jobs = jobs

    def __getattr__(self, name: str) -> Any:
        raise ConfigurationError(
            f"inline mode has no database: Queue.{name} is not available inside "
            "pgbaton.testing.inline(); look at what ran in its results"
        )


class InlineQueue(_NoDatabase):
    """Stands in for App.queue inside inline(): enqueue runs the job at once."""

    def enqueue(self, task: str, args: Mapping[str, Any] | None = None, *,
                conn: Any = None, **options: Any) -> int:
        reason = self._jobs.blocked(options)
        prepared = self._jobs.prepare(task, args, options)
        if isinstance(prepared, int):
            return prepared
        if reason is not None:
            return self._jobs.cancel(prepared[1], reason)
        return self._jobs.run_blocking(prepared[1])

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]], *, conn: Any = None,
                     batch: Batch | None = None) -> list[int]:
        jobs = list(jobs)
        if dependencies.check_batch(batch) is not None or dependencies.needs_plan(jobs):
            return self._jobs.many_in_order(jobs, batch, self)
        many_job_params(jobs)  # every job is checked before any runs, as in one statement
        return [
            self.enqueue(job["task"], job.get("args"),
                         **{k: v for k, v in job.items() if k not in ("task", "args")})
            for job in jobs
        ]


class InlineAsyncQueue(_NoDatabase):
    """Stands in for App.async_queue inside inline()."""

    async def enqueue(self, task: str, args: Mapping[str, Any] | None = None, *,
                      conn: Any = None, **options: Any) -> int:
        reason = self._jobs.blocked(options)
        prepared = self._jobs.prepare(task, args, options)
        if isinstance(prepared, int):
            return prepared
        if reason is not None:
            return self._jobs.cancel(prepared[1], reason)
        return await self._jobs.run(prepared[1])

    async def enqueue_many(self, jobs: Iterable[Mapping[str, Any]], *,
                           conn: Any = None, batch: Batch | None = None) -> list[int]:
        jobs = list(jobs)
        if dependencies.check_batch(batch) is not None or dependencies.needs_plan(jobs):
            # The sync path runs each job in a thread of its own while this loop runs.
            return self._jobs.many_in_order(jobs, batch, InlineQueue(self._jobs))
        many_job_params(jobs)
        return [
            await self.enqueue(job["task"], job.get("args"),
                               **{k: v for k, v in job.items() if k not in ("task", "args")})
            for job in jobs
        ]


@contextmanager
def inline(app: App, *, raise_errors: bool = True) -> Iterator[InlineJobs]:
    """Within the block, every enqueue through `app` (task.defer, task.enqueue,
    app.queue.enqueue and their async forms) runs its job at once and returns its id.

    A handler's exception is raised from the enqueue call (raise_errors=False records
    it in the results instead); the results are the block's value.
    """
    jobs = InlineJobs(app, raise_errors=raise_errors)
    # App.queue and App.async_queue return these while they are set; the App's own
    # queues (and their connection pools) come back untouched afterwards.
    saved = app._queue, app._async_queue
    app._queue = cast("Queue", InlineQueue(jobs))
    app._async_queue = cast("AsyncQueue", InlineAsyncQueue(jobs))
    try:
        yield jobs
    finally:
        app._queue, app._async_queue = saved
