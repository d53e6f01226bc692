"""`pgbaton doctor`, the command: options, one connection, and the report as a table
or as JSON; the exit status is 1 when any finding fails."""

from __future__ import annotations

import sys
from dataclasses import asdict

import click

from .. import _database, _sql
from .._cli_common import (
    NumberRange,
    _print_json,
    dsn_option,
    json_option,
    resolve_dsn,
    schema_option,
)
from ..dsn import redact_dsn
from ..pooling import transaction_pool_evidence
from .checks import run_checks
from .findings import Thresholds, overall
from .inspection import Inspection
from .render import render

APPLICATION_NAME = "pgbaton doctor"


@click.command()
@dsn_option
@schema_option
@json_option
@click.option("--max-idle-in-transaction", type=NumberRange(min=0), default=60.0,
              show_default=True, metavar="SECONDS",
              help="A session idle in transaction longer than this is a problem.")
@click.option("--max-transaction-age", type=NumberRange(min=0), default=300.0,
              show_default=True, metavar="SECONDS",
              help="A transaction holding a snapshot longer than this is a problem.")
@click.option("--lease-grace", type=NumberRange(min=0), default=30.0,
              show_default=True, metavar="SECONDS",
              help="A running job this long past its lease means nobody reaps.")
@click.option("--max-lag", type=NumberRange(min=0), default=300.0,
              show_default=True, metavar="SECONDS",
              help="A due job waiting longer than this to start is a problem.")
@click.option("--max-dead-ratio", type=NumberRange(min=0, max=1), default=0.5,
              show_default=True, metavar="FRACTION",
              help="A larger share of dead row versions in jobs is a warning.")
@click.option("--verbose", is_flag=True,
              help="Also show the claim's EXPLAIN when its plan is fine.")
def doctor(
    *, dsn: str | None, schema: str, as_json: bool, verbose: bool,
    max_idle_in_transaction: float,
    max_transaction_age: float, lease_grace: float, max_lag: float, max_dead_ratio: float,
) -> None:
    """Check a live installation and show the evidence; exit 1 when something is wrong.

    Checks the schema version, the jobs table's indexes and constraints against those
    this pgbaton creates, the claim's plan (it must read the partial index
    jobs_claimable), running jobs past their lease (nobody reaps), queue lag, the jobs
    table's dead rows and autovacuum, sessions idle in transaction, and old transactions
    that hold back vacuum, and whether the DSN goes through a transaction pool
    (PgBouncer), which workers cannot LISTEN or lead through. Other sessions'
    statements are shown without their literals. Nothing is changed.
    """
    _sql.check_schema_name(schema)
    thresholds = Thresholds(
        max_idle_in_transaction=max_idle_in_transaction,
        max_transaction_age=max_transaction_age, lease_grace=lease_grace,
        max_lag=max_lag, max_dead_ratio=max_dead_ratio,
    )
    dsn = resolve_dsn(dsn)
    pooled = transaction_pool_evidence(dsn)
    with _database.connect(dsn, autocommit=True, application_name=APPLICATION_NAME) as conn:
        _database.check_server(conn)
        inspection = Inspection(conn, schema, thresholds, dsn=dsn, pooled=pooled)
        findings = run_checks(inspection)
    status = overall(findings)
    server = inspection.server
    if as_json:
        _print_json({
            "status": status,
            "schema": schema,
            "database": server.get("database"),
            "server_version": server.get("version"),
            "library_schema_version": _sql.schema_version(),
            "thresholds": asdict(thresholds),
            "findings": [asdict(f) for f in findings],
        })
    else:
        render(findings, f"pgbaton doctor: schema {schema!r} in database "
                         f"{server.get('database')!r} at {redact_dsn(dsn)} "
                         f"(PostgreSQL {server.get('version')})", verbose=verbose)
    if status == "fail":
        sys.exit(1)
