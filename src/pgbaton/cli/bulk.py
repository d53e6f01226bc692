"""The bulk forms of `pgbaton retry` and `pgbaton cancel` (`pgbaton retry --status
failed --task X --since 10:00`): they count the jobs of a filter first and act only on
those counted, as the dashboard's bulk actions do (pgbaton.actions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .._cli_common import _queue
from ..actions import action_named
from ..errors import InvalidArgument, PgbatonError
from ..job_filter import filter_of

_FILTER_OPTIONS = (
    click.Option(["--status"], help="Bulk: jobs in this state."),
    click.Option(["--task"], help="Bulk: jobs of this task."),
    click.Option(["--queue", "bulk_queue"], help="Bulk: jobs of this queue."),
    click.Option(["--key"], help="Bulk: jobs of this key."),
    click.Option(["--text"], help="Bulk: jobs whose args or errors contain this."),
    click.Option(["--since"], help="Bulk: finished (or created) at or after: 10:00, ISO."),
    click.Option(["--until"], help="Bulk: finished (or created) before."),
    click.Option(["--yes", "-y"], is_flag=True, help="Bulk: do not ask before acting."),
)
_FILTER_NAMES = ("status", "task", "bulk_queue", "key", "text", "since", "until")


def add_bulk_form(command: click.Command, action: str) -> click.Command:
    """Give an operator command taking JOB_ID a bulk form on a filter: JOB_ID becomes
    optional, filter options are added, and with any of them the jobs are counted,
    the count shown, and (after a yes) exactly those are acted on."""
    done = action_named(action).done
    for param in command.params:
        if isinstance(param, click.Argument):
            param.required = False
    command.params.extend(_FILTER_OPTIONS)
    command.help = (command.help or "") + (
        "\n\nWith filter options instead of JOB_ID, every job of the filter that can be "
        f"{done}: the count is shown first, "
        "then asked (e.g. "
        + ("--status failed --task charge --since 10:00)." if action == "retry"
           else "--queue mail --task send_receipt).")
    )
    single: Callable[..., Any] = command.callback  # type: ignore[assignment]

    def callback(**options: Any) -> None:
        filters = {name: options.pop(name) for name in _FILTER_NAMES}
        yes = options.pop("yes")
        given = any(value is not None for value in filters.values())
        if options.get("job_id") is not None:
            if given:
                raise click.UsageError("give a JOB_ID or filter options, not both")
            single(**options)
            return
        if not given:
            raise click.UsageError("give a JOB_ID, or filter options (--status, --task, "
                                   "--since, ...) to act on many jobs")
        _bulk(action, filters, yes, options["dsn"], options["schema"])

    command.callback = callback
    return command


def _bulk(action: str, filters: dict[str, Any], yes: bool, dsn: str | None,
          schema: str) -> None:
    fields = {name.removeprefix("bulk_"): value for name, value in filters.items() if value}
    try:
        job_filter = filter_of(fields)
    except InvalidArgument as error:
        raise click.BadParameter(str(error)) from None
    described = ", ".join(f"{name}={value}" for name, value in fields.items())
    done = action_named(action).done
    with _queue(dsn, schema) as queue:
        count, upto = queue.count_matching(action, job_filter)
        click.echo(f"{count} job{'s' if count != 1 else ''} of {described} "
                   f"can be {done} now" + (f" (ids up to {upto})" if count else ""))
        if not count:
            return
        if not yes and not click.confirm("Go ahead?", default=False):
            raise PgbatonError("nothing was changed")
        changed = queue.act_matching(action, job_filter, upto=upto)
    click.echo(f"{done} {changed} job{'s' if changed != 1 else ''}")
