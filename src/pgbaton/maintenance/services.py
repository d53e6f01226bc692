"""The leader's services. Each has an interval and a run_once() that returns a count."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from croniter import croniter

from ..app import Periodic
from ..queue_async import AsyncQueue

logger = logging.getLogger("pgbaton.maintenance")


class Service(Protocol):
    name: str
    interval: float
    event: str | None  # emitted with the count when run_once() did something

    def on_elected(self) -> None:
        """Called each time this worker becomes leader, before the first run_once()."""

    async def run_once(self) -> int: ...


class Reaper:
    """The reaper: expired leases go back to pending, or to failed."""

    name = "reaper"
    event = "job.reaped"

    def __init__(self, queue: AsyncQueue, interval: float) -> None:
        self.queue = queue
        self.interval = interval

    def on_elected(self) -> None:
        pass

    async def run_once(self) -> int:
        reaped = await self.queue.reap()
        if reaped:
            logger.info("reaped %d jobs whose lease expired", reaped)
        return reaped


class Pruner:
    """Deletes finished jobs older than the retention, a batch (one short transaction) at
    a time. A run goes on while its batches come back full, for up to BUDGET_SECONDS
    (the reaper runs on the same leader and must not wait long); when it had to stop
    there, the next run comes after BEHIND_INTERVAL instead of the full interval. So
    a queue that finishes more than one batch per interval does not outgrow it
    (docs/scaling.md)."""

    name = "pruner"
    event = "job.pruned"
    BATCH = 10_000
    BUDGET_SECONDS = 1.0
    BEHIND_INTERVAL = 1.0

    def __init__(self, queue: AsyncQueue, interval: float, retention: float) -> None:
        self.queue = queue
        self.every = interval
        self.interval = interval  # the wait before the next run, shorter when behind
        self.retention = retention

    def on_elected(self) -> None:
        pass

    async def run_once(self) -> int:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.BUDGET_SECONDS
        pruned = 0
        while True:
            batch = await self.queue.prune(retention=self.retention, limit=self.BATCH)
            pruned += batch
            behind = batch == self.BATCH
            if not behind or loop.time() >= deadline:
                break
        self.interval = min(self.every, self.BEHIND_INTERVAL) if behind else self.every
        if pruned:
            logger.info("pruned %d finished jobs%s", pruned,
                        "; more are due, the next run is soon" if behind else "")
        return pruned


class Ager:
    """Priority aging: raises the priority of jobs that have waited long in queues that
    ask for it (docs/flow_control.md). Each queue's own `every` decides when its pass is
    due; this only looks that often."""

    name = "ager"
    event = None

    def __init__(self, queue: AsyncQueue, interval: float) -> None:
        self.queue = queue
        self.interval = interval

    def on_elected(self) -> None:
        pass

    async def run_once(self) -> int:
        aged = await self.queue.age_priorities()
        if aged:
            logger.info("raised the priority of %d jobs that waited long", aged)
        return aged


class Scheduler:
    """Enqueues each periodic schedule's job at each of its cron ticks, keyed by the
    schedule and the tick so that a tick is enqueued once however many leaders come
    and go."""

    name = "scheduler"
    event = None

    def __init__(
        self,
        queue: AsyncQueue,
        periodics: Sequence[Periodic],
        interval: float,
        catch_up: float = 10.0,
    ) -> None:
        self.queue = queue
        self.periodics = list(periodics)
        self.interval = interval
        self.catch_up = dt.timedelta(seconds=catch_up)
        self._next: dict[int, dt.datetime] = {}

    def on_elected(self) -> None:
        # A new term starts afresh: ticks are computed from the clock, not remembered
        # from a term that may have ended long ago.
        self._next.clear()

    async def run_once(self) -> int:
        now = dt.datetime.now(dt.UTC)
        jobs: list[dict[str, Any]] = []
        for index, periodic in enumerate(self.periodics):
            try:
                jobs += self._due(index, periodic, now)
            except Exception:
                # One schedule that cannot make its job must not stop the others, nor
                # the reaper that runs beside them.
                logger.exception("periodic schedule %r of task %r failed; skipping its "
                                 "tick", periodic.cron, periodic.task.name)
                self._next[index] = now + dt.timedelta(seconds=60)
        if jobs:
            await self.queue.enqueue_many(jobs)
        return len(jobs)

    def _due(self, index: int, periodic: Periodic, now: dt.datetime) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = []
        if index not in self._next:
            # Ticks that fell due while no one led (the old leader died, this one was
            # elected) are enqueued now; those the old leader did enqueue are skipped
            # by their idempotency key. The window bounds it: a handover that takes
            # longer than catch_up loses the ticks before it.
            self._next[index] = croniter(periodic.cron, now - self.catch_up).get_next(
                dt.datetime
            )
        while self._next[index] <= now:
            tick = self._next[index]
            options = periodic.task.job_options(
                periodic.args,
                {"run_at": tick, "idempotency_key": periodic.idempotency_key(tick)},
            )
            jobs.append({"task": periodic.task.name, "args": periodic.args, **options})
            self._next[index] = croniter(periodic.cron, tick).get_next(dt.datetime)
        return jobs
