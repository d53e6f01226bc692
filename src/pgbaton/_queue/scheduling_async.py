"""Schedules (async source), docs/explanation/schedules.md: adding, changing, pausing,
resuming, removing and running a schedule now, and listing them; and the maintenance
leader's side (maintenance/services.py, Scheduler): the schedules due, their jobs
enqueued with their progress in one transaction, and the code schedules an App declares.
Built on the enqueue family, which writes a schedule's jobs (enqueue_many).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._queue_base import schedule_now
from ..cron import DEFAULT_CATCH_UP_LIMIT, Cron
from ..errors import InvalidArgument, ScheduleChanged
from ..schedules import (
    CODE_SCHEDULE_GRACE,
    Schedule,
    check_changes,
    check_revision,
    check_schedule_name,
    definition,
    describe,
    job_for_tick,
    schedule_event,
    stored,
)
from .enqueueing_async import AsyncEnqueueing
from .job_writes_async import UNIQUE_ATTEMPTS

schedule_logger = logging.getLogger("pgbaton.schedules")


class AsyncScheduling(AsyncEnqueueing):
    """Schedules, on the enqueue family: a schedule's jobs are enqueued by enqueue_many."""

    async def add_schedule(
        self,
        name: str,
        cron: str,
        task: str,
        args: Mapping[str, Any] | None = None,
        *,
        timezone: str = "UTC",
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        catch_up: str = "skip",
        catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
        paused: bool = False,
        new: bool = False,
        by: str | None = None,
        now: dt.datetime | None = None,
    ) -> Schedule:
        """Add a schedule: `task` enqueued with `args` at each tick of `cron` (5 fields,
        or 6 with seconds last) read in `timezone`. The leader enqueues its ticks from
        the next one on, without restarts. Refused before anything is written: a cron
        that never fires, an unknown zone or catch-up policy, a name taken, and a task
        no schedule names yet unless new=True (an App's app.schedules knows its tasks).
        queue, priority, max_attempts: None takes the task's own."""
        now = schedule_now(now)
        params = definition(
            cron=cron, task=task, args=args, timezone=timezone, queue=queue,
            priority=priority, max_attempts=max_attempts, catch_up=catch_up,
            catch_up_limit=catch_up_limit, now=now,
        )
        if not isinstance(paused, bool):
            raise InvalidArgument(f"paused must be True or False, got {paused!r}")
        params |= {"name": check_schedule_name(name), "paused": paused, "by": by,
                   "now": now}
        if not new:
            await self._check_task_named(task)
        rows = await self._fetch("schedule_insert", params)
        if not rows:
            raise InvalidArgument(f"a schedule named {name!r} exists already; nothing "
                                  "was written")
        schedule = Schedule.from_row(rows[0])
        schedule_logger.info("schedule %s added by %s", describe(schedule), by or "the API")
        self._schedule_event("schedule.added", schedule, by)
        return schedule

    async def update_schedule(
        self, name: str, *, new: bool = False, by: str | None = None,
        now: dt.datetime | None = None, revision: int | None = None, **changes: Any,
    ) -> Schedule:
        """Change a run-time schedule's cron, timezone, task, args, queue, priority,
        max_attempts, catch_up or catch_up_limit; the leader follows from its next run.
        A new cron or zone counts from now: its past ticks are not caught up. A schedule
        defined in code is refused (change the code and deploy). `revision`: the
        Schedule.revision the change was made against (a form opened earlier); if the
        row has moved on since, ScheduleChanged and nothing is written."""
        check_changes(changes)
        now = schedule_now(now)
        current = await self._schedule_named(name)
        if revision is not None:
            check_revision(current, revision)
        if current.origin == "code":
            raise InvalidArgument(
                f"schedule {name!r} is defined in code (@app.periodic): change it there "
                "and deploy; pause, resume and run now work on it; nothing was written"
            )
        params = definition(**(stored(current) | changes), now=now)
        if not new and params["task"] != current.task:
            await self._check_task_named(params["task"])
        timing = (params["cron"], params["timezone"]) != (current.cron, current.timezone)
        params |= {
            "name": name, "by": by,
            "revision": current.revision if revision is None else revision,
            "last_tick": now if timing else current.last_tick,
            "next_tick": params["next_tick"] if timing else current.next_tick,
        }
        rows = await self._fetch("schedule_update", params)
        if not rows:
            raise ScheduleChanged(f"schedule {name!r} changed while this change was "
                                  "made: read it again; nothing was written")
        schedule = Schedule.from_row(rows[0])
        schedule_logger.info("schedule %s changed by %s (%s)", describe(schedule),
                             by or "the API", ", ".join(sorted(changes)))
        self._schedule_event("schedule.updated", schedule, by, changes=sorted(changes))
        return schedule

    async def pause_schedule(self, name: str, *, by: str | None = None) -> Schedule:
        """Enqueue none of the schedule's ticks until resume_schedule(); survives
        restarts and deploys."""
        return await self._set_schedule_paused(name, True, by, None)

    async def resume_schedule(
        self, name: str, *, by: str | None = None, now: dt.datetime | None = None
    ) -> Schedule:
        """Enqueue the schedule's ticks again from the next one on: the ticks of the
        pause are not caught up."""
        return await self._set_schedule_paused(name, False, by, schedule_now(now))

    async def _set_schedule_paused(
        self, name: str, paused: bool, by: str | None, now: dt.datetime | None
    ) -> Schedule:
        for _ in range(UNIQUE_ATTEMPTS):  # each retry needs another change in between
            current = await self._schedule_named(name)
            next_tick = None if now is None else Cron(
                current.cron, current.timezone).next_after(now)
            rows = await self._fetch("schedule_set_paused", {
                "name": name, "paused": paused, "revision": current.revision,
                "now": now, "next_tick": next_tick, "by": by,
            })
            if rows:
                schedule_logger.info("schedule %r %s by %s", name,
                                     "paused" if paused else "resumed", by or "the API")
                changed = Schedule.from_row(rows[0])
                self._schedule_event("schedule.paused" if paused else "schedule.resumed",
                                     changed, by)
                return changed
        raise InvalidArgument(f"schedule {name!r} kept changing: try again")

    async def remove_schedule(self, name: str, *, by: str | None = None) -> None:
        """Delete a run-time schedule, or a code schedule the code no longer has. Jobs
        it enqueued stay."""
        rows = await self._fetch("schedule_delete", {"name": name})
        if not rows:
            current = await self._schedule_named(name)
            raise InvalidArgument(
                f"schedule {current.name!r} is defined in code (@app.periodic): remove it "
                "there and deploy (its row goes "
                f"{CODE_SCHEDULE_GRACE.days} days after no worker's code has it); pause "
                "it meanwhile; nothing was removed"
            )
        schedule_logger.info("schedule %r removed by %s", name, by or "the API")
        self._schedule_event("schedule.removed", rows[0], by)

    async def run_schedule_now(
        self, name: str, *, by: str | None = None, defaults: Mapping[str, Any] | None = None
    ) -> int:
        """Enqueue the schedule's job now, besides its ticks (paused or not); returns
        its id. `defaults`: the task's job options where the schedule gives none."""
        current = await self._schedule_named(name)
        job = job_for_tick(current, None, defaults or {})
        async with self._transaction(None) as held:
            (job_id,) = await self.enqueue_many([job], conn=held)
            await self._fetch("schedule_note_job", {"name": name, "job_id": job_id}, held)
        schedule_logger.info("schedule %r run now by %s: job %s", name, by or "the API",
                             job_id)
        return job_id

    async def schedules(self) -> list[Schedule]:
        """Every schedule, by name, with its last job's status."""
        return [Schedule.from_row(row) for row in await self._fetch("schedule_list")]

    async def schedule(self, name: str) -> Schedule | None:
        rows = await self._fetch("schedule_get", {"name": name})
        return Schedule.from_row(rows[0]) if rows else None

    async def _schedule_named(self, name: str) -> Schedule:
        found = await self.schedule(name) if isinstance(name, str) else None
        if found is None:
            names = ", ".join(repr(s.name) for s in await self.schedules()) or "none"
            raise InvalidArgument(f"no schedule named {name!r} (schedules: {names})")
        return found

    async def _check_task_named(self, task: str) -> None:
        (row,) = await self._fetch("schedule_task_named", {"task": task})
        if not row["named"]:
            raise InvalidArgument(
                f"unknown task {task!r}: no schedule names it, and without the App "
                "(--app) its tasks are not known; pass new=True (--new) if the name is "
                "right; nothing was written"
            )

    # The maintenance leader's side (maintenance/services.py, Scheduler).

    async def schedules_due(
        self, now: dt.datetime, *, limit: int = 100, passed: Iterable[str] = ()
    ) -> list[Schedule]:
        """The active schedules due at now, but for those named in `passed`."""
        rows = await self._fetch("schedule_list_due",
                                 {"now": now, "limit": limit, "passed": list(passed)})
        return [Schedule.from_row(row) for row in rows]

    async def schedule_revisions(self, names: Sequence[str]) -> dict[str, int]:
        """The revision of each schedule named that exists."""
        rows = await self._fetch("schedule_revision_many", {"names": list(names)})
        return {row["name"]: row["revision"] for row in rows}

    async def fire_schedules(
        self, fires: Sequence[tuple[Schedule, Sequence[Mapping[str, Any]], dt.datetime,
                                    dt.datetime]],
    ) -> list[list[int] | None]:
        """Enqueue due schedules' jobs and record their progress (last_tick, next_tick)
        in one transaction: for each (schedule, jobs, last_tick, next_tick), the ids
        of its jobs, or None when the row is no longer as read (changed, paused, or
        advanced by another leader) and nothing of it was written."""
        if not fires:
            return []
        async with self._transaction(None) as held:
            locked = await self._fetch("schedule_lock_due_many", {
                "names": [s.name for s, _, _, _ in fires],
                "revisions": [s.revision for s, _, _, _ in fires],
                "last_ticks": [s.last_tick for s, _, _, _ in fires],
            }, held)
            positions = sorted(int(row["position"]) - 1 for row in locked)
            jobs = [job for position in positions for job in fires[position][1]]
            ids = await self.enqueue_many(jobs, conn=held) if jobs else []
            result: list[list[int] | None] = [None] * len(fires)
            start = 0
            for position in positions:
                count = len(fires[position][1])
                result[position] = ids[start:start + count]
                start += count
            await self._fetch("schedule_advance_many", {
                "names": [fires[p][0].name for p in positions],
                "last_ticks": [fires[p][2] for p in positions],
                "next_ticks": [fires[p][3] for p in positions],
                "last_job_ids": [ids_of[-1] if (ids_of := result[p]) else None
                                 for p in positions],
            }, held)
            return result

    async def sync_code_schedules(
        self, columns: Mapping[str, list[Any]], *, now: dt.datetime, by: str | None = None
    ) -> tuple[list[str], list[str]]:
        """Write an App's @app.periodic schedules (schedules.code_definitions) and mark
        the code schedules it lacks missing; returns the names a run-time schedule holds
        (not written) and those newly missing."""
        rows = await self._fetch("schedule_sync_code", {**columns, "now": now, "by": by})
        taken = [row["name"] for row in rows if row["taken"]]
        missing = await self._fetch("schedule_mark_missing",
                                    {"names": list(columns["names"]), "now": now})
        for row in missing:
            self._schedule_event("schedule.missing", row, by)
        return taken, [row["name"] for row in missing]

    async def delete_missing_schedules(self, *, before: dt.datetime) -> list[str]:
        """Delete the code schedules missing from code since before `before`."""
        rows = await self._fetch("schedule_delete_missing", {"before": before})
        for row in rows:
            self._schedule_event("schedule.removed", row,
                                 "the leader: missing from code past the grace")
        return [row["name"] for row in rows]

    def _schedule_event(
        self, name: str, schedule: Schedule | Mapping[str, Any], by: str | None,
        **detail: Any,
    ) -> None:
        """Hand a schedule's change to the subscribers (docs/reference/events.md)."""
        if self.events.active:
            self.events.emit(schedule_event(name, schedule, by, **detail))
