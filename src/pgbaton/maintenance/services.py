"""The leader's services. Each has an interval and a run_once() that returns a count."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from croniter import croniter

from ..app import Periodic
from ..errors import ConfigurationError
from ..queue_async import AsyncQueue

logger = logging.getLogger("pgbaton.maintenance")


class Service(Protocol):
    name: str
    interval: float
    event: str | None  # emitted with the count when run_once() did something

    def on_elected(self) -> None:
        """Called each time this worker becomes leader, before the first run_once()."""

    def on_deposed(self) -> None:
        """Called when this worker stops leading (lost lock, stop): cancel what runs on."""

    async def run_once(self) -> int | Mapping[str, int]:
        """What the run did: a count of `event`, or a count per event name."""


class Reaper:
    """The reaper: expired leases go back to pending, or to failed."""

    name = "reaper"
    event = "job.reaped"

    def __init__(self, queue: AsyncQueue, interval: float) -> None:
        self.queue = queue
        self.interval = interval

    def on_elected(self) -> None:
        pass

    def on_deposed(self) -> None:
        pass

    async def run_once(self) -> int:
        reaped = await self.queue.reap()
        if reaped:
            logger.info("reaped %d jobs whose lease expired", reaped)
        return reaped


# How finished jobs leave the jobs table (WorkerConfig.retention_mode, docs/retention.md):
# "delete" deletes every finished job after the retention; "history" moves done jobs
# without an explicit idempotency key to the partitioned jobs_history after
# history_after, drops its partitions whole after the retention, and deletes the rest
# after the retention as "delete" does. The one default, for the worker, the Pruner and
# `pgbaton prune`: "history", which kept the hot table at 0.40x the size for 0.62x the
# autovacuum time in the side-by-side soak (docs/retention.md, benchmarks/results/soak.md).
RETENTION_MODES = ("delete", "history")
DEFAULT_RETENTION_MODE = "history"


class Pruner:
    """Takes finished jobs out of the jobs table, a batch (one short transaction) at a
    time. In "history" mode each run first moves done jobs to jobs_history (archive)
    and drops the history's partitions past the retention; then, in both modes, it
    deletes the finished jobs left past the retention (prune). Each batched step goes
    on while its batches come back full, for up to BUDGET_SECONDS a run (the reaper
    runs on the same leader and must not wait long); when it had to stop there, the
    next run comes after BEHIND_INTERVAL instead of the full interval. So a queue that
    finishes more than one batch per interval does not outgrow it (docs/scaling.md).
    run_once() returns the count of each event: job.archived, history.dropped,
    job.pruned."""

    name = "pruner"
    event = "job.pruned"
    BATCH = 10_000
    BUDGET_SECONDS = 1.0
    BEHIND_INTERVAL = 1.0

    def __init__(
        self,
        queue: AsyncQueue,
        interval: float,
        retention: float,
        *,
        mode: str = DEFAULT_RETENTION_MODE,
        history_after: float = 3600.0,
        history_partition: float = 86400.0,
    ) -> None:
        self.queue = queue
        self.every = interval
        self.interval = interval  # the wait before the next run, shorter when behind
        self.retention = retention
        self.mode = mode
        self.history_after = history_after
        self.history_partition = history_partition

    def on_elected(self) -> None:
        pass

    def on_deposed(self) -> None:
        pass

    async def run_once(self) -> dict[str, int]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.BUDGET_SECONDS
        counts = {"job.archived": 0, "history.dropped": 0, "job.pruned": 0}
        behind = False
        if self.mode == "history":
            counts["job.archived"], behind = await self._batches(
                lambda: self.queue.archive(after=self.history_after,
                                           partition=self.history_partition,
                                           limit=self.BATCH),
                deadline,
            )
            counts["history.dropped"] = await self.queue.drop_history(
                retention=self.retention)
        counts["job.pruned"], pruning_behind = await self._batches(
            lambda: self.queue.prune(retention=self.retention, limit=self.BATCH), deadline
        )
        behind = behind or pruning_behind
        self.interval = min(self.every, self.BEHIND_INTERVAL) if behind else self.every
        more = "; more are due, the next run is soon" if behind else ""
        if counts["job.archived"]:
            logger.info("moved %d done jobs to jobs_history%s", counts["job.archived"], more)
        if counts["history.dropped"]:
            logger.info("dropped %d partitions of jobs_history past the retention",
                        counts["history.dropped"])
        if counts["job.pruned"]:
            logger.info("pruned %d finished jobs%s", counts["job.pruned"], more)
        return counts

    async def _batches(
        self, step: Callable[[], Awaitable[int]], deadline: float
    ) -> tuple[int, bool]:
        """Run step (one batch) while its batches come back full, until the deadline
        (one batch at least); the total, and whether the last batch was full."""
        loop = asyncio.get_running_loop()
        total = 0
        while True:
            batch = await step()
            total += batch
            behind = batch == self.BATCH
            if not behind or loop.time() >= deadline:
                return total, behind


class Vacuumer:
    """VACUUMs the jobs table when its dead row versions pass a threshold, so that the
    claim does not read over them (docs/scaling.md, "The claim's dead head").

    Every claim leaves behind the entry of its job in jobs_claimable, marked dead by
    the next index scan but kept until a VACUUM removes it; those entries gather at
    the head of the index, where each claim starts, so a claim reads every one left
    since the last VACUUM. Autovacuum comes to a database at most once per
    autovacuum_naptime (a minute by default): at 5,000 jobs a second that is 1,400
    index pages of dead entries for every claim to read by the end of the minute, and
    a claim that costs five times its usual. The leader looks every `interval` and
    vacuums once the statistics count `min_dead` dead versions and at least
    MIN_DEAD_SHARE of the live ones (so that a large table, whose every index a VACUUM
    reads whole, is vacuumed less often).

    The VACUUM runs as a task of its own, so that a long one never holds up the reaper
    beside it; its count (or its error) comes out of the first run_once() after it
    ends, and the one after that may start the next: at most one VACUUM every two
    intervals. A deposed leader cancels the one running. A role that may not vacuum the table is
    told once and the table left to autovacuum until the next election."""

    name = "vacuumer"
    event = "jobs.vacuumed"
    MIN_DEAD_SHARE = 0.05

    def __init__(self, queue: AsyncQueue, interval: float, min_dead: int) -> None:
        self.queue = queue
        self.interval = interval
        self.min_dead = min_dead
        self.allowed = True
        self._running: asyncio.Task[int] | None = None

    def on_elected(self) -> None:
        self.allowed = True

    def on_deposed(self) -> None:
        running, self._running = self._running, None
        if running is None:
            return
        if not running.done():
            running.cancel()
        elif not running.cancelled() and running.exception() is not None:
            # Ended with the term, before a run_once() could hand its error on.
            logger.warning("the leader's VACUUM of the jobs table failed: %s",
                           running.exception())

    async def run_once(self) -> int:
        if self._running is not None:
            if not self._running.done():
                return 0
            finished, self._running = self._running, None
            dead = finished.result()  # what the VACUUM raised is the leader's to log
            if dead:
                logger.debug("vacuumed the jobs table: %d dead row versions", dead)
            return dead
        if self.allowed:
            self._running = asyncio.create_task(self._vacuum(), name="pgbaton vacuum")
        return 0

    async def _vacuum(self) -> int:
        try:
            return await self.queue.vacuum(min_dead=self.min_dead,
                                           min_dead_share=self.MIN_DEAD_SHARE)
        except ConfigurationError as error:
            self.allowed = False
            logger.warning("%s; leaving the jobs table to autovacuum (vacuum_dead_tuples="
                           "None turns the leader's vacuum off)", error)
            return 0


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

    def on_deposed(self) -> None:
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

    def on_deposed(self) -> None:
        pass

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
