"""The `pgbaton` command group and its commands.

Over 400 lines on purpose: one short function per command of the one click group, read
top to bottom like the command table of docs/reference/commands.md. The bulk forms of
retry and cancel are bulk.py's, `pgbaton queue` is queues.py's; commands with a package
of their own (doctor, dashboard, demo, lab) live there and are only registered here."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import importlib.metadata
import json
import logging
import os
import sys
from typing import Any

import click

from .. import _sql, logs, tracebacks
from .. import app as app_module
from .._cli_common import (
    BEFORE_COMMAND,
    DSN_HELP,
    NUMBER,
    SCHEMA_HELP,
    WHOLE_NUMBER,
    AutoOrWholeNumber,
    NumberRange,
    WholeNumberRange,
    _print_json,
    _queue,
    _table,
    connection_options,
    dsn_option,
    format_duration,
    given_on_command_line,
    json_option,
    printable,
    resolve_dsn,
    schema_option,
)
from .._transient import when_reachable
from ..actions import refused
from ..app import App
from ..doctor import doctor
from ..dsn import normalize_dsn, redact_dsn, resolve_schema, with_application_name
from ..errors import ConfigurationError, ConnectionFailed, InvalidArgument, PgbatonError
from ..job_filter import filter_of
from ..limits import INT4_MAX
from ..maintenance.services import DEFAULT_RETENTION_MODE, RETENTION_MODES
from ..models import STATES, Enqueued, Job, JobLog, Step
from ..queue import Queue
from ..queue_async import AsyncQueue
from ..showcase.lab import lab
from ..unique import CONFLICTS, DEFAULT_STATES, Unique
from ..web import command as web_command
from .args import rotate_keys, tasks
from .bulk import add_bulk_form
from .queues import queue_group
from .schedules import schedule_group

logger = logging.getLogger("pgbaton.cli")


def _fail(message: str, code: int) -> None:
    click.echo(f"pgbaton: error: {' '.join(printable(message).split())}", err=True)
    sys.exit(code)


class _Command(click.Group):
    """Every error is one line and an exit status: 2 for usage, 1 for everything else;
    `pgbaton --debug ...` shows the traceback of pgbaton's own errors instead."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            status = super().main(*args, **kwargs)
        except click.UsageError as error:
            where = error.ctx.command_path.replace("python -m pgbaton", "pgbaton") if (
                error.ctx
            ) else "pgbaton"
            _fail(f"{error.format_message()} (see: {where} --help)", error.exit_code)
        except click.ClickException as error:
            _fail(error.format_message(), error.exit_code)
        except click.Abort:
            _fail("interrupted", 130)
        sys.exit(status if isinstance(status, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (PgbatonError, ValueError, RecursionError) as error:  # JSON nested too deep
            if ctx.obj and ctx.obj.get("debug"):
                raise
            _fail(str(error), 1)


@click.group(cls=_Command)
@click.version_option(
    importlib.metadata.version("pgbaton"), prog_name="pgbaton", message="%(prog)s %(version)s"
)
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.option("--dsn", metavar="DSN", default=None,
              help=f"{DSN_HELP[:-1]}, for the command that follows.")
@click.option("--schema", metavar="NAME", default=None,
              help=f"{SCHEMA_HELP[:-1]}, for the command that follows.")
@click.option("--embedded", is_flag=True,
              help="Use pgbaton's own PostgreSQL 18, for the command that follows.")
@click.pass_context
def main(ctx: click.Context, debug: bool, dsn: str | None, schema: str | None,
         embedded: bool) -> None:
    """pgbaton: a background-job queue that lives in PostgreSQL.

    --dsn, --schema and --embedded go before the command or after it
    (`pgbaton --dsn URL jobs` is `pgbaton jobs --dsn URL`); given in both places, the
    one after the command wins.
    """
    before = {name: value for name, value in
              (("dsn", dsn), ("schema", schema), ("embedded", embedded)) if value}
    ctx.obj = {"debug": debug, BEFORE_COMMAND: before}
    command = main.get_command(ctx, ctx.invoked_subcommand or "")
    if command is not None and not isinstance(command, click.Group):
        takes = {parameter.name for parameter in command.params}
        for name in before:
            if name not in takes:
                raise click.UsageError(
                    f"{ctx.invoked_subcommand} takes no --{name}", ctx=ctx
                )
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@main.command()
@connection_options
@click.option("--app", "app_spec", default=None, metavar="MODULE:APP",
              help="Migrate every database of this App: its own (--dsn replaces it) and "
                   "each one a queue is routed to.")
def migrate(dsn: str | None, schema: str, embedded: bool, app_spec: str | None) -> None:
    """Bring the schema up to date (safe to run from several processes at once)."""
    if app_spec is None:
        with _queue(dsn, schema, embedded) as queue:
            _report_migrated(queue.schema, queue.migrate(), None)
        return
    app = load_app(app_spec)
    own = resolve_dsn(dsn, fallback=app.dsn_in_code, embedded=embedded,
                      application_name="pgbaton migrate")
    schema = _app_schema(app, schema)
    for each in [own, *app.routed_dsns()]:
        with Queue(with_application_name(each, "pgbaton migrate"), schema=schema) as queue:
            _report_migrated(schema, queue.migrate(), each)


def _report_migrated(schema: str, applied: list[int], dsn: str | None) -> None:
    target = _sql.schema_version()
    where = f" in {redact_dsn(dsn)}" if dsn is not None else ""
    if applied:
        click.echo(f"schema {schema!r}{where}: applied {applied}, now at version {target}")
    else:
        click.echo(f"schema {schema!r}{where}: already at version {target}")


@main.command("schema")
@click.option("--sql", "as_sql", is_flag=True, required=True, help="Print the DDL.")
@click.option(
    "--from", "from_version", type=WholeNumberRange(min=0), default=None, metavar="N",
    help="Print only the upgrade from schema version N (the highest version in the "
         "schema's schema_version table).",
)
@schema_option
def schema_command(as_sql: bool, from_version: int | None, schema: str) -> None:
    """Print the schema as SQL, for teams that run their own migrations: the whole of it,
    or with --from N only the upgrade from version N. No database is needed."""
    if from_version is None:
        click.echo(_sql.schema_sql(schema), nl=False)
    else:
        click.echo(_sql.upgrade_sql(schema, from_version), nl=False)


def load_app(spec: str) -> App:
    """MODULE:ATTRIBUTE to the App it names; a usage error says what was wrong."""
    try:
        return app_module.load_app(spec)
    except ConfigurationError as error:
        raise click.BadParameter(str(error)) from None


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@connection_options
@click.option("--queues", default=None, help="Comma-separated queues to work [all].")
@click.option("--concurrency", type=WHOLE_NUMBER, default=10, show_default=True,
              help="Jobs at once per process.")
@click.option("--processes", type=WHOLE_NUMBER, default=1, show_default=True,
              help="Worker processes.")
@click.option("--claim-ahead", type=AutoOrWholeNumber(), default=0, show_default=True,
              help="Jobs to claim beyond the free slots, waiting in the worker for one. "
                   "0: none; N: always N; auto: while a backlog waits, about what the "
                   "worker runs in 50 ms (none without a backlog, or for limited or "
                   "rate-limited queues).")
@click.option("--lease", type=NUMBER, default=30.0, show_default=True, help="Lease in seconds.")
@click.option("--poll-interval", type=NUMBER, default=2.0, show_default=True,
              help="Seconds between polls.")
@click.option("--shutdown-grace", type=NUMBER, default=30.0, show_default=True,
              help="Seconds running jobs get to finish on SIGTERM.")
@click.option("--no-maintenance", is_flag=True, help="Never act as the maintenance leader.")
@click.option("--listen-dsn", default=None, envvar="PGBATON_LISTEN_DSN",
              help="A direct connection to PostgreSQL for LISTEN and the leader's lock, "
                   "when --dsn goes through PgBouncer in transaction mode "
                   "[or PGBATON_LISTEN_DSN].")
@click.option("--connect-timeout", type=NumberRange(min=0), default=60.0,
              show_default=True,
              help="Seconds to keep retrying, with backoff, while the database cannot be "
                   "reached at start-up, by each worker process, restarted ones too "
                   "(0: give up at once).")
@click.option("--log-level", type=click.Choice(logs.LEVELS, case_sensitive=False),
              default="INFO", show_default=True, envvar="PGBATON_LOG_LEVEL",
              help="Least severe log records shown [or PGBATON_LOG_LEVEL].")
@click.option("--metrics-port", type=WholeNumberRange(1, 65535), default=None,
              help="Serve this worker's Prometheus metrics on 127.0.0.1:PORT (with "
                   "--processes, process N on PORT+N; needs pgbaton[web]).")
@click.option("--stats-file", type=click.Path(dir_okay=False), default=None,
              help="Write the worker's final statistics there as JSON when it stops "
                   "(with --processes, one file per process: FILE.0, FILE.1, ...).")
@click.option("--log-format", type=click.Choice(logs.FORMATS), default="text",
              show_default=True, envvar="PGBATON_LOG_FORMAT",
              help="text for people, json (one object a line) for log collectors "
                   "[or PGBATON_LOG_FORMAT].")
@click.option("--retention-mode", type=click.Choice(RETENTION_MODES),
              default=DEFAULT_RETENTION_MODE, show_default=True,
              help="How the leader's pruner takes finished jobs out of the jobs table: "
                   "delete them, or move done ones to jobs_history first "
                   "(docs/retention.md).")
@click.option("--vacuum-dead-tuples", type=WholeNumberRange(0, INT4_MAX), default=50_000,
              show_default=True,
              help="The leader VACUUMs the jobs table once it counts this many dead row "
                   "versions (and 5% of the live ones), so that claims do not read over "
                   "them (docs/scaling.md).")
@click.option("--no-vacuum", is_flag=True,
              help="Leave the jobs table to autovacuum: the leader never VACUUMs it.")
@click.option("--no-job-logs", is_flag=True,
              help="Keep nothing handlers log with their jobs (`pgbaton show ID --logs`); "
                   "the worker's own log is the same either way.")
@click.option("--job-log-level", type=click.Choice(logs.LEVELS, case_sensitive=False),
              default="INFO", show_default=True,
              help="Least severe records kept with each job's attempt.")
def worker(
    app_spec: str, dsn: str | None, schema: str, embedded: bool,
    queues: str | None, concurrency: int, processes: int, claim_ahead: int | str,
    lease: float, poll_interval: float, shutdown_grace: float, no_maintenance: bool,
    listen_dsn: str | None, connect_timeout: float, log_level: str, log_format: str,
    stats_file: str | None, metrics_port: int | None, retention_mode: str,
    vacuum_dead_tuples: int, no_vacuum: bool, no_job_logs: bool, job_log_level: str,
) -> None:
    """Run a worker for the tasks of MODULE:APP until SIGTERM or SIGINT.

    The database is --dsn, else the one the App routes every one of --queues to, else
    the App's own, else PGBATON_DSN, else DATABASE_URL; with none of them the worker
    refuses to start (--embedded runs pgbaton's own server). Without --queues it works
    every queue of that database; queues routed to two databases are refused. The
    schema is --schema, else the App's, else PGBATON_SCHEMA, else pgbaton.
    """
    from ..worker import WorkerConfig, run_worker
    from ..worker.config import default_worker_id
    from ..worker.sessions import plan_sessions

    logs.configure(log_level, log_format)
    # Worker processes started by --processes inherit the logging settings this way.
    os.environ["PGBATON_LOG_LEVEL"], os.environ["PGBATON_LOG_FORMAT"] = log_level, log_format
    app = load_app(app_spec)
    queue_names = [q for q in queues.split(",") if q] if queues else None
    route = app.database_of(queue_names)  # one database per worker: refuses a mix
    worker_id = default_worker_id() if processes == 1 else None
    name = f"pgbaton worker {worker_id or 'supervisor'}"
    if route is not None and not (given_on_command_line("dsn") or embedded):
        # The queues' database; each worker finds the route itself (config.dsn None).
        dsn, config_dsn = with_application_name(route, name), None
    else:
        dsn = config_dsn = resolve_dsn(dsn, fallback=app.dsn_in_code, embedded=embedded,
                                       application_name=name)
    # A routed worker leaves the App its own database, where its handlers enqueue.
    app.configure(dsn=dsn if route is None else None, schema=_app_schema(app, schema))
    wait_for_database(dsn, app.schema, connect_timeout)
    config = WorkerConfig(
        queues=queue_names,
        concurrency=concurrency, processes=processes, claim_ahead=claim_ahead, lease=lease,
        poll_interval=poll_interval, shutdown_grace=shutdown_grace,
        maintenance=not no_maintenance, dsn=config_dsn, worker_id=worker_id,
        stats_path=stats_file,
        metrics_port=metrics_port,
        listen_dsn=normalize_dsn(listen_dsn, "--listen-dsn") if listen_dsn else None,
        connect_timeout=connect_timeout,
        retention_mode=retention_mode,
        vacuum_dead_tuples=None if no_vacuum else vacuum_dead_tuples,
        job_logs=not no_job_logs, job_log_level=job_log_level,
    )
    if processes > 1:  # a refusal is one line here, not one per worker process
        plan_sessions(config, dsn)
    sys.exit(run_worker(app, config, app_spec=app_spec))


def _app_schema(app: App, schema: str) -> str:
    """--schema if typed, else the App's own, else what the environment said."""
    if given_on_command_line("schema"):
        return schema
    return resolve_schema(None, app_schema=app.schema_in_code)


def wait_for_database(dsn: str, schema: str, timeout: float) -> None:
    """Return once the server answers and the schema is current; while the server cannot
    be reached (or goes away during these first statements), retry with jittered backoff
    for up to `timeout` seconds (a deploy that starts workers beside a database still
    starting up). Other errors are not retried."""

    async def attempt() -> None:
        async with AsyncQueue(dsn, schema=schema) as queue:
            await queue.open()

    def gave_up(error: Exception) -> Exception:
        return ConnectionFailed(f"{error} (gave up after --connect-timeout {timeout:g} s)")

    asyncio.run(when_reachable(attempt, timeout, logger, gave_up=gave_up))


@main.command()
@click.argument("task")
@click.option("--args", "args_json", default="{}", help="Keyword arguments as a JSON object.")
@click.option("--app", "app_spec", default=None, metavar="MODULE:APP",
              help="Check TASK and --args against this App's handler and apply the task's "
                   "own settings (queue, max attempts, key).")
@click.option("--queue", "queue_name", default=None, help="[the task's, else default]")
@click.option("--priority", type=WHOLE_NUMBER, default=0, show_default=True)
@click.option("--delay", type=NUMBER, default=None, help="Seconds before it may run.")
@click.option("--key", default=None, help="Serialisation key: one running job per key.")
@click.option("--idempotency-key", default=None, help="A second enqueue with it is a no-op.")
@click.option("--max-attempts", type=WHOLE_NUMBER, default=None, help="[the task's, else 5]")
@click.option("--unique", "unique_on", is_flag=True,
              help="A unique job (docs/howto/unique.md): no second one while one blocks.")
@click.option("--unique-args", default=None, metavar="NAMES",
              help="Comma-separated args that make it the same [all of them].")
@click.option("--unique-period", type=NUMBER, default=None, metavar="SECONDS",
              help="The same only within one window of this length, cut from the epoch.")
@click.option("--unique-states", default=None, metavar="STATES",
              help=f"Comma-separated blocking states [{','.join(DEFAULT_STATES)}].")
@click.option("--on-conflict", type=click.Choice(CONFLICTS), default=None,
              help="What meeting a blocking job does [keep].")
@click.option("--debounce-delay", type=NUMBER, default=None, metavar="SECONDS",
              help="With --on-conflict debounce: run this long after the last call.")
@connection_options
@json_option
def enqueue(
    task: str, args_json: str, app_spec: str | None, queue_name: str | None, priority: int,
    delay: float | None, key: str | None, idempotency_key: str | None,
    max_attempts: int | None, unique_on: bool, unique_args: str | None,
    unique_period: float | None, unique_states: str | None, on_conflict: str | None,
    debounce_delay: float | None, dsn: str | None, schema: str, embedded: bool,
    as_json: bool,
) -> None:
    """Enqueue one job of TASK. With --app the task must exist there and its args must
    fit its handler; without it, nothing can be checked. With --unique (or a task's
    unique=), a job of the same unique key that blocks it is kept, replaced or pushed
    back instead, and the output says which job and what was done."""
    try:
        args = json.loads(args_json)
    except json.JSONDecodeError as error:
        raise click.BadParameter(f"not JSON: {error}", param_hint="--args") from None
    if not isinstance(args, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--args")
    given: dict[str, Any] = {
        "queue": queue_name, "priority": priority, "delay": delay, "key": key,
        "idempotency_key": idempotency_key, "max_attempts": max_attempts,
    }
    options = {name: value for name, value in given.items() if value is not None}
    unique = _unique_option(unique_on, unique_args, unique_period, unique_states,
                            on_conflict, debounce_delay)
    if unique is not None:
        options["unique"] = unique
    outcome: Enqueued | None = None
    if app_spec is None:
        click.echo(
            "pgbaton: note: without --app MODULE:APP the task name and its args are not "
            "checked against a handler", err=True,
        )
        with _queue(dsn, schema, embedded) as queue:
            if unique is not None:
                outcome = queue.enqueue_once(task, args, **options)
            else:
                job_id = queue.enqueue(task, args, **options)
    else:
        app = load_app(app_spec)
        found = app.tasks.get(task)
        if found is None:
            raise click.BadParameter(
                f"{app_spec} has no task {task!r} (it has: "
                f"{', '.join(sorted(app.tasks)) or 'none'})", param_hint="TASK",
            )
        app.configure(
            dsn=resolve_dsn(dsn, fallback=app.dsn_in_code, embedded=embedded,
                            application_name="pgbaton enqueue"),
            schema=_app_schema(app, schema),
        )
        try:
            if unique is not None or found.unique is not None:
                outcome = found.enqueue_once(args, **options)
            else:
                job_id = found.enqueue(args, **options)
        finally:
            app.queue_for(options.get("queue", found.queue)).close()
    if outcome is not None:
        job_id = outcome.id
        if not outcome.created:
            click.echo(f"pgbaton: job {outcome.id} of the same unique key was "
                       f"{outcome.outcome} ({outcome.status}); no job was added", err=True)
    if as_json:
        _print_json({"id": job_id} if outcome is None else dataclasses.asdict(outcome))
    else:
        click.echo(job_id)


def _unique_option(
    unique_on: bool, args: str | None, period: float | None, states: str | None,
    conflict: str | None, delay: float | None,
) -> Unique | None:
    """enqueue's --unique options as a Unique; None when none was given."""
    if not (unique_on or any(v is not None for v in (args, period, states, conflict, delay))):
        return None
    if delay is not None and conflict is None:
        conflict = "debounce"

    def names(text: str) -> list[str]:
        return [name.strip() for name in text.split(",") if name.strip()]

    return Unique(
        None if args is None else names(args), period=period,
        states=DEFAULT_STATES if states is None else names(states),
        conflict=conflict or "keep",  # type: ignore[arg-type]
        delay=delay,
    )


@main.command()
@connection_options
@json_option
def stats(dsn: str | None, schema: str, embedded: bool, as_json: bool) -> None:
    """Per queue: whether it is paused, jobs by state (pending: due; scheduled: not yet),
    oldest pending age, expired leases."""
    with _queue(dsn, schema, embedded) as queue:
        rows = queue.stats()
    if as_json:
        _print_json([dataclasses.asdict(s) for s in rows])
        return
    _table(
        f"pgbaton queues in schema {queue.schema!r}",
        ["queue", "paused", "pending", "scheduled", "running", "waiting", "done", "failed",
         "cancelled", "expired leases", "oldest pending"],
        [
            [s.queue, "paused" if s.paused else "no", s.pending, s.scheduled, s.running,
             s.waiting, s.done, s.failed, s.cancelled, s.expired_leases,
             format_duration(s.oldest_pending_seconds)]
            for s in rows
        ],
    )


@main.command()
@click.option("--status", default=None,
              help=f"One of {', '.join(STATES)} (scheduled: pending, not yet due).")
@click.option("--queue", "queue_name", default=None)
@click.option("--task", default=None)
@click.option("--key", default=None, help="Jobs of this key.")
@click.option("--text", default=None, help="Jobs whose args or errors contain this.")
@click.option("--since", default=None, help="Finished (or created) at or after: 10:00, ISO.")
@click.option("--until", default=None, help="Finished (or created) before.")
@click.option("--limit", type=WHOLE_NUMBER, default=50, show_default=True)
@connection_options
@json_option
def jobs(
    status: str | None, queue_name: str | None, task: str | None, key: str | None,
    text: str | None, since: str | None, until: str | None, limit: int,
    dsn: str | None, schema: str, embedded: bool, as_json: bool,
) -> None:
    """List jobs, newest first, filtered as the dashboard's list and the bulk forms of
    retry and cancel filter."""
    try:
        job_filter = filter_of({"status": status, "queue": queue_name, "task": task,
                                "key": key, "text": text, "since": since, "until": until})
    except InvalidArgument as error:
        raise click.BadParameter(str(error)) from None
    with _queue(dsn, schema, embedded) as queue:
        found = queue.jobs(**dataclasses.asdict(job_filter), limit=limit)
    if as_json:
        _print_json([_job_fields(job) for job in found])
        return
    if status == "running":  # how far each is, as its handler last said
        _table(
            "jobs", ["id", "queue", "task", "attempts", "key", "started_at", "progress"],
            [
                [j.id, j.queue, j.task, f"{j.attempts}/{j.max_attempts}", j.key,
                 j.started_at.isoformat(timespec="seconds") if j.started_at else "",
                 progress_text(j)]
                for j in found
            ],
        )
        return
    _table(
        "jobs", ["id", "queue", "task", "state", "attempts", "key", "run_at", "last error"],
        [
            [j.id, j.queue, j.task, j.state, f"{j.attempts}/{j.max_attempts}", j.key,
             j.run_at.isoformat(timespec="seconds"),
             j.errors[-1].get("message", "") if j.errors else ""]
            for j in found
        ],
    )


@main.command()
@click.argument("job_id", type=WHOLE_NUMBER)
@connection_options
@json_option
@click.option("--logs", "with_logs", is_flag=True,
              help="Also print what its handler logged, run by run.")
def show(job_id: int, dsn: str | None, schema: str, embedded: bool, as_json: bool,
         with_logs: bool) -> None:
    """Show one job, with every attempt's error (and with --logs its log lines)."""
    with _queue(dsn, schema, embedded) as queue:
        job = queue.get(job_id)
        kept = queue.logs(job_id) if with_logs and job is not None else []
        steps = queue.steps(job_id) if job is not None else []
    if job is None:
        raise PgbatonError(f"no job {job_id} in schema {queue.schema!r}")
    if as_json:
        shown = {**_job_fields(job), "steps": [_step_fields(s) for s in steps]}
        if with_logs:
            shown["logs"] = [dataclasses.asdict(k) for k in kept]
        _print_json(shown)
        return
    fields = _job_fields(job)
    if job.progress is not None or job.progress_note is not None:
        fields["progress"] = progress_text(job)  # "40% rows", one line for a person
        del fields["progress_note"]
    errors = fields.pop("errors")
    if fields["worker_id"] is None and errors and errors[-1].get("worker_id"):
        # A failed job's holder is cleared; where its last attempt ran is in its error.
        last = errors[-1]
        fields["worker_id"] = f"none now (attempt {last.get('attempt')} ran on " \
                              f"{last['worker_id']})"
    _table(f"job {job_id}", ["field", "value"],
           [[name, _as_shown(value)] for name, value in fields.items()])
    for error in errors:
        where = f" on {error['worker_id']}" if error.get("worker_id") else ""
        click.echo(printable(
            f"attempt {error.get('attempt')} at {error.get('at')}{where}: "
            f"{error.get('type')}: {error.get('message')}"
        ))
        if error.get("traceback"):
            # printable() shows escape characters escaped; newlines are kept per line.
            for line in tracebacks.folded(str(error["traceback"])).rstrip("\n").split("\n"):
                click.echo("    " + printable(line))
    _show_steps(job, steps)
    if with_logs:
        _print_logs(kept)


def _step_fields(step: Step) -> dict[str, Any]:
    """A durable step as `show --json` gives it: its row, its state and duration."""
    return {**dataclasses.asdict(step), "state": step.state, "duration": step.duration}


def _show_steps(job: Job, steps: list[Step]) -> None:
    """The job's durable steps (docs/howto/durable-steps.md), and what a suspended job
    sleeps until or waits for."""
    if not steps:
        return
    _table(f"steps of job {job.id}", ["seq", "name", "kind", "state", "seconds", "bytes"],
           [[s.seq, s.name, s.kind, s.state,
             "" if s.duration is None else f"{s.duration:.3f}", s.size or ""]
            for s in steps])
    last = steps[-1]
    if job.status == "pending" and last.finished_at is None:
        if last.kind == "sleep":
            click.echo(f"sleeping until {job.run_at.isoformat(timespec='seconds')}")
        else:
            deadline = ("no timeout" if last.until is None
                        else f"until {last.until.isoformat(timespec='seconds')}")
            click.echo(printable(f"waiting for event {last.name!r} ({deadline})"))


def _print_logs(kept: list[JobLog]) -> None:
    """Each run's lines under its label ("attempt 1, run 2 (snoozed)"), in the order
    the runs ran; printable() shows escapes escaped."""
    if not kept:
        click.echo("no log lines kept for this job")
    for attempt_log in kept:
        click.echo(f"logs of {attempt_log.label}:")
        for entry in attempt_log.lines:
            head, *rest = str(entry.get("message", "")).split("\n")
            click.echo(printable(
                f"  {entry.get('at')} {entry.get('level')} {entry.get('logger')}: {head}"))
            for line in rest:
                click.echo("      " + printable(line))
        if (marker := attempt_log.marker()) is not None:
            click.echo(f"  {marker}")


def progress_text(job: Job) -> str:
    """A job's progress in a few words: "40% exporting rows", "(earlier attempt) 40%"."""
    if job.progress is None and job.progress_note is None:
        return ""
    words = [] if job.progress is None else [f"{job.progress * 100:.0f}%"]
    if job.progress_note is not None:
        words.append(printable(job.progress_note))
    return ("(earlier attempt) " if job.progress_stale else "") + " ".join(words)


def _job_fields(job: Job) -> dict[str, Any]:
    """A job's fields with its state as shown (scheduled: pending, not yet due) after
    its stored status."""
    fields: dict[str, Any] = {}
    for name, value in dataclasses.asdict(job).items():
        fields[name] = value
        if name == "status":
            fields["state"] = job.state
    return fields


def _as_shown(value: Any) -> Any:
    """Args, results and headers as JSON (what `enqueue --args` takes back), not a
    Python repr."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return value


@main.command()
@click.argument("job_id", type=WHOLE_NUMBER)
@connection_options
def retry(job_id: int, dsn: str | None, schema: str, embedded: bool) -> None:
    """Send a failed or cancelled job back to pending with fresh attempts."""
    with _queue(dsn, schema, embedded) as queue:
        if not queue.retry(job_id):
            raise PgbatonError(refused("retry", job_id, queue.get(job_id), queue.schema))
    click.echo(f"job {job_id} is pending again")


@main.command()
@click.argument("job_id", type=WHOLE_NUMBER)
@connection_options
def cancel(job_id: int, dsn: str | None, schema: str, embedded: bool) -> None:
    """Cancel a pending or running job (its worker loses the claim)."""
    with _queue(dsn, schema, embedded) as queue:
        was = queue.get(job_id)
        if not queue.cancel(job_id):
            raise PgbatonError(refused("cancel", job_id, queue.get(job_id), queue.schema))
    if was is not None and was.status == "running":
        # The row says cancelled now, but the handler runs on until its worker hears.
        click.echo(f"job {job_id} cancelled; its handler on {was.worker_id or 'its worker'} "
                   "is told to stop at that worker's next heartbeat (a third of its lease) "
                   "and its result will not be written")
        return
    click.echo(f"job {job_id} cancelled")


@main.command()
@click.option("--older-than", type=NUMBER, default=7 * 24 * 3600.0, show_default=True,
              help="Seconds since the job finished: the retention.")
@click.option("--retention-mode", type=click.Choice(RETENTION_MODES),
              default=DEFAULT_RETENTION_MODE, show_default=True,
              help="delete: delete every finished job past --older-than. history: first "
                   "move done jobs without an idempotency key finished --history-after "
                   "seconds ago to jobs_history and drop its partitions past "
                   "--older-than, then delete the rest past --older-than "
                   "(docs/retention.md).")
@click.option("--history-after", type=NumberRange(min=0), default=3600.0,
              show_default=True, help="With --retention-mode history: seconds since a "
                                      "done job finished before it moves.")
@click.option("--history-partition", type=NUMBER, default=86400.0, show_default=True,
              help="With --retention-mode history: the width in seconds (whole minutes) "
                   "of the partitions it creates.")
@connection_options
def prune(
    older_than: float, retention_mode: str, history_after: float, history_partition: float,
    dsn: str | None, schema: str, embedded: bool,
) -> None:
    """Take out finished jobs: in history mode (the default) move done jobs to
    jobs_history and drop its partitions past the retention; in both modes delete the
    finished jobs past the retention that are left in the jobs table.

    Safe beside a running fleet: its leader does the same every minute, and neither
    waits for nor undoes the other."""
    moved = dropped = total = 0
    with _queue(dsn, schema, embedded) as queue:
        if retention_mode == "history":
            while archived := queue.archive(after=history_after, partition=history_partition):
                moved += archived
            dropped = queue.drop_history(retention=older_than)
            click.echo(f"moved {moved} jobs to jobs_history; dropped {dropped} partitions")
        while pruned := queue.prune(retention=older_than):
            total += pruned
    click.echo(f"pruned {total} jobs")


@main.command()
@dsn_option
@click.option("--dashboard", is_flag=True,
              help="Serve the dashboard on 127.0.0.1 (--port) to watch the demo live; "
                   "keeps its schema after the report until Ctrl-C.")
@click.option("--port", default=8000, show_default=True, type=WholeNumberRange(1, 65535),
              help="The dashboard's port, with --dashboard.")
@click.option("--keep", is_flag=True,
              help="Keep the demo's schema (and the embedded server) after the report "
                   "until Ctrl-C, and print the `pgbaton dashboard` command that shows it.")
def demo(dsn: str | None, dashboard: bool, port: int, keep: bool) -> None:
    """Watch the crash-and-stall demo on a real PostgreSQL, in a schema of its own: the
    --dsn, PGBATON_DSN or DATABASE_URL server, else the embedded one."""
    from ..showcase import demo as demo_module

    try:
        chosen = resolve_dsn(dsn, application_name="pgbaton demo")
    except ConfigurationError:
        chosen = resolve_dsn(None, embedded=True, application_name="pgbaton demo")
    sys.exit(demo_module.run(chosen, keep=keep, dashboard_port=port if dashboard else None))


main.add_command(doctor)
main.add_command(lab)
main.add_command(queue_group)
main.add_command(tasks)
main.add_command(rotate_keys)
main.add_command(schedule_group)
main.add_command(web_command.dashboard)
main.add_command(web_command.metrics)
add_bulk_form(retry, "retry")
add_bulk_form(cancel, "cancel")
