"""`pgbaton dashboard`, `pgbaton metrics`, and the bulk forms of `pgbaton retry` and
`pgbaton cancel` (`pgbaton retry --status failed --task X --since 10:00`), which count
the jobs first and act only on those counted."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

import click

from .._cli_common import _queue, dsn_option, resolve_dsn, schema_option
from ..actions import action_named
from ..errors import ConfigurationError, PgbatonError

MISSING_EXTRA = "the dashboard needs its extra: pip install 'pgbaton[web]'"


def _need_web_extra() -> None:
    for module in ("starlette", "uvicorn", "jinja2", "prometheus_client"):
        try:
            importlib.import_module(module)
        except ImportError:
            raise ConfigurationError(f"{MISSING_EXTRA} ({module} is missing)") from None


def _load_app(spec: str) -> Any:
    from ..app import load_app

    try:
        return load_app(spec)
    except ConfigurationError as error:
        raise click.BadParameter(str(error), param_hint="--app") from None


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; other than this machine only with authentication.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--app", "app_spec", default=None, metavar="MODULE:APP",
              help="Your pgbaton.App, to show its periodic schedules.")
@click.option("--read-only", is_flag=True, help="Show everything, change nothing.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A Host name it answers besides localhost and the bound address "
                   "(NAME, NAME:PORT, *.DOMAIN; repeatable; also "
                   "PGBATON_DASHBOARD_ALLOWED_HOSTS, a comma list).")
@dsn_option
@schema_option
def dashboard(*, host: str, port: int, app_spec: str | None, read_only: bool,
              allowed_hosts: tuple[str, ...], dsn: str | None, schema: str) -> None:
    """Serve the web dashboard (http://127.0.0.1:8000 by default)."""
    _need_web_extra()
    import uvicorn

    from .app import create_app
    from .security import Guard, Hosts, check_bind

    check_bind(host, Guard.from_environment(read_only=read_only))
    hosts = Hosts.from_environment(allowed_hosts, bound=host)
    pgbaton_app = _load_app(app_spec) if app_spec else None
    dsn = resolve_dsn(dsn, fallback=pgbaton_app._dsn if pgbaton_app else None)
    asgi = create_app(dsn, schema=pgbaton_app.schema if pgbaton_app else schema,
                      app=pgbaton_app, read_only=read_only, allowed_hosts=hosts.given,
                      bound_host=host)
    click.echo(f"pgbaton dashboard on http://{host}:{port}/", err=True)
    uvicorn.run(asgi, host=host, port=port, log_level="warning")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=9187, show_default=True, type=click.IntRange(0, 65535))
@dsn_option
@schema_option
def metrics(host: str, port: int, dsn: str | None, schema: str) -> None:
    """Serve the queue's gauges (depth, oldest pending age, expired leases) for Prometheus."""
    _need_web_extra()
    from prometheus_client import CollectorRegistry, start_http_server

    from ..metrics import QueueCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(resolve_dsn(dsn), schema))
    start_http_server(port, addr=host, registry=registry)
    click.echo(f"pgbaton metrics on http://{host}:{port}/metrics", err=True)
    while True:
        time.sleep(3600)


# -- the bulk forms of retry and cancel ------------------------------------------------

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
    from . import params

    query = {name.removeprefix("bulk_"): value for name, value in filters.items() if value}
    query["q"] = query.pop("text", "")
    try:
        job_filter = params.job_filter(query)
    except params.BadInput as error:
        raise click.BadParameter(str(error)) from None
    described = ", ".join(f"{name}={value}" for name, value in query.items() if value)
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
