"""`pgbaton queue`: show, pause, resume, limit and age queues at run time, without
restarting workers (docs/explanation/flow_control.md)."""

from __future__ import annotations

import click

from .._checks import parse_whole
from .._cli_common import (
    NUMBER,
    WHOLE_NUMBER,
    _print_json,
    _queue,
    _table,
    connection_options,
    format_duration,
    json_option,
)
from ..errors import InvalidArgument
from ..flow import QueueSettings, check_concurrency, parse_rate
from ..queue import Queue

new_option = click.option(
    "--new", is_flag=True,
    help="Allow a queue that has no setting and no pending or running job yet.",
)


def _known(queue: Queue, name: str, new: bool) -> None:
    """A misspelt queue name would otherwise pause or limit nothing, silently."""
    if new or queue.queue_settings(name):
        return
    known = ", ".join(repr(s.name) for s in queue.queue_settings()) or "none"
    raise click.ClickException(
        f"unknown queue {name!r}: no setting names it and it has no pending or running "
        f"job (queues: {known}); pass --new to set it anyway"
    )


def _as_json(settings: QueueSettings) -> dict[str, object]:
    return {
        "name": settings.name, "paused": settings.paused,
        "concurrency": settings.concurrency,
        "rate": None if settings.rate is None else str(settings.rate),
        "key_concurrency": settings.key_concurrency,
        "key_rate": None if settings.key_rate is None else str(settings.key_rate),
        "held": settings.held,
        "aging": None if settings.aging is None else {
            "every": settings.aging.every, "step": settings.aging.step,
            "cap": settings.aging.cap,
        },
        "updated_at": settings.updated_at,
    }


def _show(rows: list[QueueSettings], as_json: bool) -> None:
    if as_json:
        _print_json([_as_json(s) for s in rows])
        return
    _table(
        "queues",
        ["queue", "paused", "concurrency", "rate", "per limit key", "aging", "held now"],
        [
            [s.name, "paused" if s.paused else "", s.concurrency or "",
             "" if s.rate is None else f"{s.rate} ({format_duration(s.rate.period)})",
             " ".join(filter(None, [
                 f"{s.key_concurrency} at once" if s.key_concurrency else "",
                 f"{s.key_rate}" if s.key_rate else ""])),
             "" if s.aging is None else
             f"+{s.aging.step} every {format_duration(s.aging.every)} up to {s.aging.cap}",
             s.held]
            for s in rows
        ],
    )


@click.group("queue")
def queue_group() -> None:
    """Show, pause, resume and limit queues, fleet-wide, at run time."""


@queue_group.command("show")
@click.argument("name", required=False)
@connection_options
@json_option
def show(*, name: str | None, dsn: str | None, schema: str, embedded: bool,
         as_json: bool) -> None:
    """Every queue with a setting or a pending or running job (or just NAME)."""
    with _queue(dsn, schema, embedded) as queue:
        rows = queue.queue_settings(name)
        if name is not None and not rows:
            _known(queue, name, False)
    _show(rows, as_json)


@queue_group.command("pause")
@click.argument("name")
@new_option
@connection_options
def pause(name: str, new: bool, dsn: str | None, schema: str, embedded: bool) -> None:
    """Claim none of NAME's jobs from now on; running jobs finish."""
    with _queue(dsn, schema, embedded) as queue:
        _known(queue, name, new)
        queue.pause(name)
    click.echo(f"paused {name!r}: no claim takes its jobs until `pgbaton queue resume`")


@queue_group.command("resume")
@click.argument("name")
@connection_options
def resume(name: str, dsn: str | None, schema: str, embedded: bool) -> None:
    """Let NAME's jobs be claimed again."""
    with _queue(dsn, schema, embedded) as queue:
        _known(queue, name, False)
        queue.resume(name)
    click.echo(f"resumed {name!r}")


@queue_group.command("aging")
@click.argument("name")
@click.option("--every", type=NUMBER, default=None, metavar="SECONDS",
              help="How long a job waits before each raise of its priority.")
@click.option("--step", type=WHOLE_NUMBER, default=1, show_default=True, help="Raise by this much.")
@click.option("--cap", type=WHOLE_NUMBER, default=None, help="Never above this priority.")
@click.option("--off", is_flag=True, help="Stop aging the queue.")
@new_option
@connection_options
@json_option
def aging(*, name: str, every: float | None, step: int, cap: int | None, off: bool,
          new: bool, dsn: str | None, schema: str, embedded: bool, as_json: bool) -> None:
    """Priority aging: jobs of NAME that wait long gain priority, up to a cap."""
    if off == (every is not None):
        raise click.UsageError("give --every and --cap, or --off")
    if not off and cap is None:
        raise click.UsageError("--every needs --cap, the highest priority aging may give")
    with _queue(dsn, schema, embedded) as queue:
        _known(queue, name, new)
        settings = queue.set_aging(name, every=every, step=step, cap=cap or 0)
    _show([settings], as_json)


@queue_group.command("limit")
@click.argument("name")
@click.option("--concurrency", default=None, metavar="N|none",
              help="At most N of the queue's jobs at once, fleet-wide; none removes it.")
@click.option("--rate", default=None, metavar="R/PERIOD|none",
              help="At most R starts per sliding window: 100/s, 10/min, 5/2h; none removes.")
@click.option("--key-concurrency", default=None, metavar="N|none",
              help="At most N jobs of each limit key at once; none removes it.")
@click.option("--key-rate", default=None, metavar="R/PERIOD|none",
              help="At most R starts of each limit key per sliding window; none removes.")
@new_option
@connection_options
@json_option
def limit(*, name: str, concurrency: str | None, rate: str | None,
          key_concurrency: str | None, key_rate: str | None, new: bool,
          dsn: str | None, schema: str, embedded: bool, as_json: bool) -> None:
    """Set or remove NAME's limits, for the queue and per limit key; workers obey within
    a second."""
    given = {"--concurrency": concurrency, "--rate": rate,
             "--key-concurrency": key_concurrency, "--key-rate": key_rate}
    if all(value is None for value in given.values()):
        raise click.UsageError("give --concurrency, --rate, --key-concurrency or --key-rate")
    counts = {flag: _count(flag, given[flag]) for flag in ("--concurrency", "--key-concurrency")}
    rates = {flag: None if given[flag] in (None, "none", "None") else parse_rate(given[flag])
             for flag in ("--rate", "--key-rate")}
    with _queue(dsn, schema, embedded) as queue:
        _known(queue, name, new)
        if concurrency is not None:
            settings = queue.set_concurrency(name, counts["--concurrency"])
        if rate is not None:
            settings = queue.set_rate(name, rates["--rate"])
        if key_concurrency is not None:
            settings = queue.set_key_concurrency(name, counts["--key-concurrency"])
        if key_rate is not None:
            settings = queue.set_key_rate(name, rates["--key-rate"])
    _show([settings], as_json)


def _count(flag: str, value: str | None) -> int | None:
    if value is None or value.lower() == "none":
        return None
    try:
        count = parse_whole(repr(value), value)
    except InvalidArgument as error:
        message = str(error) if "must be a whole number" not in str(error) else (
            f"{value!r} is not a whole number or 'none'")
        raise click.BadParameter(message, param_hint=flag) from None
    return check_concurrency(count)
