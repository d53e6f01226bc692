"""The `pgbaton` command line."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

import click

from . import _sql
from .app import App
from .errors import PgbatonError
from .queue import Queue


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


dsn_option = click.option(
    "--dsn", envvar="PGBATON_DSN", help="PostgreSQL DSN (else PGBATON_DSN, else DATABASE_URL)."
)
schema_option = click.option("--schema", default=None, help="pgbaton's schema [pgbaton].")


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
def migrate(dsn: str | None, schema: str | None) -> None:
    """Bring the schema up to date (safe to run from several processes at once)."""
    with Queue(dsn, schema=schema or "pgbaton") as queue:
        applied = queue.migrate()
    target = _sql.schema_version()
    if applied:
        click.echo(f"schema {queue.schema!r}: applied {applied}, now at version {target}")
    else:
        click.echo(f"schema {queue.schema!r}: already at version {target}")


@main.command("schema")
@click.option("--sql", "as_sql", is_flag=True, required=True, help="Print the DDL.")
@schema_option
def schema_command(as_sql: bool, schema: str | None) -> None:
    """Print the whole current schema as SQL, for teams that run their own migrations."""
    click.echo(_sql.schema_sql(schema or "pgbaton"))


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
@schema_option
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
    app.configure(dsn=dsn, schema=schema)
    config = WorkerConfig(
        queues=[q for q in queues.split(",") if q] if queues else None,
        concurrency=concurrency, processes=processes, lease=lease,
        poll_interval=poll_interval, shutdown_grace=shutdown_grace,
        maintenance=not no_maintenance, dsn=dsn,
    )
    sys.exit(run_worker(app, config, app_spec=app_spec))
