"""Where the DSN and the schema come from, how SQLAlchemy URLs and passwords are handled."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

import pgbaton
from pgbaton.dsn import merge_options, redact_dsn, resolve_dsn, resolve_schema


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch):
    for variable in ("PGBATON_DSN", "DATABASE_URL", "PGBATON_SCHEMA", "PGAPPNAME"):
        monkeypatch.delenv(variable, raising=False)


def _dbname(dsn: str) -> str:
    return conninfo_to_dict(dsn)["dbname"]


def test_dsn_sources_in_their_documented_order(monkeypatch):
    """The argument, then App(dsn=...), then PGBATON_DSN, then DATABASE_URL."""
    monkeypatch.setenv("DATABASE_URL", "postgresql:///from-database-url")
    assert _dbname(resolve_dsn(None)) == "from-database-url"
    monkeypatch.setenv("PGBATON_DSN", "postgresql:///from-pgbaton-dsn")
    assert _dbname(resolve_dsn(None)) == "from-pgbaton-dsn"
    assert _dbname(resolve_dsn(None, app_dsn="postgresql:///from-app")) == "from-app"
    assert _dbname(resolve_dsn("postgresql:///given", app_dsn="postgresql:///x")) == "given"


def test_no_dsn_anywhere_is_an_error_naming_every_source():
    """Nothing found is ConfigurationError, never a server of pgbaton's own."""
    with pytest.raises(pgbaton.ConfigurationError, match=r"--dsn.*PGBATON_DSN.*DATABASE_URL"):
        resolve_dsn(None)


def test_the_app_and_the_environment_agree_on_the_order(monkeypatch):
    """App(dsn=...) in code wins over PGBATON_DSN, for the library as for the worker."""
    monkeypatch.setenv("PGBATON_DSN", "postgresql:///from-environment")
    assert _dbname(pgbaton.App("postgresql:///from-code").dsn) == "from-code"
    assert _dbname(pgbaton.App().dsn) == "from-environment"


def test_schema_sources_in_their_documented_order(monkeypatch):
    """The argument, then App(schema=...), then PGBATON_SCHEMA, then "pgbaton"."""
    assert resolve_schema(None) == "pgbaton"
    monkeypatch.setenv("PGBATON_SCHEMA", "from_env")
    assert resolve_schema(None) == "from_env"
    assert pgbaton.App().schema == "from_env"
    assert resolve_schema(None, app_schema="from_app") == "from_app"
    assert pgbaton.App(schema="from_app").schema == "from_app"
    assert resolve_schema("given", app_schema="from_app") == "given"
    monkeypatch.setenv("PGBATON_SCHEMA", "Not-A-Name")
    with pytest.raises(pgbaton.ConfigurationError, match="schema name 'Not-A-Name'"):
        resolve_schema(None)


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2", "asyncpg", "psycopg_async"])
def test_sqlalchemy_urls_lose_their_driver(driver):
    """postgresql+DRIVER:// is the same server as postgresql://."""
    params = conninfo_to_dict(resolve_dsn(f"postgresql+{driver}://u:pw@db.example:6543/shop"))
    assert (params["host"], params["port"], params["dbname"], params["user"]) == (
        "db.example", "6543", "shop", "u"
    )


def test_application_name_is_the_roles_and_yields_to_the_dsns_own():
    """A role's name rides along as the fallback; a later resolve without one keeps it;
    the DSN's own application_name wins in libpq; without a role the DSN is as given."""
    assert resolve_dsn("postgresql://h/db") == "postgresql://h/db"
    role = resolve_dsn("host=h", application_name="pgbaton worker w1")
    assert conninfo_to_dict(resolve_dsn(role))["fallback_application_name"] == (
        "pgbaton worker w1"
    )
    again = resolve_dsn(role, application_name="pgbaton worker w2")  # a supervisor's child
    assert conninfo_to_dict(again)["fallback_application_name"] == "pgbaton worker w2"
    own = resolve_dsn("postgresql://h/db?application_name=shop-web", application_name="x")
    assert conninfo_to_dict(own)["application_name"] == "shop-web"


def test_dsn_options_survive_beside_pgbatons_own():
    """The DSN's `options` are kept, and come last so the user's setting wins."""
    dsn = "postgresql://h/db?options=-c%20statement_timeout%3D1234"
    assert merge_options(dsn, "-c plan_cache_mode=force_generic_plan") == (
        "-c plan_cache_mode=force_generic_plan -c statement_timeout=1234"
    )
    assert merge_options("host=h", "-c a=b") == "-c a=b"


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://u:s3cr3t@h/db",
        "postgres://u:s3cr3t@h:5432/db?sslmode=require",
        "postgresql+psycopg://u:s3cr3t@h/db",
        "postgresql://u:p@s3cr3t@h/db",                   # a raw '@' in the password
        "postgresql://u:s3cr3t@@h/db",
        "postgresql://u@h/db?sslmode=disable&password=s3cr3t",
        "postgresql://h/db?password=s3cr3t",
        "postgresql://u:s3%zzcr3t@h:notaport/db",        # malformed: libpq cannot parse it
        "host=h password=s3cr3t dbname=x",
        "host=h password = 's3cr3t with spaces' dbname=x",
        "host=h password=s3cr3t dbname",                 # malformed key=value
        "user=u PASSWORD=s3cr3t",
    ],
)
def test_passwords_are_hidden_in_every_form(dsn):
    """No spelling of a DSN shows any part of its password once redacted or resolved."""
    assert "s3cr3t" not in redact_dsn(dsn)
    try:
        shown = redact_dsn(resolve_dsn(dsn))
    except pgbaton.ConfigurationError as error:  # refused: the message must not leak it
        shown = str(error)
    assert "s3cr3t" not in shown and "\n" not in shown


def test_redaction_keeps_what_is_needed_to_find_the_server():
    """Host, port, database and user stay readable."""
    assert redact_dsn("postgresql://u:pw@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact_dsn("postgresql://u:p@w@h/db") == "postgresql://u:***@h/db"
    assert redact_dsn("host=h password=pw dbname=x") == "password=*** dbname=x host=h"


def test_a_raw_at_sign_in_the_password_reaches_the_right_host():
    """user:p@ss@host means host `host`, password `p@ss` (libpq would split at the first)."""
    params = conninfo_to_dict(resolve_dsn("postgresql://u:p@ss@db.example/shop"))
    assert (params["host"], params["password"]) == ("db.example", "p@ss")


def test_an_unparseable_dsn_is_one_line_naming_its_source(monkeypatch):
    """A DSN libpq cannot read is refused up front, saying where it came from."""
    monkeypatch.setenv("PGBATON_DSN", "host=h dbname")
    with pytest.raises(pgbaton.ConfigurationError, match="DSN from PGBATON_DSN"):
        resolve_dsn(None)
