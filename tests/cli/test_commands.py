"""The `pgbaton` command line, driven as a user drives it: subprocesses, real output."""

from __future__ import annotations

import json

import pytest

from tests.cli.cli_helpers import pgbaton


def test_operator_commands_round_trip(dsn, schema):
    """migrate, enqueue, jobs, show, stats, cancel, retry and prune work end to end."""
    s = ("--schema", schema)
    migrated = pgbaton("migrate", *s, dsn=dsn)
    assert migrated.returncode == 0, migrated.stderr
    assert "now at version" in migrated.stdout
    assert "already at version" in pgbaton("migrate", *s, dsn=dsn).stdout

    job = json.loads(pgbaton("enqueue", "send_email", "--args", '{"to": "a@b.c"}',
                             "--queue", "mail", "--json", *s, dsn=dsn).stdout)["id"]
    listed = json.loads(pgbaton("jobs", "--status", "pending", "--json", *s, dsn=dsn).stdout)
    assert [(j["id"], j["task"], j["args"]) for j in listed] == [
        (job, "send_email", {"to": "a@b.c"})
    ]
    shown = json.loads(pgbaton("show", str(job), "--json", *s, dsn=dsn).stdout)
    assert (shown["status"], shown["queue"]) == ("pending", "mail")
    stats = json.loads(pgbaton("stats", "--json", *s, dsn=dsn).stdout)
    assert [(q["queue"], q["pending"]) for q in stats] == [("mail", 1)]

    assert pgbaton("cancel", str(job), *s, dsn=dsn).returncode == 0
    again = pgbaton("cancel", str(job), *s, dsn=dsn)
    assert again.returncode == 1 and "not pending or running" in again.stderr
    assert pgbaton("retry", str(job), *s, dsn=dsn).returncode == 0
    shown = json.loads(pgbaton("show", str(job), "--json", *s, dsn=dsn).stdout)
    assert shown["status"] == "pending"
    assert "pruned 0 jobs" in pgbaton("prune", *s, dsn=dsn).stdout


def test_schema_sql_prints_ddl_a_team_can_apply(dsn, schema, db):
    """`pgbaton schema --sql` prints DDL that builds a schema pgbaton accepts as current."""
    ddl = pgbaton("schema", "--sql", "--schema", schema)
    assert ddl.returncode == 0
    db.execute(ddl.stdout)
    assert "already at version" in pgbaton("migrate", "--schema", schema, dsn=dsn).stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("no-such-command",), 2, "No such command"),
        (("enqueue", "t", "--args", "{not json"), 2, "not JSON"),
        (("enqueue", "t", "--args", "[1, 2]"), 2, "must be a JSON object"),
        (("stats", "--dsn", "postgresql://u:secret@127.0.0.1:1/x"), 1, "cannot connect"),
        (("stats", "--schema", "Bad-Name"), 1, "schema name"),
        (("worker", "nosuchmodule:app"), 2, "cannot import"),
    ],
)
def test_bad_input_gets_one_clear_line_and_an_exit_code(dsn, args, code, message):
    """Usage errors exit 2, failures exit 1, each with a message and no traceback."""
    result = pgbaton(*args, dsn=dsn)
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert "secret" not in result.stderr


def test_not_migrated_schema_says_what_to_run(dsn, schema):
    """A command against an unmigrated schema names `pgbaton migrate`."""
    result = pgbaton("stats", "--schema", schema, dsn=dsn)
    assert result.returncode == 1
    assert "pgbaton migrate" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_demo_passes_its_own_invariant_report(dsn):
    """`pgbaton demo` runs the whole story and every invariant in its SQL report holds."""
    result = pgbaton("demo", dsn=dsn, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("PASS") >= 8
    assert "FAIL" not in result.stdout
