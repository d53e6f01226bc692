"""`pgbaton migrate` (bring the schema up to date, in every database of an App with
--app) and `pgbaton schema --sql` (the schema as SQL, for teams that run their own
migrations)."""

from __future__ import annotations

import click

from .. import _sql
from .._cli_common import WholeNumberRange, _queue, connection_options, resolve_dsn, schema_option
from ..dsn import redact_dsn, with_application_name
from ..queue import Queue
from .app_spec import _app_schema, load_app


@click.command()
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


@click.command("schema")
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
