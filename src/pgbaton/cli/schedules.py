"""`pgbaton schedule`: add, list, change, pause, resume, run now and remove the
schedules stored in the database, without a deploy or a restart
(docs/explanation/schedules.md)."""

from __future__ import annotations

import contextlib
import datetime as dt
import getpass
import json
from collections.abc import Iterator
from typing import Any

import click

from .._cli_common import (
    WHOLE_NUMBER,
    _print_json,
    _queue,
    _table,
    connection_options,
    given_on_command_line,
    json_option,
    resolve_dsn,
)
from ..app import App, load_app
from ..cron import CATCH_UP_POLICIES, DEFAULT_CATCH_UP_LIMIT
from ..dsn import resolve_schema
from ..errors import InvalidArgument
from ..queue import Queue
from ..schedules import Schedule

app_option = click.option(
    "--app", "app_spec", default=None, metavar="MODULE:APP",
    help="Check TASK and --args against this App's handler (else the task must be one "
         "a schedule already names, or --new).")
new_option = click.option(
    "--new", is_flag=True,
    help="Allow a task that neither the App (--app) nor another schedule knows yet.")


def _by() -> str:
    """Who made a change, as the row and the log record it."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        return "cli"


def _args(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        args = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgument(f"--args is not JSON: {error}; nothing was written") from None
    if not isinstance(args, dict):
        raise InvalidArgument("--args must be a JSON object; nothing was written")
    return args


@contextlib.contextmanager
def _target(
    app_spec: str | None, dsn: str | None, schema: str, embedded: bool
) -> Iterator[tuple[Queue, App | None]]:
    """The Queue of the schedules, and the App when --app names one."""
    if app_spec is None:
        with _queue(dsn, schema, embedded) as queue:
            yield queue, None
        return
    app = load_app(app_spec)
    app.configure(
        dsn=resolve_dsn(dsn, fallback=app.dsn_in_code, embedded=embedded,
                        application_name="pgbaton schedule"),
        schema=schema if given_on_command_line("schema")
        else resolve_schema(None, app_schema=app.schema_in_code),
    )
    try:
        yield app.queue, app
    finally:
        app.queue.close()


def _as_json(schedule: Schedule, now: dt.datetime) -> dict[str, Any]:
    fires, problem = schedule.upcoming(now)
    return {
        "name": schedule.name, "cron": schedule.cron, "timezone": schedule.timezone,
        "task": schedule.task, "args": schedule.args, "queue": schedule.queue,
        "priority": schedule.priority, "max_attempts": schedule.max_attempts,
        "state": schedule.state, "origin": schedule.origin,
        "catch_up": schedule.catch_up, "catch_up_limit": schedule.catch_up_limit,
        "next_fires": [t.isoformat() for t in fires], "problem": problem,
        "last_tick": schedule.last_tick, "last_job_id": schedule.last_job_id,
        "last_job_status": schedule.last_job_status,
        "missing_since": schedule.missing_since, "updated_at": schedule.updated_at,
        "updated_by": schedule.updated_by, "revision": schedule.revision,
    }


def _fire(schedule: Schedule, now: dt.datetime) -> str:
    fires, problem = schedule.upcoming(now, 1)
    if problem is not None:
        return UNREADABLE
    return fires[0].isoformat(sep=" ", timespec="seconds") if fires else ""


# The mark of a row this machine cannot read, in the table's "next fire" column.
UNREADABLE = "! unreadable here (below)"


@click.group("schedule")
def schedule_group() -> None:
    """Schedules stored in the database: @app.periodic's and those added at run time."""


@schedule_group.command("list")
@click.option("--strict", is_flag=True,
              help="Exit 1 when a schedule cannot be read on this machine (a time zone "
                   "its tz data lacks); it is listed either way.")
@connection_options
@json_option
def list_schedules(strict: bool, dsn: str | None, schema: str, embedded: bool,
                   as_json: bool) -> None:
    """Every schedule: its cron in its zone, next fire time, state and last job. A row
    this machine cannot read is listed with a mark, and why, with the rest."""
    now = dt.datetime.now(dt.UTC)
    with _queue(dsn, schema, embedded) as queue:
        rows = queue.schedules()
    problems = [(s.name, problem) for s in rows
                if (problem := s.upcoming(now, 1)[1]) is not None]
    if as_json:
        _print_json([_as_json(s, now) for s in rows])
    else:
        _table_of(rows, now)
        for name, problem in problems:
            click.echo(f"schedule {name!r} {problem}", err=True)
    if problems and strict:
        raise SystemExit(1)


def _table_of(rows: list[Schedule], now: dt.datetime) -> None:
    _table("schedules", ["name", "cron", "zone", "task", "args", "state", "origin",
                         "next fire", "last job"], [
        [s.name, s.cron, s.timezone, s.task, json.dumps(s.args, sort_keys=True), s.state,
         s.origin, _fire(s, now),
         "" if s.last_job_id is None else f"{s.last_job_id} ({s.last_job_status or 'gone'})"]
        for s in rows
    ])


def _definition_options(command: Any) -> Any:
    for option in reversed([
        click.option("--timezone", default=None, metavar="ZONE",
                     help="IANA zone the cron's fields are read in [UTC]."),
        click.option("--queue", "queue_name", default=None, help="[the task's]"),
        click.option("--priority", type=WHOLE_NUMBER, default=None, help="[0]"),
        click.option("--max-attempts", type=WHOLE_NUMBER, default=None,
                     help="[the task's, else 5]"),
        click.option("--catch-up", type=click.Choice(CATCH_UP_POLICIES), default=None,
                     help="Ticks missed while no worker led: none, the newest, or all "
                          "up to --catch-up-limit [skip]."),
        click.option("--catch-up-limit", type=WHOLE_NUMBER, default=None,
                     help=f"[{DEFAULT_CATCH_UP_LIMIT}]"),
    ]):
        command = option(command)
    return command


def _given(**options: Any) -> dict[str, Any]:
    return {name: value for name, value in options.items() if value is not None}


@schedule_group.command("add")
@click.argument("name")
@click.option("--cron", required=True, metavar="EXPR",
              help="5 fields, or 6 with seconds last.")
@click.option("--task", required=True, help="The task each tick enqueues.")
@click.option("--args", "args_json", default=None, metavar="JSON",
              help="Keyword arguments as a JSON object [{}].")
@_definition_options
@click.option("--paused", is_flag=True, help="Add it paused.")
@new_option
@app_option
@connection_options
def add(name: str, cron: str, task: str, args_json: str | None, timezone: str | None,
        queue_name: str | None, priority: int | None, max_attempts: int | None,
        catch_up: str | None, catch_up_limit: int | None, paused: bool, new: bool,
        app_spec: str | None, dsn: str | None, schema: str, embedded: bool) -> None:
    """Add schedule NAME: TASK enqueued at each tick of --cron, from the next one on."""
    args = _args(args_json)
    options = _given(timezone=timezone, queue=queue_name, priority=priority,
                     max_attempts=max_attempts, catch_up=catch_up,
                     catch_up_limit=catch_up_limit)
    with _target(app_spec, dsn, schema, embedded) as (queue, app):
        if app is not None:
            added = app.schedules.add(name, cron, task, args, new=new, by=_by(),
                                      paused=paused, **options)
        else:
            added = queue.add_schedule(name, cron, task, args, new=new, by=_by(),
                                       paused=paused, **options)
    click.echo(f"added schedule {added.name!r}: {added.cron} ({added.timezone}), next "
               f"{_fire(added, dt.datetime.now(dt.UTC)) or 'when resumed'}")


@schedule_group.command("update")
@click.argument("name")
@click.option("--cron", default=None, metavar="EXPR")
@click.option("--task", default=None)
@click.option("--args", "args_json", default=None, metavar="JSON")
@_definition_options
@new_option
@app_option
@connection_options
def update(name: str, cron: str | None, task: str | None, args_json: str | None,
           timezone: str | None, queue_name: str | None, priority: int | None,
           max_attempts: int | None, catch_up: str | None, catch_up_limit: int | None,
           new: bool, app_spec: str | None, dsn: str | None, schema: str,
           embedded: bool) -> None:
    """Change schedule NAME (added at run time; a code schedule changes in code). It
    holds from the next tick, without restarting workers."""
    changes = _given(cron=cron, task=task, args=_args(args_json), timezone=timezone,
                     queue=queue_name, priority=priority, max_attempts=max_attempts,
                     catch_up=catch_up, catch_up_limit=catch_up_limit)
    with _target(app_spec, dsn, schema, embedded) as (queue, app):
        if app is not None:
            changed = app.schedules.update(name, new=new, by=_by(), **changes)
        else:
            changed = queue.update_schedule(name, new=new, by=_by(), **changes)
    click.echo(f"changed schedule {changed.name!r}: {', '.join(sorted(changes))}")


@schedule_group.command("pause")
@click.argument("name")
@connection_options
def pause(name: str, dsn: str | None, schema: str, embedded: bool) -> None:
    """Enqueue none of NAME's ticks until it is resumed."""
    with _queue(dsn, schema, embedded) as queue:
        queue.pause_schedule(name, by=_by())
    click.echo(f"paused schedule {name!r}")


@schedule_group.command("resume")
@click.argument("name")
@connection_options
def resume(name: str, dsn: str | None, schema: str, embedded: bool) -> None:
    """Enqueue NAME's ticks again from the next one (the paused ones are not caught up)."""
    with _queue(dsn, schema, embedded) as queue:
        queue.resume_schedule(name, by=_by())
    click.echo(f"resumed schedule {name!r}")


@schedule_group.command("remove")
@click.argument("name")
@connection_options
def remove(name: str, dsn: str | None, schema: str, embedded: bool) -> None:
    """Delete schedule NAME (added at run time, or gone from code). Its jobs stay."""
    with _queue(dsn, schema, embedded) as queue:
        queue.remove_schedule(name, by=_by())
    click.echo(f"removed schedule {name!r}")


@schedule_group.command("run-now")
@click.argument("name")
@app_option
@connection_options
def run_now(name: str, app_spec: str | None, dsn: str | None, schema: str,
            embedded: bool) -> None:
    """Enqueue NAME's job now, besides its ticks; prints the job's id."""
    with _target(app_spec, dsn, schema, embedded) as (queue, app):
        if app is not None:
            job_id = app.schedules.run_now(name, by=_by())
        else:
            job_id = queue.run_schedule_now(name, by=_by())
    click.echo(job_id)
