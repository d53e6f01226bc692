"""The leader's services. Each has an interval and a run_once() that returns a count."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from .._transient import is_transient
from ..app import Task
from ..cron import cron_of, plan
from ..errors import ConfigurationError, InvalidArgument
from ..queue_async import AsyncQueue
from ..schedules import (
    CODE_SCHEDULE_GRACE,
    Schedule,
    job_for_tick,
    schedule_event,
    unreadable,
)

logger = logging.getLogger("pgbaton.maintenance")
# One due schedule as the scheduler writes it: the row read, its jobs, its new
# last_tick and next_tick (AsyncQueue.fire_schedules).
Fire = tuple[Schedule, list[dict[str, Any]], dt.datetime, dt.datetime]


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
        reaped = await self.queue.engine.reap()
        if reaped:
            logger.info("reaped %d jobs whose lease expired", reaped)
        return reaped


# How finished jobs leave the jobs table (WorkerConfig.retention_mode,
# docs/explanation/retention.md): "delete" deletes every finished job after the
# retention; "history" moves done jobs without an explicit idempotency key to the
# partitioned jobs_history after history_after, drops its partitions whole after the
# retention, and deletes the rest after the retention as "delete" does. The one default,
# for the worker, the Pruner and `pgbaton prune`: "history", which kept the hot table at
# 0.40x the size for 0.62x the autovacuum time in the side-by-side soak
# (docs/explanation/retention.md, benchmarks/results/soak.md).
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
    finishes more than one batch per interval does not outgrow it
    (docs/explanation/scaling.md). run_once() returns the count of each event:
    job.archived, history.dropped, job.pruned."""

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
                lambda: self.queue.engine.archive(after=self.history_after,
                                                  partition=self.history_partition,
                                                  limit=self.BATCH),
                deadline,
            )
            counts["history.dropped"] = await self.queue.engine.drop_history(
                retention=self.retention, lock_wait=self.queue.history_lock_wait)
        counts["job.pruned"], pruning_behind = await self._batches(
            lambda: self.queue.engine.prune(retention=self.retention, limit=self.BATCH), deadline
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
    claim does not read over them (docs/explanation/scaling.md, "The claim's dead head").

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

    And it vacuums once the table holds ten times the rows its planner statistics last
    counted (GROWN; at least engine.GROWN_MIN_ROWS), which makes the worker's cached
    plans, made for the smaller table, planned again.

    The VACUUM runs as a task of its own, so that a long one never holds up the reaper
    beside it; its count (or its error) comes out of the first run_once() after it
    ends, and the one after that may start the next: at most one VACUUM every two
    intervals. A look that found nothing to vacuum leaves the next look free. A deposed
    leader cancels the one running. A role that may not vacuum the table is told once
    and the table left to autovacuum until the next election."""

    name = "vacuumer"
    event = "jobs.vacuumed"
    MIN_DEAD_SHARE = 0.05
    # And once the table holds ten times the rows its planner statistics last counted
    # (at least engine.GROWN_MIN_ROWS): the worker's cached plans were made for the
    # smaller table, and a VACUUM's new statistics make them planned again. A new
    # table's first thousand jobs, then about each tenfold growth, when autovacuum has
    # not come by.
    GROWN = 10.0

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
            # Nothing to vacuum at the last look: look again now, not a look later (a
            # new table's statistics are due within one interval of its first rows).
        if self.allowed:
            self._running = asyncio.create_task(self._vacuum(), name="pgbaton vacuum")
        return 0

    async def _vacuum(self) -> int:
        try:
            return await self.queue.engine.vacuum(min_dead=self.min_dead,
                                           min_dead_share=self.MIN_DEAD_SHARE,
                                           grown=self.GROWN)
        except ConfigurationError as error:
            self.allowed = False
            logger.warning("%s; leaving the jobs table to autovacuum (vacuum_dead_tuples="
                           "None turns the leader's vacuum off)", error)
            return 0


class Ager:
    """Priority aging: raises the priority of jobs that have waited long in queues that
    ask for it (docs/explanation/flow_control.md). Each queue's own `every` decides when
    its pass is due; this only looks that often."""

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
        aged = await self.queue.engine.age_priorities()
        if aged:
            logger.info("raised the priority of %d jobs that waited long", aged)
        return aged


class Scheduler:
    """Enqueues the ticks of the schedules table's due rows
    (docs/explanation/schedules.md): each run reads the rows whose next tick has passed,
    plans their ticks with the row's catch-up policy, and enqueues them all with the
    rows' progress in one transaction, keyed by the schedule and the tick so that a tick
    is enqueued once however many leaders come and go. Nothing is kept between runs but
    the clean-up's time: a change to a row holds from the next run. `clock` gives now
    (tests drive it); `sync` writes the App's code schedules, at the first run of each
    term. A row this host cannot plan (a time zone its tz database lacks, a cron written
    by hand) is left out, with one warning, until its definition changes."""

    name = "scheduler"
    event = None
    FAILED_PAUSE = dt.timedelta(seconds=60)  # a row that cannot make its jobs waits
    CLEAN_UP_EVERY = dt.timedelta(minutes=1)

    def __init__(
        self,
        queue: AsyncQueue,
        tasks: Mapping[str, Task],
        interval: float,
        catch_up: float = 10.0,
        *,
        clock: Callable[[], dt.datetime] | None = None,
        sync: Callable[[dt.datetime], Awaitable[None]] | None = None,
        grace: dt.timedelta = CODE_SCHEDULE_GRACE,
        worker_id: str | None = None,
    ) -> None:
        self.queue = queue
        self.tasks = tasks
        self.interval = interval
        self.catch_up = catch_up  # the handover window, in seconds
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.sync = sync
        self.grace = grace
        self._synced = False
        self._cleaned_at: dt.datetime | None = None
        self._failed: dict[str, dt.datetime] = {}
        # Rows that cannot be planned here, by name, with the revision warned about:
        # left out of the due read until an operator's change raises the revision.
        self._unusable: dict[str, int] = {}
        self.worker_id = worker_id

    def on_elected(self) -> None:
        self._synced = False
        self._cleaned_at = None

    def on_deposed(self) -> None:
        pass

    async def run_once(self) -> int:
        now = self.clock()
        if not self._synced and self.sync is not None:
            await self.sync(now)
        self._synced = True
        if self._cleaned_at is None or now - self._cleaned_at >= self.CLEAN_UP_EVERY:
            self._cleaned_at = now
            for name in await self.queue.delete_missing_schedules(before=now - self.grace):
                logger.warning("deleted schedule %r: missing from the code of every worker "
                               "started in the last %s", name, self.grace)
        fires = []
        if self._unusable:
            await self._recheck_unusable()
        for schedule in await self.queue.schedules_due(now, passed=self._unusable):
            if self._failed.get(schedule.name, now) > now:
                continue
            try:
                fires.append(self._plan(schedule, now))
            except InvalidArgument as error:
                self._left_out(schedule, error)
            except Exception:
                self._failing(schedule, now)
        if not fires:
            return 0
        try:
            written = await self.queue.fire_schedules([fire for fire, _ in fires])
        except Exception as error:
            if is_transient(error) or len(fires) == 1:
                raise
            # One schedule's jobs refused (a key another task's job holds, say): each on
            # its own, so that it alone waits.
            written = []
            for fire, _ in fires:
                try:
                    written += await self.queue.fire_schedules([fire])
                except Exception as each:
                    if is_transient(each):
                        raise
                    self._failing(fire[0], now)
                    written.append(None)
        events = self.queue.events
        for (fire, dropped), ids in zip(fires, written, strict=True):
            if ids and events.active:
                schedule = fire[0]
                event = schedule_event("schedule.enqueued", schedule, None,
                                       ticks=[job["run_at"].astimezone(dt.UTC).isoformat()
                                              for job in fire[1]])
                event.job_id, event.count = ids[-1], len(ids)
                event.worker_id = self.worker_id
                events.emit(event)
            if ids is not None and dropped:
                schedule = fire[0]
                if events.active:
                    # The count is a floor (a long outage is not walked to its end);
                    # the span the ticks were missed in is exact.
                    edge = now - dt.timedelta(seconds=self.catch_up)
                    event = schedule_event(
                        "schedule.skipped", schedule, None, catch_up=schedule.catch_up,
                        catch_up_limit=schedule.catch_up_limit,
                        missed_after=None if schedule.last_tick is None
                        else schedule.last_tick.astimezone(dt.UTC).isoformat(),
                        missed_before=edge.astimezone(dt.UTC).isoformat())
                    event.count, event.worker_id = dropped, self.worker_id
                    events.emit(event)
                logger.warning(
                    "schedule %r: ticks missed while no worker led were not enqueued "
                    "(catch_up=%s%s)", schedule.name, schedule.catch_up,
                    f", limit {schedule.catch_up_limit}" if schedule.catch_up == "all"
                    else "",
                )
        return sum(len(ids) for ids in written if ids is not None)

    def _left_out(self, schedule: Schedule, error: InvalidArgument) -> None:
        """A row whose definition this host cannot use: one warning, then left out of
        the due read until its revision changes (an operator's fix)."""
        self._unusable[schedule.name] = schedule.revision
        logger.warning("schedule %r is skipped until it is changed: it %s",
                       schedule.name, unreadable(schedule, error))

    async def _recheck_unusable(self) -> None:
        """Forget the rows left out whose revision moved (changed, paused, removed):
        the next due read plans them afresh."""
        current = await self.queue.schedule_revisions(list(self._unusable))
        for name, revision in list(self._unusable.items()):
            if current.get(name) != revision:
                del self._unusable[name]

    def _failing(self, schedule: Schedule, now: dt.datetime) -> None:
        """One schedule that cannot make its jobs must not stop the others, nor the
        reaper that runs beside them: logged, and left alone for FAILED_PAUSE."""
        logger.exception("schedule %r (task %r) failed; it is tried again in %s",
                         schedule.name, schedule.task, self.FAILED_PAUSE)
        self._failed[schedule.name] = now + self.FAILED_PAUSE

    def _plan(self, schedule: Schedule, now: dt.datetime) -> tuple[Fire, int]:
        """The schedule's jobs and progress at now, and how many missed ticks its
        policy dropped."""
        planned = plan(
            cron_of(schedule.cron, schedule.timezone), last_tick=schedule.last_tick, now=now,
            window=self.catch_up, catch_up=schedule.catch_up,
            catch_up_limit=schedule.catch_up_limit,
        )
        task = self.tasks.get(schedule.task)
        defaults = {} if task is None else task.job_options(schedule.args, {})
        jobs = [job_for_tick(schedule, tick, defaults) for tick in planned.ticks]
        if task is not None:
            # Typed args checked and made JSON, sealed for a task that encrypts them.
            for job in jobs:
                job["args"] = task.stored_args(job["args"])
        return (schedule, jobs, planned.last_tick, planned.next_tick), planned.dropped
