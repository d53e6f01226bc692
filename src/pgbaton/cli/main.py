"""The `pgbaton` command group, and the registration of its commands.

Each command lives in the module of its concern and is registered here, as those
with a package of their own (doctor, dashboard, metrics, lab) are:

    schema.py    migrate, schema        worker.py    worker
    enqueue.py   enqueue                jobs.py      stats, jobs, show
    actions.py   retry, cancel, prune   demo.py      demo
    queues.py    queue ...              schedules.py schedule ...
    args.py      tasks, rotate-keys     bulk.py      the bulk forms of retry and cancel
    app_spec.py  MODULE:APP for the commands that take an App

docs/reference/cli.md is written from this group (docs/hooks/cli_reference.py)."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import sys
from typing import Any

import click

from .._cli_common import BEFORE_COMMAND, DSN_HELP, SCHEMA_HELP, printable
from ..doctor import doctor
from ..errors import PgbatonError
from ..showcase.lab import lab
from ..web import command as web_command
from .actions import cancel, prune, retry
from .app_spec import load_app
from .args import rotate_keys, tasks
from .bulk import add_bulk_form
from .demo import demo
from .enqueue import enqueue
from .jobs import jobs, progress_text, show, stats
from .queues import queue_group
from .schedules import schedule_group
from .schema import migrate, schema_command
from .worker import wait_for_database, worker

# The commands that moved to the modules above stay names of this module.
__all__ = [
    "cancel",
    "demo",
    "enqueue",
    "jobs",
    "load_app",
    "main",
    "migrate",
    "progress_text",
    "prune",
    "retry",
    "schema_command",
    "show",
    "stats",
    "wait_for_database",
    "worker",
]

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



main.add_command(migrate)
main.add_command(schema_command)
main.add_command(worker)
main.add_command(enqueue)
main.add_command(stats)
main.add_command(jobs)
main.add_command(show)
main.add_command(retry)
main.add_command(cancel)
main.add_command(prune)
main.add_command(demo)
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
