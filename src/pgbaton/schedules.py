"""Schedules stored in the database (docs/explanation/schedules.md): a schedule as read,
the checks of a definition before anything is written, and `app.schedules`, the App's
face over the Queue's schedule methods that also knows the App's tasks."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._checks import check_int4, check_name, check_text
from ._encoding import to_json
from .cron import DEFAULT_CATCH_UP_LIMIT, Cron, check_catch_up, cron_of
from .errors import InvalidArgument, ScheduleChanged
from .events import Event

if TYPE_CHECKING:
    from .app import App, Periodic, Task
    from .queue import Queue

logger = logging.getLogger("pgbaton.schedules")

# How long a code schedule that no starting worker's code has any more is kept (and
# enqueues nothing) before the leader deletes it: room for a rollback.
CODE_SCHEDULE_GRACE = dt.timedelta(days=7)
# What update() may change; the rest (origin, progress, pause) has its own methods.
CHANGEABLE = ("cron", "timezone", "task", "args", "queue", "priority", "max_attempts",
              "catch_up", "catch_up_limit")
MAX_NAME_LENGTH = 200
ADD_OPTIONS = ("timezone", "queue", "priority", "max_attempts", "catch_up",
               "catch_up_limit", "paused", "now")


@dataclass(frozen=True)
class Schedule:
    """One row of the schedules table."""

    name: str
    cron: str
    timezone: str
    task: str
    args: dict[str, Any]
    queue: str | None
    priority: int | None
    max_attempts: int | None
    paused: bool
    catch_up: str
    catch_up_limit: int
    origin: str
    last_tick: dt.datetime | None
    last_job_id: int | None
    next_tick: dt.datetime
    missing_since: dt.datetime | None
    created_at: dt.datetime
    updated_at: dt.datetime
    updated_by: str | None
    revision: int
    last_job_status: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Schedule:
        fields = cls.__dataclass_fields__
        return cls(**{name: row[name] for name in fields if name in row})

    @property
    def state(self) -> str:
        """active, paused, or missing from code (enqueues nothing, deleted after the
        grace)."""
        if self.missing_since is not None:
            return "missing from code"
        return "paused" if self.paused else "active"

    def next_fires(self, now: dt.datetime, count: int = 5) -> list[dt.datetime]:
        """The next `count` fire times after now, in the schedule's zone."""
        cron = cron_of(self.cron, self.timezone)
        fires: list[dt.datetime] = []
        tick = now
        for _ in range(count):
            tick = cron.next_after(tick)
            fires.append(cron.in_zone(tick))
        return fires

    def upcoming(self, now: dt.datetime, count: int = 5) -> tuple[list[dt.datetime],
                                                                   str | None]:
        """The next fire times as the list and the dashboard show them (none unless
        active), or, for a row this machine cannot read (a time zone its tz data lacks,
        written elsewhere), none and what is wrong with it."""
        try:
            cron_of(self.cron, self.timezone)
        except InvalidArgument as error:
            return [], unreadable(self, error)
        return (self.next_fires(now, count) if self.state == "active" else []), None

    def idempotency_key(self, tick: dt.datetime) -> str:
        return tick_key(self.name, tick)


def unreadable(schedule: Schedule, error: InvalidArgument) -> str:
    """What to say of a schedule whose definition this machine cannot use (written by a
    host with newer tz data, or by hand)."""
    zone = "time zone" in str(error)
    fix = ("change it in the code and deploy" if schedule.origin == "code" else
           f"pgbaton schedule update {schedule.name} "
           + ("--timezone ZONE" if zone else "--cron EXPR"))
    if zone:
        fix += ", or install the zone's tz data here (pip install tzdata)"
    return (f"cannot be read on this machine: {error}; its fire times cannot be "
            f"computed here, and a leader on such a host skips it. Fix: {fix}")


def tick_key(name: str, tick: dt.datetime) -> str:
    """A tick's job key: the one today's in-memory schedules gave their jobs, for a code
    schedule's default name (TASK:ID), so a rolling deploy enqueues a tick once."""
    return f"pgbaton:periodic:{name}:{tick.astimezone(dt.UTC).isoformat()}"


def check_schedule_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LENGTH:
        raise InvalidArgument(
            f"a schedule's name must be a non-empty string of at most {MAX_NAME_LENGTH} "
            f"characters, got {name!r}"
        )
    return check_text("schedule name", name)  # no NUL, valid UTF-8


def definition(
    *,
    cron: str,
    task: str,
    args: Mapping[str, Any] | None = None,
    timezone: str = "UTC",
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    catch_up: str = "skip",
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
    now: dt.datetime,
) -> dict[str, Any]:
    """The statement parameters of a definition, each checked (one error naming what is
    wrong, before anything is written), with its next tick after now."""
    if not isinstance(timezone, str):
        raise InvalidArgument(f"timezone must be an IANA zone name, got {timezone!r}")
    schedule_cron = Cron(cron, timezone)
    schedule_cron.check_fires(now)
    check_name("task", task)
    if not isinstance(args, Mapping | None):
        raise InvalidArgument(f"a schedule's args must be a JSON object, got "
                              f"{type(args).__name__}")
    if queue is not None:
        check_name("queue", queue)
    if priority is not None:
        check_int4("priority", priority)
    if max_attempts is not None:
        check_int4("max_attempts", max_attempts, minimum=1)
    catch_up, catch_up_limit = check_catch_up(catch_up, catch_up_limit)
    return {
        "cron": cron, "timezone": timezone, "task": task,
        "args": to_json(dict(args or {}), "args"), "queue": queue, "priority": priority,
        "max_attempts": max_attempts, "catch_up": catch_up,
        "catch_up_limit": catch_up_limit, "next_tick": schedule_cron.next_after(now),
    }


def stored(schedule: Schedule) -> dict[str, Any]:
    """A schedule's definition as definition() takes it."""
    return {name: getattr(schedule, name) for name in CHANGEABLE}


def check_changes(changes: Mapping[str, Any]) -> None:
    unknown = sorted(set(changes) - set(CHANGEABLE))
    if unknown:
        raise InvalidArgument(
            f"a schedule has no {', '.join(map(repr, unknown))} to change; update() "
            f"changes {', '.join(CHANGEABLE)}"
        )
    if not changes:
        raise InvalidArgument(f"update() names nothing to change: give one of "
                              f"{', '.join(CHANGEABLE)}")


def check_revision(current: Schedule, revision: object) -> None:
    """Refuse a change made against a revision the row no longer has: two operators
    editing one schedule at once must not overwrite each other silently."""
    if isinstance(revision, bool) or not isinstance(revision, int):
        raise InvalidArgument(f"revision must be a whole number (Schedule.revision), got "
                              f"{revision!r}")
    if revision != current.revision:
        by = f" by {current.updated_by}" if current.updated_by else ""
        raise ScheduleChanged(
            f"schedule {current.name!r} was changed since you opened it (revision "
            f"{revision}, now {current.revision}: changed{by} at "
            f"{current.updated_at.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC): read it "
            "again and redo your change; nothing was written"
        )


def schedule_event(
    name: str, schedule: Schedule | Mapping[str, Any], by: str | None, **detail: Any
) -> Event:
    """An event of docs/reference/events.md about one schedule (a Schedule, or a row
    with its name, task and queue)."""
    row = schedule if isinstance(schedule, Mapping) else {
        "name": schedule.name, "task": schedule.task, "queue": schedule.queue}
    return Event(name, task=row["task"], queue=row["queue"],
                 detail={"schedule": row["name"], "by": by, **detail})


def code_definitions(
    periodics: list[Periodic], now: dt.datetime, window: float
) -> dict[str, list[Any]]:
    """The arrays of schedule_sync_code for an App's @app.periodic schedules: a new one
    starts from the handover window before now, a changed one from now."""
    columns: dict[str, list[Any]] = {name: [] for name in (
        "names", "crons", "timezones", "tasks", "args", "queues", "priorities",
        "max_attempts", "catch_ups", "catch_up_limits", "first_ticks", "next_ticks")}
    for periodic in periodics:
        cron = Cron(periodic.cron, periodic.timezone)
        columns["names"].append(periodic.name)
        columns["crons"].append(periodic.cron)
        columns["timezones"].append(periodic.timezone)
        columns["tasks"].append(periodic.task.name)
        columns["args"].append(to_json(dict(periodic.args or {}), "args"))
        # The task's queue and attempts as the code has them, so that a run now or a
        # leader without this App (the CLI, the dashboard) uses them too.
        columns["queues"].append(periodic.task.queue)
        columns["priorities"].append(None)
        columns["max_attempts"].append(periodic.task.max_attempts)
        columns["catch_ups"].append(periodic.catch_up)
        columns["catch_up_limits"].append(periodic.catch_up_limit)
        columns["first_ticks"].append(cron.next_after(now - dt.timedelta(seconds=window)))
        columns["next_ticks"].append(cron.next_after(now))
    return columns


def check_task(app: App, task: str, args: Mapping[str, Any] | None, new: bool) -> None:
    """Refuse a task the App does not register (unless new) and args its handler cannot
    take, before anything is written."""
    known = app.tasks.get(task) if isinstance(task, str) else None
    if known is None:
        if new:
            return
        names = ", ".join(map(repr, sorted(app.tasks))) or "none"
        raise InvalidArgument(
            f"unknown task {task!r}: the App registers {names}; pass new=True (--new) "
            "for a task whose worker is deployed later; nothing was written"
        )
    known.check_args(args)
    refuse_sealed_schedule_args(known, args)
    run_now_job(known, args)


def refuse_sealed_schedule_args(task: Task, args: Mapping[str, Any] | None) -> None:
    """A task that encrypts its args may be scheduled without args only: a schedule's
    args live in the schedules table, its list and its log lines, in the clear."""
    if task.encrypt and args:
        raise InvalidArgument(
            f"task {task.name!r} encrypts its args, and a schedule's args are stored in "
            "the clear in the schedules table: schedule it without args (the handler can "
            "read what it needs); nothing was written"
        )


def run_now_job(task: Task | None, args: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a job of this schedule takes from its task when the App has it: the task's
    options, and its args as the task stores them (typed, sealed); InvalidArgument when
    the task cannot make a job of these args."""
    if task is None:
        return {}
    try:
        return {**task.job_options(args, {}), "args": task.stored_args(args or {})}
    except Exception as error:
        raise InvalidArgument(f"schedule of task {task.name!r} cannot make a job: "
                              f"{type(error).__name__}: {error}") from None


class Schedules:
    """`app.schedules`: add, change, pause, resume, run now, remove and list the
    schedules of the App's database. Beyond the Queue's methods of the same names, it
    refuses a task the App does not register (unless new=True) and args its handler
    cannot take, before anything is written."""

    def __init__(self, app: App) -> None:
        self._app = app

    @property
    def _queue(self) -> Queue:
        return self._app.queue

    def add(
        self, name: str, cron: str, task: str, args: Mapping[str, Any] | None = None, *,
        new: bool = False, by: str | None = None, **options: Any,
    ) -> Schedule:
        """Queue.add_schedule, after checking the task and args against the App."""
        unknown = sorted(set(options) - set(ADD_OPTIONS))
        if unknown:
            raise InvalidArgument(f"add() takes no {', '.join(map(repr, unknown))}; its "
                                  f"options are {', '.join(ADD_OPTIONS)}")
        check_task(self._app, task, args, new)
        return self._queue.add_schedule(name, cron, task, args, new=True, by=by, **options)

    def update(self, name: str, *, new: bool = False, by: str | None = None,
               revision: int | None = None, **changes: Any) -> Schedule:
        """Queue.update_schedule, after checking the task and args against the App."""
        check_changes(changes)
        current = self._queue.schedule(name)
        if current is not None and ("task" in changes or "args" in changes):
            check_task(self._app, changes.get("task", current.task),
                             changes.get("args", current.args), new)
        return self._queue.update_schedule(name, by=by, new=True, revision=revision,
                                           **changes)

    def pause(self, name: str, *, by: str | None = None) -> Schedule:
        return self._queue.pause_schedule(name, by=by)

    def resume(self, name: str, *, by: str | None = None) -> Schedule:
        return self._queue.resume_schedule(name, by=by)

    def remove(self, name: str, *, by: str | None = None) -> None:
        self._queue.remove_schedule(name, by=by)

    def run_now(self, name: str, *, by: str | None = None) -> int:
        """Enqueue the schedule's job now, outside its ticks; returns the job's id."""
        schedule = self._queue.schedule(name)
        task = None if schedule is None else self._app.tasks.get(schedule.task)
        defaults = run_now_job(task, None if schedule is None else schedule.args)
        return self._queue.run_schedule_now(name, by=by, defaults=defaults)

    def list(self) -> list[Schedule]:
        return self._queue.schedules()

    def get(self, name: str) -> Schedule | None:
        return self._queue.schedule(name)


def job_for_tick(
    schedule: Schedule, tick: dt.datetime | None, defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """The enqueue_many job of a tick (None: run now, no key): the row's options where
    set, else `defaults` (its task's in the leader's App, when it has the task)."""
    job: dict[str, Any] = {"task": schedule.task, "args": schedule.args, **defaults}
    for option in ("queue", "priority", "max_attempts"):
        value = getattr(schedule, option)
        if value is not None:
            job[option] = value
    if tick is not None:
        job["run_at"] = tick
        job["idempotency_key"] = schedule.idempotency_key(tick)
    return job


def describe(schedule: Schedule) -> str:
    args = json.dumps(schedule.args, sort_keys=True)
    return (f"{schedule.name!r} ({schedule.cron} {schedule.timezone}, task "
            f"{schedule.task!r}, args {args})")
