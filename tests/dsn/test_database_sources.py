"""Where the command line and the library find the database and the schema: one order
for every command, no silent server of pgbaton's own, passwords never printed."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgbaton
from tests.cli.cli_helpers import clean_env, free_port, write_app
from tests.cli.cli_helpers import pgbaton as run


def _sqlalchemy_url(dsn: str) -> str:
    """The test server's DSN as SQLAlchemy writes it (a socket folder as ?host=)."""
    params = conninfo_to_dict(dsn)
    user = params.get("user", "postgres")
    auth = f"{user}:{params['password']}" if params.get("password") else user
    host, port = params.get("host", "127.0.0.1"), params.get("port", "5432")
    database = params.get("dbname", "postgres")
    if host.startswith("/"):
        return f"postgresql+psycopg://{auth}@/{database}?host={host}&port={port}"
    return f"postgresql+psycopg://{auth}@{host}:{port}/{database}"


def _unreachable(dsn: str) -> str:
    """The same DSN on a port where nothing listens."""
    return make_conninfo(dsn, host="127.0.0.1", port=str(free_port()))


def test_no_database_anywhere_is_refused_by_every_command(tmp_path):
    """Without --dsn, PGBATON_DSN or DATABASE_URL, commands and the worker stop with one
    line naming the ways to give one; none starts a server of its own."""
    spec = write_app(tmp_path, "no_dsn_app")
    for args in (("stats",), ("migrate",), ("worker", spec, "--connect-timeout", "0")):
        result = run(*args, cwd=tmp_path)
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr.startswith("pgbaton: error: no database given: pass --dsn")
        assert "--embedded" in result.stderr and len(result.stderr.splitlines()) == 1
        assert "embedded PostgreSQL" not in result.stderr


def test_the_apps_dsn_wins_over_the_environment_for_the_worker(tmp_path, dsn, schema):
    """App(dsn) in the module is where the worker goes, even with PGBATON_DSN set:
    a web process and its worker read the same line of code."""
    elsewhere = _unreachable(dsn)
    spec = write_app(tmp_path, "app_with_dsn", dsn=elsewhere, schema=schema)
    result = run("worker", spec, "--connect-timeout", "0", dsn=dsn, cwd=tmp_path)
    port = conninfo_to_dict(elsewhere)["port"]
    assert result.returncode == 1
    assert f"port={port}" in result.stderr or f":{port}" in result.stderr, result.stderr


def test_dsn_on_the_command_line_wins_over_the_apps(tmp_path, dsn, schema):
    """--dsn beats App(dsn): enqueue --app writes to the --dsn server."""
    assert run("migrate", "--schema", schema, dsn=dsn).returncode == 0
    spec = write_app(tmp_path, "app_elsewhere", dsn=_unreachable(dsn), schema=schema)
    result = run("enqueue", "noop", "--app", spec, "--dsn", dsn, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert pgbaton.Queue(dsn, schema=schema).get(json.loads(result.stdout)["id"]) is not None


def test_schema_from_pgbaton_schema(dsn, schema, db):
    """PGBATON_SCHEMA names the schema for every command that is not given --schema."""
    env = clean_env(dsn, PGBATON_SCHEMA=schema)
    assert f"schema {schema!r}: applied" in run("migrate", env=env).stdout
    assert run("enqueue", "t", env=env).returncode == 0
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1
    refused = run("stats", env=clean_env(dsn, PGBATON_SCHEMA="Not-A-Schema"))
    assert refused.returncode == 1 and "schema name 'Not-A-Schema'" in refused.stderr


def test_a_sqlalchemy_url_is_accepted(dsn, schema):
    """postgresql+psycopg://... from a web framework's settings works as it is."""
    result = run("migrate", "--schema", schema, "--dsn", _sqlalchemy_url(dsn))
    assert result.returncode == 0, result.stderr


def test_dsn_and_embedded_together_are_a_usage_error():
    """--embedded with --dsn names two servers: exit 2, one line."""
    result = run("stats", "--embedded", "--dsn", "postgresql:///x")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert "--dsn and --embedded" in result.stderr


@pytest.mark.parametrize(
    "secret_dsn",
    [
        "postgresql://u:s3cr3t@127.0.0.1:{port}/x",
        "postgresql://u:p@s3cr3t@127.0.0.1:{port}/x",
        "postgresql://u@127.0.0.1:{port}/x?password=s3cr3t",
        "host=127.0.0.1 port={port} user=u password=s3cr3t",
        "postgresql://u:s3%zzcr3t@127.0.0.1:{port}/x",
    ],
)
def test_no_error_shows_a_password(secret_dsn):
    """Every spelling of a password stays out of the error line."""
    result = run("stats", "--dsn", secret_dsn.format(port=free_port()))
    assert result.returncode == 1
    assert "s3cr3t" not in result.stderr and len(result.stderr.splitlines()) == 1


def test_dsn_options_reach_pooled_connections(dsn, schema, queue):
    """`options=-c ...` in the DSN applies on the pool's connections too (a read-only
    default makes the enqueue fail, which it did not when the pool dropped them)."""
    read_only = make_conninfo(dsn, options="-c default_transaction_read_only=on")
    with pgbaton.Queue(read_only, schema=schema) as q, pytest.raises(
        psycopg.errors.ReadOnlySqlTransaction
    ):
        q.enqueue("t", {})


def _application_names(db) -> set[str]:
    return {r["application_name"] for r in db.execute(
        "SELECT application_name FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
        " AND datname = current_database()"
    )}


def test_an_apps_connections_say_who_they_are(dsn, schema, queue, db):
    """pg_stat_activity shows `pgbaton` for an App's connections, unless the DSN names
    its own application."""
    app = pgbaton.App(dsn, schema=schema)
    app.queue.enqueue("t", {})
    assert "pgbaton" in _application_names(db)
    app.queue.close()
    named = pgbaton.App(make_conninfo(dsn, application_name="shop-web"), schema=schema)
    named.queue.enqueue("t", {})
    assert "shop-web" in _application_names(db)
    named.queue.close()


def test_commands_say_who_they_are(dsn, schema, queue, db):
    """A command's connection is named after it while it runs: `pgbaton migrate`."""
    with psycopg.connect(dsn, autocommit=True) as blocker:
        # migrate waits on its advisory lock (migration_lock) while this session holds it
        blocker.execute("SELECT pg_advisory_lock(hashtext('pgbaton.migrate.' || %s))", (schema,))
        names: set[str] = set()
        with subprocess.Popen(
            [sys.executable, "-m", "pgbaton", "migrate", "--schema", schema],
            env=clean_env(dsn), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ) as migrating:
            deadline = time.monotonic() + 60
            while "pgbaton migrate" not in names and time.monotonic() < deadline:
                names = _application_names(db)
                time.sleep(0.05)
            blocker.execute("SELECT pg_advisory_unlock_all()")
            assert migrating.wait(timeout=60) == 0
    assert "pgbaton migrate" in names


def test_the_apps_schema_wins_over_pgbaton_schema(tmp_path, dsn, schema, other_schema, db):
    """App(schema=...) in the module beats PGBATON_SCHEMA; --schema beats both."""
    for name in (schema, other_schema):
        assert run("migrate", "--schema", name, dsn=dsn).returncode == 0
    spec = write_app(tmp_path, "app_with_schema", schema=schema)
    env = clean_env(dsn, PGBATON_SCHEMA=other_schema)
    assert run("enqueue", "noop", "--app", spec, env=env, cwd=tmp_path).returncode == 0
    typed = run("enqueue", "noop", "--app", spec, "--schema", other_schema, env=env,
                cwd=tmp_path)
    assert typed.returncode == 0, typed.stderr
    counts = {
        name: db.execute(f'SELECT count(*) AS n FROM "{name}".jobs').fetchone()["n"]
        for name in (schema, other_schema)
    }
    assert counts == {schema: 1, other_schema: 1}


def test_embedded_runs_only_when_asked_for(server_folder, schema):
    """--embedded starts pgbaton's own PostgreSQL (here in a folder of the test's) and
    says so; the same command without it refuses."""
    env = clean_env(None, PGBATON_EMBEDDED_DIR=str(server_folder / "pg"))
    result = run("migrate", "--embedded", "--schema", schema, env=env, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "using the embedded PostgreSQL 18" in result.stderr
    assert "now at version" in result.stdout
    assert run("migrate", "--schema", schema, env=env).returncode == 1


def test_connection_options_before_the_command(tmp_path, dsn, schema, queue):
    """`pgbaton --dsn URL --schema S jobs` is `pgbaton jobs --dsn URL --schema S`; given
    in both places the one after the command wins; a command without the option says so;
    the worker counts them as typed (they beat the App's own DSN and schema)."""
    job = queue.enqueue("t")
    listed = run("--dsn", dsn, "--schema", schema, "jobs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [j["id"] for j in json.loads(listed.stdout)] == [job]
    after_wins = run("--dsn", _unreachable(dsn), "--schema", "elsewhere",
                     "jobs", "--json", "--dsn", dsn, "--schema", schema)
    assert after_wins.returncode == 0, after_wins.stderr
    assert [j["id"] for j in json.loads(after_wins.stdout)] == [job]
    nested = run("--dsn", dsn, "--schema", schema, "queue", "show", "--json")
    assert nested.returncode == 0, nested.stderr
    refused = run("--embedded", "demo")
    assert refused.returncode == 2 and "demo takes no --embedded" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1
    spec = write_app(tmp_path, "app_far_away", dsn=_unreachable(dsn), schema="elsewhere")
    enqueued = run("--dsn", dsn, "--schema", schema, "enqueue", "noop", "--app", spec,
                   "--json", cwd=tmp_path)
    assert enqueued.returncode == 0, enqueued.stderr
    assert queue.get(json.loads(enqueued.stdout)["id"]) is not None
    assert "--dsn, --schema and --embedded go before the command" in run("--help").stdout


def test_an_unreachable_database_is_one_line_and_exit_1_for_every_command(dsn):
    """Every command that reaches the database says it cannot, in one error line naming
    where, and exits 1: no traceback (the demo's cleanup once buried it under one)."""
    gone = f"{_unreachable(dsn)} connect_timeout=2"
    for args in (("cancel", "5"), ("doctor",), ("enqueue", "t"), ("jobs",), ("migrate",),
                 ("prune",), ("retry", "5"), ("show", "5"), ("stats",), ("queue", "show"),
                 ("queue", "pause", "q"), ("queue", "resume", "q"),
                 ("queue", "limit", "q", "--concurrency", "2"), ("lab",), ("demo",)):
        result = run("--dsn", gone, *args)
        errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
        assert result.returncode == 1, (args, result.stderr[-2000:])
        assert "Traceback" not in result.stderr, (args, result.stderr[-2000:])
        assert len(errors) == 1 and errors[0].startswith(
            "pgbaton: error: cannot connect to PostgreSQL at"), (args, result.stderr)
