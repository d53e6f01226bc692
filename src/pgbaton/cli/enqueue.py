"""`pgbaton enqueue TASK`: one job, checked against its handler with --app, unique with
--unique (docs/howto/unique.md)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from .._cli_common import (
    NUMBER,
    WHOLE_NUMBER,
    _print_json,
    _queue,
    connection_options,
    json_option,
    resolve_dsn,
)
from ..models import Enqueued
from ..unique import CONFLICTS, DEFAULT_STATES, Unique
from .app_spec import _app_schema, load_app


@click.command()
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
