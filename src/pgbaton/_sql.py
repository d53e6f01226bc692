"""Loads the named statements of sql/*.sql, with their shared fragments put in place,
and the numbered migrations."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

from .errors import ConfigurationError
from .limits import MAX_SCHEMA_NAME_LENGTH, RESERVED_SCHEMA_PREFIX

SCHEMA_PLACEHOLDER = "__schema__"
CHANNEL_PLACEHOLDER = "__channel__"  # the schema's NOTIFY channel, quoted
ENDED_CHANNEL_PLACEHOLDER = "__ended_channel__"  # the channel of awaited jobs' ends
CANCELLED_CHANNEL_PLACEHOLDER = "__cancelled_channel__"  # running jobs cancelled
_SCHEMA_NAME = re.compile(rf"^[a-z_][a-z0-9_]{{0,{MAX_SCHEMA_NAME_LENGTH - 1}}}$")
_QUERY_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
# A statement's header, or a fragment's: a piece of SQL several statements share, written
# once and put where a statement says __<fragment name>__. A fragment is an expression
# (the job filter), put in parentheses; a part is a run of a statement's clauses (the
# claim's write), put as written.
_HEADER = re.compile(r"^-- (name|fragment|part): (\w+)\s*$", re.MULTILINE)
_MIGRATION_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


def _read(name: str) -> str:
    return resources.files("pgbaton").joinpath("sql", name).read_text(encoding="utf-8")


def check_schema_name(schema: str) -> str:
    """The schema name goes into SQL text, so only plain lower-case identifiers pass."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
        raise ConfigurationError(
            f"schema name {schema!r} is not usable: use lower-case letters, digits and "
            "underscores, starting with a letter or underscore "
            f"(at most {MAX_SCHEMA_NAME_LENGTH} characters)"
        )
    if schema.startswith(RESERVED_SCHEMA_PREFIX):
        raise ConfigurationError(
            f"schema name {schema!r} is not usable: PostgreSQL reserves names starting "
            f"with {RESERVED_SCHEMA_PREFIX!r} for its own schemas"
        )
    return schema


def _in_schema(text: str, schema: str) -> str:
    return text.replace(SCHEMA_PLACEHOLDER, f'"{check_schema_name(schema)}"')


QUERY_FILES = ("server.sql", "migration.sql", "jobs.sql", "queues.sql", "leader.sql",
               "doctor.sql", "lab.sql", "demo.sql", "testing.sql",
               "dashboard.sql", "dependencies.sql", "history.sql", "args.sql",
               "schedules.sql", "workers.sql", "steps.sql")


@functools.cache
def _sections() -> tuple[dict[str, str], dict[str, str]]:
    """The statements of the query files, each as written, and their fragments and
    parts, each as put in place; a name may appear only once."""
    statements: dict[str, str] = {}
    fragments: dict[str, str] = {}
    folder = resources.files("pgbaton").joinpath("sql")
    for file_name in QUERY_FILES:
        if not folder.joinpath(file_name).is_file():
            continue
        parts = _HEADER.split(_read(file_name))
        # parts = [preamble, kind1, name1, body1, kind2, name2, body2, ...]
        for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
            if name in statements or name in fragments:
                raise RuntimeError(f"query {name!r} is defined twice (again in {file_name})")
            if kind == "name":
                statements[name] = body.strip()
            else:
                fragments[name] = as_put(kind, body.strip())
    return statements, fragments


def as_put(kind: str, fragment: str) -> str:
    """A fragment or a part (`kind`, as its header says) as it is put in place: its SQL
    without its comments, a fragment's in parentheses."""
    lines = [line for line in fragment.splitlines() if not line.lstrip().startswith("--")]
    text = "\n".join(lines)
    return f"({text})" if kind == "fragment" else text


def fill(body: str, fragments: dict[str, str]) -> str:
    """The statement with each __<fragment>__ replaced (fragments and parts: by name, as
    put in place), its lines indented to where the hole was."""
    def put(match: re.Match[str]) -> str:
        column = match.start() - (body.rfind("\n", 0, match.start()) + 1)
        return fragments[match[1]].replace("\n", "\n" + " " * column)

    if not fragments:
        return body
    holes = re.compile(r"__(" + "|".join(map(re.escape, fragments)) + r")__")
    return holes.sub(put, body)


def bind(body: str, schema: str) -> str:
    """A statement bound to one schema: its name and its NOTIFY channels in place."""
    return (
        _in_schema(body, schema)
        .replace(ENDED_CHANNEL_PLACEHOLDER, f'"{ended_channel(schema)}"')
        .replace(CANCELLED_CHANNEL_PLACEHOLDER, f'"{cancelled_channel(schema)}"')
        # Last: the other channels' placeholders contain this one.
        .replace(CHANNEL_PLACEHOLDER, f'"{notify_channel(schema)}"')
    )


@functools.cache
def _raw_queries() -> dict[str, str]:
    """Every named statement of the query files, its fragments in place."""
    statements, fragments = _sections()
    return {name: fill(body, fragments) for name, body in statements.items()}


@functools.cache
def queries(schema: str) -> dict[str, str]:
    """Every named statement, bound to one schema."""
    return {name: bind(body, schema) for name, body in _raw_queries().items()}


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str

    def in_schema(self, schema: str) -> str:
        return _in_schema(self.text, schema)


@functools.cache
def migrations() -> tuple[Migration, ...]:
    folder = resources.files("pgbaton").joinpath("sql", "migrations")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append(
                Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8"))
            )
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations are not numbered 1..n: {[m.version for m in found]}")
    return tuple(found)


def schema_version() -> int:
    """The schema version this pgbaton was written for: its newest migration."""
    return migrations()[-1].version


TEMPORARY_SCHEMA = "pg_temp"  # the session's own: where doctor builds its reference copy


def tables_sql(schema: str) -> str:
    """schema.sql bound to one schema: the tables, indexes and functions, without the
    schema itself or its version rows. The session's temporary schema (pg_temp) is the
    one reserved name allowed here: doctor builds a throw-away copy there."""
    if schema == TEMPORARY_SCHEMA:
        return _read("schema.sql").replace(SCHEMA_PLACEHOLDER, TEMPORARY_SCHEMA)
    return _in_schema(_read("schema.sql"), schema)


def schema_sql(schema: str) -> str:
    """The whole current schema as DDL, for teams that run their own migrations: the
    schema, its tables, and the version rows that tell pgbaton it is current."""
    sql = queries(schema)
    versions = ", ".join(f"({m.version}, '{m.name}')" for m in migrations())
    return "\n\n".join([
        sql["schema_create"],
        tables_sql(schema).strip(),
        sql["schema_version_create"],
        _in_schema(
            f"INSERT INTO __schema__.schema_version (version, name) VALUES {versions};", schema
        ),
    ]) + "\n"


def upgrade_sql(schema: str, from_version: int) -> str:
    """The migrations after from_version as one SQL file, each followed by its version
    row, for teams that apply pgbaton's upgrades with their own migration tool."""
    current = schema_version()
    if not 0 <= from_version <= current:
        raise ConfigurationError(
            f"there is no schema version {from_version}: this pgbaton knows versions 0 "
            f"(nothing) to {current}"
        )
    if from_version == 0:
        return schema_sql(schema)
    if from_version == current:
        return f"-- pgbaton schema {schema!r}: version {current} is current, nothing to apply\n"
    parts = [f"-- pgbaton schema {schema!r}: upgrade from version {from_version} to {current}"]
    for migration in migrations()[from_version:]:
        parts += [
            f"-- migration {migration.version}: {migration.name}",
            migration.in_schema(schema).strip(),
            _in_schema(
                "INSERT INTO __schema__.schema_version (version, name) VALUES "
                f"({migration.version}, '{migration.name}');", schema,
            ),
        ]
    return "\n\n".join(parts) + "\n"


NOTIFY_SUFFIX = "_jobs"


def notify_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema's jobs (the insert trigger notifies it)."""
    return schema + NOTIFY_SUFFIX


ENDED_SUFFIX = "_ended"


def ended_channel(schema: str) -> str:
    """The channel on which an awaited job's end is announced, its id the payload (the
    jobs_status_changed trigger); App.wait listens on it."""
    return schema + ENDED_SUFFIX


CANCELLED_SUFFIX = "_cancelled"


def cancelled_channel(schema: str) -> str:
    """The channel on which a running job's cancel is announced, its id the payload
    (the jobs_status_changed trigger); workers listen on it beside notify_channel."""
    return schema + CANCELLED_SUFFIX


ECHO_INFIX = "_echo_"
# Random hex after ECHO_INFIX: with the longest schema name, the channel's 63 bytes.
ECHO_TOKEN_LENGTH = 6


def echo_channel(schema: str, token: str) -> str:
    """A worker's own channel for its echoes (worker/echo.py), which only its LISTEN
    session hears: `token`, ECHO_TOKEN_LENGTH hex digits drawn by the worker. Two
    workers that draw the same share a channel and ignore each other's echoes by their
    payloads."""
    if len(token) != ECHO_TOKEN_LENGTH or not all(c in "0123456789abcdef" for c in token):
        raise ValueError(f"an echo channel's token is {ECHO_TOKEN_LENGTH} hex digits, "
                         f"not {token!r}")
    return check_schema_name(schema) + ECHO_INFIX + token
