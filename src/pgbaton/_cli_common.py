"""What the `pgbaton` commands share: DSN resolution, common options, output helpers."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from typing import Any

import click

from .queue import Queue

dsn_option = click.option(
    "--dsn", envvar="PGBATON_DSN",
    help="PostgreSQL DSN (else PGBATON_DSN, else DATABASE_URL, else the embedded server).",
)
schema_option = click.option("--schema", default="pgbaton", show_default=True,
                             help="pgbaton's schema.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def resolve_dsn(dsn: str | None, fallback: str | None = None) -> str:
    """--dsn (or PGBATON_DSN), else DATABASE_URL, else fallback, else the embedded server."""
    chosen = dsn or os.environ.get("DATABASE_URL") or fallback
    if chosen:
        return chosen
    from . import embedded

    server = embedded.start()
    click.echo(
        f"pgbaton: no --dsn, PGBATON_DSN or DATABASE_URL: using the embedded PostgreSQL 18 "
        f"in {embedded.DEFAULT_DATA_DIR}", err=True,
    )
    return embedded.dsn(server)


def _queue(dsn: str | None, schema: str) -> Queue:
    return Queue(resolve_dsn(dsn), schema=schema)


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, default=_json_default, indent=2))


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(*columns, title=title)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    Console().print(table)
