"""`pgbaton tasks` (each task of an App and its args as JSON Schema) and `pgbaton
rotate-keys` (encrypted args sealed again with the first key): docs/howto/typed-args.md,
docs/howto/encryption.md."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from .. import app as app_module
from .. import encryption
from .._cli_common import (
    WHOLE_NUMBER,
    _print_json,
    _queue,
    _table,
    connection_options,
    json_option,
)
from ..errors import ConfigurationError

SHOWN_UNOPENABLE = 20  # ids listed of the jobs rotate-keys cannot open


def task_rows(app: app_module.App) -> list[dict[str, Any]]:
    """Each task of the App as `pgbaton tasks --json` and the dashboard show it."""
    return [
        {"name": task.name, "queue": task.queue, "max_attempts": task.max_attempts,
         "encrypt": task.encrypt, "typed": bool(task.arg_types),
         "args_schema": task.args_schema()}
        for task in sorted(app.tasks.values(), key=lambda t: t.name)
    ]


@click.command("tasks")
@click.option("--app", "app_spec", required=True, metavar="MODULE:APP",
              help="The App whose tasks to list.")
@json_option
def tasks(app_spec: str, as_json: bool) -> None:
    """List the tasks of MODULE:APP: queue, attempts, whether their args are typed
    (checked against the handler's annotations, with pydantic) or encrypted, and their
    args as JSON Schema."""
    try:
        app = app_module.load_app(app_spec)
    except ConfigurationError as error:
        raise click.BadParameter(str(error), param_hint="--app") from None
    rows = task_rows(app)
    if as_json:
        _print_json(rows)
        return
    _table(f"tasks of {app_spec}", ["task", "queue", "max attempts", "args", "args schema"], [
        [row["name"], row["queue"], row["max_attempts"],
         ", ".join(what for what, on in (("typed", row["typed"]),
                                         ("encrypted", row["encrypt"])) if on) or "-",
         json.dumps(row["args_schema"], separators=(",", ":"))]
        for row in rows
    ])


@click.command("rotate-keys")
@click.option("--batch-size", type=WHOLE_NUMBER, default=500, show_default=True,
              help="Jobs read and sealed again per statement.")
@connection_options
@json_option
def rotate_keys(batch_size: int, dsn: str | None, schema: str, embedded: bool,
                as_json: bool) -> None:
    """Seal again, with the first key of PGBATON_ENCRYPTION_KEYS, the encrypted args of
    every pending, scheduled and waiting job that an older key sealed. Exits 1 when a
    job's key is not in the list (its ids are printed; the job is left as it is)."""
    text = os.environ.get(encryption.KEYS_VARIABLE)
    if text is None:
        raise click.ClickException(
            f"{encryption.KEYS_VARIABLE} is not set: give the new key first, then the old "
            "ones (docs/howto/encryption.md)")
    ring = encryption.parse_keys(text)
    encryption.check_available()
    with _queue(dsn, schema, embedded) as queue:
        counts = queue.reseal_args(ring, batch_size=batch_size)
    if as_json:
        _print_json({"key_id": ring.current, "resealed": counts.resealed,
                     "changed_meanwhile": counts.changed_meanwhile,
                     "unopenable": counts.unopenable})
    else:
        click.echo(f"resealed {counts.resealed:,} jobs with key id {ring.current}")
        if counts.changed_meanwhile:
            click.echo(f"{counts.changed_meanwhile:,} jobs were claimed or changed before "
                       "their turn: run rotate-keys again to reach those still pending")
    if counts.unopenable:
        shown = ", ".join(map(str, counts.unopenable[:SHOWN_UNOPENABLE]))
        more = len(counts.unopenable) - SHOWN_UNOPENABLE
        click.echo(
            f"pgbaton: {len(counts.unopenable):,} jobs are sealed with a key that "
            f"{encryption.KEYS_VARIABLE} does not hold, or do not open (ids {shown}"
            f"{f' and {more:,} more' if more > 0 else ''}): left as they are", err=True)
        sys.exit(1)
