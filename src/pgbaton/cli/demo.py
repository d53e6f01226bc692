"""`pgbaton demo`: the crash-and-stall demo (pgbaton.showcase.demo) on a real
PostgreSQL, in a schema of its own."""

from __future__ import annotations

import sys

import click

from .._cli_common import WholeNumberRange, dsn_option, resolve_dsn
from ..errors import ConfigurationError


@click.command()
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
