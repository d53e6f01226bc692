"""Where pgbaton finds its database and schema, and how a DSN is shown without its secret.

One order of sources serves the library, the worker and every command
(docs/reference/commands.md, "Where pgbaton finds its database"; and
docs/reference/environment.md):

    DSN:    the explicit argument (--dsn, Queue(dsn)) > App(dsn=...) > PGBATON_DSN > DATABASE_URL
    schema: the explicit argument (--schema)        > App(schema=...) > PGBATON_SCHEMA > "pgbaton"

Nothing is ever guessed: with no DSN anywhere the answer is ConfigurationError, never a
server of pgbaton's own (that takes `--embedded`).
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from . import _sql
from .errors import ConfigurationError

DSN_VARIABLES = ("PGBATON_DSN", "DATABASE_URL")
SCHEMA_VARIABLE = "PGBATON_SCHEMA"
DEFAULT_SCHEMA = "pgbaton"
DEFAULT_APPLICATION_NAME = "pgbaton"

# The client encoding of every connection pgbaton opens itself (libpq's keyword, which
# wins over the DSN's client_encoding, PGCLIENTENCODING and `options=-c
# client_encoding=...` alike): under SQL_ASCII psycopg reads text columns as bytes, and
# jsonb is read as UTF-8 whatever the encoding. PostgreSQL converts to and from the
# database's encoding; a caller's own connection (conn=) keeps the encoding it has.
CLIENT_ENCODING = "UTF8"

# postgresql+psycopg://, postgres+asyncpg://: SQLAlchemy names its driver after a '+'.
_SQLALCHEMY_SCHEME = re.compile(r"^(postgres(?:ql)?)\+[\w.-]*://", re.IGNORECASE)
_URI_SCHEME = re.compile(r"^[a-z][\w+.-]*://", re.IGNORECASE)
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)
_KEYWORD_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)", re.IGNORECASE)
_QUOTED = re.compile(r'"[^"]*"')
REDACTED = "***"


def resolve_dsn(
    dsn: str | None,
    *,
    app_dsn: str | None = None,
    application_name: str | None = None,
) -> str:
    """The DSN to connect with, from the first source that gives one (module docstring).

    SQLAlchemy's driver suffix is dropped, and a DSN libpq cannot parse is refused with a
    one-line error that does not echo its password; otherwise the DSN is returned as
    given. With `application_name` (the role shown in pg_stat_activity: "pgbaton stats",
    "pgbaton worker <id>") the DSN carries it as libpq's fallback_application_name, so
    the DSN's own application_name still wins.
    """
    for source, value in _dsn_sources(dsn, app_dsn):
        if value:
            chosen = normalize_dsn(value, source)
            if application_name is None:
                return chosen
            return with_application_name(chosen, application_name)
    raise ConfigurationError(
        "no database given: pass --dsn (or dsn=...), or set PGBATON_DSN or DATABASE_URL"
    )


def _dsn_sources(dsn: str | None, app_dsn: str | None) -> list[tuple[str, str | None]]:
    return [
        ("the given DSN", dsn),
        ("App(dsn=...)", app_dsn),
        *((variable, os.environ.get(variable)) for variable in DSN_VARIABLES),
    ]


def resolve_schema(schema: str | None, *, app_schema: str | None = None) -> str:
    """The schema from the first source that gives one (module docstring), checked."""
    chosen = schema or app_schema or os.environ.get(SCHEMA_VARIABLE) or DEFAULT_SCHEMA
    return _sql.check_schema_name(chosen)


def normalize_dsn(dsn: str, source: str = "the given DSN") -> str:
    """The DSN as libpq takes it: SQLAlchemy's `+driver` dropped, and checked to parse."""
    text = _encode_at_in_password(_SQLALCHEMY_SCHEME.sub(r"\1://", dsn.strip()))
    try:
        conninfo_to_dict(text)
    except psycopg.ProgrammingError as error:
        raise ConfigurationError(
            f"the DSN from {source} ({redact_dsn(text)}) is not a PostgreSQL connection "
            f"string: {_without_secrets(str(error), text)}"
        ) from None
    return text


def _encode_at_in_password(dsn: str) -> str:
    """`user:p@ss@host` as libpq reads it, `p%40ss`: libpq splits at the first '@' and
    would take `ss@host` for the host, but only the last '@' can end the user part."""
    scheme = _URI_SCHEME.match(dsn)
    if not scheme:
        return dsn
    rest = dsn[scheme.end():]
    at = rest.rfind("@")
    userinfo = rest[:at]
    if at < 0 or "@" not in userinfo or "/" in userinfo or "?" in userinfo:
        return dsn
    return scheme.group(0) + userinfo.replace("@", "%40") + rest[at:]


def with_application_name(dsn: str, name: str | None) -> str:
    """The DSN with `name` as libpq's fallback_application_name, which the DSN's own
    application_name (or PGAPPNAME) still overrides. With no name, a fallback already
    set is kept, else "pgbaton"."""
    if name is None:
        if "fallback_application_name" in conninfo_to_dict(dsn):
            return dsn
        name = DEFAULT_APPLICATION_NAME
    if _URI_SCHEME.match(dsn):  # stays a URL, so that messages show it as it was given
        return _with_uri_parameter(dsn, "fallback_application_name", name)
    return make_conninfo(dsn, fallback_application_name=name)


def _with_uri_parameter(uri: str, name: str, value: str | None) -> str:
    """The URI with its query parameter `name` set to value (removed when None)."""
    base, _, query = uri.partition("?")
    kept = [p for p in query.split("&") if p and p.split("=", 1)[0] != name]
    if value is not None:
        kept.append(f"{name}={quote(value, safe='')}")
    return f"{base}?{'&'.join(kept)}" if kept else base


def merge_options(dsn: str, options: str) -> str:
    """libpq `options` for a connection that needs its own `-c` settings besides the DSN's
    (a keyword argument would replace the DSN's, dropping say its statement_timeout).
    The DSN's come last, so a setting the user chose wins over pgbaton's default."""
    own = conninfo_to_dict(dsn).get("options")
    return f"{options} {own}" if own else options


def redact_dsn(dsn: str) -> str:
    """The DSN with every password hidden, fit for an error message or a header.

    Covers `user:password@` (a password holding '@' too), `?password=` and
    `password=...` in every spelling, whether or not libpq can parse the rest. The
    fallback_application_name that resolve_dsn adds is left out.
    """
    text = _SQLALCHEMY_SCHEME.sub(r"\1://", str(dsn).strip())
    scheme = _URI_SCHEME.match(text)
    if scheme:
        rest = text[scheme.end():]
        at = rest.rfind("@")  # a raw '@' in the password: the host follows the last one
        if at >= 0 and ":" in rest[:at]:
            user = rest[:at].split(":", 1)[0]
            rest = f"{user}:{REDACTED}{rest[at:]}"
        shown = scheme.group(0) + _QUERY_PASSWORD.sub(rf"\g<1>{REDACTED}", rest)
        return _with_uri_parameter(shown, "fallback_application_name", None)
    try:
        params = conninfo_to_dict(text)
    except psycopg.ProgrammingError:
        return _KEYWORD_PASSWORD.sub(rf"\g<1>{REDACTED}", text)
    if "password" in params:
        params["password"] = REDACTED
    params.pop("fallback_application_name", None)  # pgbaton's own addition: noise here
    return make_conninfo("", **params)


def _without_secrets(message: str, dsn: str) -> str:
    """libpq's complaint with every quoted fragment that is not in the redacted DSN
    replaced: libpq quotes the part it could not parse, which may be the password."""
    shown = redact_dsn(dsn)
    return _QUOTED.sub(
        lambda match: match.group(0) if match.group(0)[1:-1] in shown else '"..."',
        " ".join(message.split()),
    )
