"""The `pgbaton` command line."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import sys
from typing import Any

import click

from . import _sql
from ._cli_common import (
    _print_json,
    _queue,
    _table,
    dsn_option,
    json_option,
    resolve_dsn,
    schema_option,
)
from .app import App
from .doctor import doctor
from .errors import PgbatonError
from .showcase.lab import lab
from .web import command as web_command


class _Command(click.Group):
    """Turns pgbaton's own errors into one clear line and exit status 1 (2 is usage)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (PgbatonError, ValueError) as error:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"pgbaton: error: {error}", err=True)
            sys.exit(1)


@click.group(cls=_Command)
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """pgbaton: a background-job queue that lives in PostgreSQL."""
    ctx.obj = {"debug": debug}
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@main.command()
@dsn_option
@schema_option
def migrate(dsn: str | None, schema: str) -> None:
    """Bring the schema up to date (safe to run from several processes at once)."""
    with _queue(dsn, schema) as queue:
        applied = queue.migrate()
    target = _sql.schema_version()
    if applied:
        click.echo(f"schema {queue.schema!r}: applied {applied}, now at version {target}")
    else:
        click.echo(f"schema {queue.schema!r}: already at version {target}")


@main.command("schema")
@click.option("--sql", "as_sql", is_flag=True, required=True, help="Print the DDL.")
@schema_option
def schema_command(as_sql: bool, schema: str) -> None:
    """Print the whole current schema as SQL, for teams that run their own migrations."""
    click.echo(_sql.schema_sql(schema))


def load_app(spec: str) -> App:
    """MODULE:ATTRIBUTE to the App it names, with errors that say what was wrong."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"{spec!r} is not MODULE:ATTRIBUTE (e.g. myproject.jobs:app)")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise click.BadParameter(f"cannot import {module_name!r}: {error}") from None
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise click.BadParameter(f"{spec!r} is not a pgbaton.App (found {type(app).__name__})")
    return app


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@dsn_option
@click.option("--schema", default=None, help="pgbaton's schema [the App's own].")
@click.option("--queues", default=None, help="Comma-separated queues to work [all].")
@click.option("--concurrency", default=10, show_default=True, help="Jobs at once per process.")
@click.option("--processes", default=1, show_default=True, help="Worker processes.")
@click.option("--lease", default=30.0, show_default=True, help="Lease in seconds.")
@click.option("--poll-interval", default=2.0, show_default=True, help="Seconds between polls.")
@click.option("--shutdown-grace", default=30.0, show_default=True,
              help="Seconds running jobs get to finish on SIGTERM.")
@click.option("--no-maintenance", is_flag=True, help="Never act as the maintenance leader.")
def worker(
    app_spec: str, dsn: str | None, schema: str | None, queues: str | None, concurrency: int,
    processes: int, lease: float, poll_interval: float, shutdown_grace: float,
    no_maintenance: bool,
) -> None:
    """Run a worker for the tasks of MODULE:APP until SIGTERM or SIGINT."""
    from .worker import WorkerConfig, run_worker

    app = load_app(app_spec)
    dsn = resolve_dsn(dsn, fallback=app._dsn)
    app.configure(dsn=dsn, schema=schema)
    config = WorkerConfig(
        queues=[q for q in queues.split(",") if q] if queues else None,
        concurrency=concurrency, processes=processes, lease=lease,
        poll_interval=poll_interval, shutdown_grace=shutdown_grace,
        maintenance=not no_maintenance, dsn=dsn,
    )
    sys.exit(run_worker(app, config, app_spec=app_spec))


@main.command()
@click.argument("task")
@click.option("--args", "args_json", default="{}", help="Keyword arguments as a JSON object.")
@click.option("--queue", "queue_name", default="default", show_default=True)
@click.option("--priority", default=0, show_default=True)
@click.option("--delay", type=float, default=None, help="Seconds before it may run.")
@click.option("--key", default=None, help="Serialisation key: one running job per key.")
@click.option("--idempotency-key", default=None, help="A second enqueue with it is a no-op.")
@click.option("--max-attempts", default=5, show_default=True)
@dsn_option
@schema_option
@json_option
def enqueue(
    task: str, args_json: str, queue_name: str, priority: int, delay: float | None,
    key: str | None, idempotency_key: str | None, max_attempts: int, dsn: str | None,
    schema: str, as_json: bool,
) -> None:
    """Enqueue one job of TASK."""
    try:
        args = json.loads(args_json)
    except json.JSONDecodeError as error:
        raise click.BadParameter(f"not JSON: {error}", param_hint="--args") from None
    if not isinstance(args, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--args")
    with _queue(dsn, schema) as queue:
        job_id = queue.enqueue(
            task, args, queue=queue_name, priority=priority, delay=delay, key=key,
            idempotency_key=idempotency_key, max_attempts=max_attempts,
        )
    if as_json:
        _print_json({"id": job_id})
    else:
        click.echo(job_id)


@main.command()
@dsn_option
@schema_option
@json_option
def stats(dsn: str | None, schema: str, as_json: bool) -> None:
    """Per queue: jobs by status, oldest pending age, throughput, expired leases."""
    with _queue(dsn, schema) as queue:
        rows = [dataclasses.asdict(s) for s in queue.stats()]
    if as_json:
        _print_json(rows)
        return
    columns = list(rows[0]) if rows else ["queue"]
    _table(f"pgbaton queues in schema {schema!r}", columns, [list(r.values()) for r in rows])


@main.command()
@click.option("--status", default=None, help="pending, running, done, failed or cancelled.")
@click.option("--queue", "queue_name", default=None)
@click.option("--task", default=None)
@click.option("--limit", default=50, show_default=True)
@dsn_option
@schema_option
@json_option
def jobs(
    status: str | None, queue_name: str | None, task: str | None, limit: int,
    dsn: str | None, schema: str, as_json: bool,
) -> None:
    """List jobs, newest first."""
    with _queue(dsn, schema) as queue:
        found = queue.jobs(status=status, queue=queue_name, task=task, limit=limit)
    if as_json:
        _print_json([dataclasses.asdict(job) for job in found])
        return
    _table(
        "jobs", ["id", "queue", "task", "status", "attempts", "key", "run_at", "last error"],
        [
            [j.id, j.queue, j.task, j.status, f"{j.attempts}/{j.max_attempts}", j.key,
             j.run_at.isoformat(timespec="seconds"),
             (j.errors[-1].get("message", "") if j.errors else "")[:60]]
            for j in found
        ],
    )


@main.command()
@click.argument("job_id", type=int)
@dsn_option
@schema_option
@json_option
def show(job_id: int, dsn: str | None, schema: str, as_json: bool) -> None:
    """Show one job, with every attempt's error."""
    with _queue(dsn, schema) as queue:
        job = queue.get(job_id)
    if job is None:
        raise PgbatonError(f"no job {job_id} in schema {schema!r}")
    if as_json:
        _print_json(dataclasses.asdict(job))
        return
    fields = dataclasses.asdict(job)
    errors = fields.pop("errors")
    _table(f"job {job_id}", ["field", "value"], [[k, v] for k, v in fields.items()])
    for error in errors:
        click.echo(f"attempt {error.get('attempt')}: {error.get('type')}: {error.get('message')}")


@main.command()
@click.argument("job_id", type=int)
@dsn_option
@schema_option
def retry(job_id: int, dsn: str | None, schema: str) -> None:
    """Send a failed or cancelled job back to pending with fresh attempts."""
    with _queue(dsn, schema) as queue:
        if not queue.retry(job_id):
            raise PgbatonError(f"job {job_id} is not failed or cancelled (or does not exist)")
    click.echo(f"job {job_id} is pending again")


@main.command()
@click.argument("job_id", type=int)
@dsn_option
@schema_option
def cancel(job_id: int, dsn: str | None, schema: str) -> None:
    """Cancel a pending or running job (its worker loses the claim)."""
    with _queue(dsn, schema) as queue:
        if not queue.cancel(job_id):
            raise PgbatonError(f"job {job_id} is not pending or running (or does not exist)")
    click.echo(f"job {job_id} cancelled")


@main.command()
@click.option("--older-than", default=7 * 24 * 3600.0, show_default=True,
              help="Seconds since the job finished.")
@dsn_option
@schema_option
def prune(older_than: float, dsn: str | None, schema: str) -> None:
    """Delete done, failed and cancelled jobs that finished long enough ago."""
    total = 0
    with _queue(dsn, schema) as queue:
        while pruned := queue.prune(retention=older_than):
            total += pruned
    click.echo(f"pruned {total} jobs")


@main.command()
@dsn_option
def demo(dsn: str | None) -> None:
    """Watch the crash-and-stall story on a real PostgreSQL (the embedded one by default)."""
    from .showcase import demo as demo_module

    sys.exit(demo_module.run(resolve_dsn(dsn)))


main.add_command(doctor)
main.add_command(lab)
main.add_command(web_command.dashboard)
main.add_command(web_command.metrics)
web_command.add_bulk_form(retry, "retry")
web_command.add_bulk_form(cancel, "cancel")
