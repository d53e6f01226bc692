"""The `pgbaton` command line, driven as a user drives it: subprocesses, real output."""

from __future__ import annotations

import importlib.metadata
import json

import pytest

from pgbaton import _sql
from tests.cli.cli_helpers import pgbaton, write_app
from tests.helpers import in_client_encoding, job_rows


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
    assert again.returncode == 1
    assert f"job {job} is cancelled: only a pending, running or waiting job" in again.stderr
    assert pgbaton("retry", str(job), *s, dsn=dsn).returncode == 0
    shown = json.loads(pgbaton("show", str(job), "--json", *s, dsn=dsn).stdout)
    assert shown["status"] == "pending"
    assert "pruned 0 jobs" in pgbaton("prune", *s, dsn=dsn).stdout


def test_prune_in_history_mode_moves_drops_then_deletes(queue, dsn, schema, db):
    """`pgbaton prune --retention-mode history` moves old done jobs to jobs_history,
    drops the partitions past --older-than, deletes the failed ones past it, and says
    how many of each; `show` still finds a moved job."""
    s = ("--schema", schema)
    ids = queue.enqueue_many([{"task": "t"} for _ in range(3)])
    failed = queue.enqueue("t", max_attempts=1)
    claims = queue.claim("w", limit=4)
    for claim in claims[:3]:
        assert queue.complete(claim)
    assert queue.fail(claims[3], "boom")
    db.execute("UPDATE jobs SET finished_at = now() - interval '2 hours' WHERE id = %s",
               (ids[0],))
    db.execute("UPDATE jobs SET finished_at = now() - interval '3 days' WHERE id <> %s",
               (ids[0],))
    done = pgbaton("prune", "--retention-mode", "history", "--history-partition", "3600",
                   "--older-than", "86400", *s, dsn=dsn)
    assert done.returncode == 0, done.stderr
    assert "moved 3 jobs to jobs_history; dropped 1 partitions" in done.stdout
    assert "pruned 1 jobs" in done.stdout
    assert job_rows(db, "id") == []
    shown = json.loads(pgbaton("show", str(ids[0]), "--json", *s, dsn=dsn).stdout)
    assert shown["status"] == "done"
    assert pgbaton("show", str(failed), *s, dsn=dsn).returncode == 1
    # The doctor shows the history's size beside the jobs table's.
    report = json.loads(pgbaton("doctor", "--json", *s, dsn=dsn).stdout)
    [vacuum] = [f for f in report["findings"] if f["name"] == "jobs_table_vacuum"]
    assert vacuum["data"]["history_partitions"] == 1
    assert any(line.startswith("jobs_history (the history retention mode): 1 partitions")
               for line in vacuum["evidence"])
    bad = pgbaton("prune", "--retention-mode", "history", "--history-partition", "90",
                  *s, dsn=dsn)
    assert bad.returncode == 1 and "whole number of minutes" in bad.stderr


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
        (("worker", "json:ap"), 2, "'json' has no attribute 'ap'"),
        (("worker", "json:dumps"), 2, "is not a pgbaton.App (found function)"),
    ],
)
def test_bad_input_gets_one_clear_line_and_an_exit_code(dsn, args, code, message):
    """Usage errors exit 2, failures exit 1, each with a message and no traceback."""
    result = pgbaton(*args, dsn=dsn)
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert "secret" not in result.stderr


def test_migrate_works_whatever_the_dsns_client_encoding(dsn, schema):
    """`pgbaton migrate` with a DSN that sets client_encoding=SQL_ASCII: it raised
    UnicodeEncodeError (a migration's comment held a micro sign)."""
    ascii_dsn = in_client_encoding(dsn, "SQL_ASCII")
    migrated = pgbaton("migrate", "--schema", schema, dsn=ascii_dsn)
    assert migrated.returncode == 0, migrated.stderr
    assert "now at version" in migrated.stdout


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
    assert result.stdout.count("PASS") == 7
    assert "FAIL" not in result.stdout
    assert "measured, not judged: 2040 orders in " in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("no-such-command",), ("stats", "--no-such-option"), ("worker",),
        ("show", "not-a-number"), ("schema",), ("schema", "--sql", "--from", "-1"),
        ("worker", "no_colon_here"), ("jobs", "--limit"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(args):
    """A usage error is one line naming the problem and where help is, exit 2."""
    result = pgbaton(*args)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("pgbaton: error: ") and "--help" in result.stderr


def test_version_is_the_installed_packages():
    """`pgbaton --version` prints the version pip knows."""
    result = pgbaton("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"pgbaton {importlib.metadata.version('pgbaton')}"


def test_enqueue_with_the_app_applies_the_tasks_settings(tmp_path, dsn, schema, db):
    """With --app, the task's queue, max attempts and key function apply; a given option
    still wins."""
    assert pgbaton("migrate", "--schema", schema, dsn=dsn).returncode == 0
    spec = write_app(tmp_path, "shop_jobs", schema=schema)
    args = ("--args", '{"customer_id": 42, "amount": 5}', "--app", spec)
    first = pgbaton("enqueue", "charge", *args, dsn=dsn, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "not checked" not in first.stderr
    second = pgbaton("enqueue", "charge", *args, "--queue", "urgent", dsn=dsn, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert job_rows(db, "task", "queue", "max_attempts", "key") == [
        ("charge", "billing", 3, "42"), ("charge", "urgent", 3, "42"),
    ]


@pytest.mark.parametrize(
    "case",
    [
        ("chrage", "{}", 2, "has no task 'chrage' (it has: charge, noop)"),
        ("charge", '{"customerid": 1, "amount": 5}', 1,
         "missing 'customer_id'; unexpected 'customerid'"),
        ("noop", '{"x": 1}', 1, "unexpected 'x' (its handler takes no arguments)"),
    ],
)
def test_enqueue_with_the_app_refuses_what_the_worker_would(tmp_path, dsn, schema, db, case):
    """An unknown task or args its handler cannot take: one line, nothing written."""
    task, args, code, message = case
    assert pgbaton("migrate", "--schema", schema, dsn=dsn).returncode == 0
    spec = write_app(tmp_path, "shop_jobs", schema=schema)
    result = pgbaton("enqueue", task, "--args", args, "--app", spec, dsn=dsn, cwd=tmp_path)
    assert result.returncode == code
    assert message in result.stderr and len(result.stderr.splitlines()) == 1
    assert job_rows(db, "id") == []


def test_enqueue_without_the_app_says_it_cannot_check(dsn, schema, db):
    """Without --app the job is written as given, with a note that nothing was checked."""
    assert pgbaton("migrate", "--schema", schema, dsn=dsn).returncode == 0
    result = pgbaton("enqueue", "anything", "--schema", schema, dsn=dsn)
    assert result.returncode == 0
    assert "not checked" in result.stderr
    assert job_rows(db, "task", "queue", "max_attempts") == [("anything", "default", 5)]


def test_schema_sql_from_a_version_upgrades_that_version(dsn, schema, db):
    """`schema --sql --from 1` applied to a version-1 schema makes it current."""
    db.execute(_sql.queries(schema)["schema_create"])
    db.execute(_sql.migrations()[0].in_schema(schema))
    db.execute(_sql.queries(schema)["schema_version_create"])
    db.execute(_sql.queries(schema)["schema_version_record"], {"version": 1, "name": "initial"})
    upgrade = pgbaton("schema", "--sql", "--from", "1", "--schema", schema)
    assert upgrade.returncode == 0
    # Only what changed since version 1: later versions add tables, never the jobs table.
    assert f'CREATE TABLE "{schema}".jobs (' not in upgrade.stdout
    assert "ALTER TABLE" in upgrade.stdout
    db.execute(upgrade.stdout)
    assert "already at version" in pgbaton("migrate", "--schema", schema, dsn=dsn).stdout
    current = pgbaton("schema", "--sql", "--from", str(_sql.schema_version()))
    assert "nothing to apply" in current.stdout
    beyond = pgbaton("schema", "--sql", "--from", str(_sql.schema_version() + 1))
    assert beyond.returncode == 1 and "no schema version" in beyond.stderr


def test_retry_and_cancel_say_whether_the_job_exists_or_which_state_it_is_in(
        queue, dsn, schema):
    """A refused retry or cancel says what it met: no such job, or the job's state and
    the states the action needs; both exit 1 and change nothing."""
    s = ("--schema", schema)
    done = queue.enqueue("t")
    [claim] = queue.claim("w", limit=1)
    assert queue.complete(claim)
    retried = pgbaton("retry", str(done), *s, dsn=dsn)
    assert retried.returncode == 1
    assert f"job {done} is done: only a failed or cancelled job can be retried" in (
        retried.stderr)
    missing = pgbaton("retry", "9999999", *s, dsn=dsn)
    assert missing.returncode == 1
    assert f"no job 9999999 in schema '{schema}'" in missing.stderr
    cancelled = pgbaton("cancel", "9999999", *s, dsn=dsn)
    assert cancelled.returncode == 1 and "no job 9999999" in cancelled.stderr
    assert queue.get(done).status == "done"


def test_cancelling_a_running_job_says_its_handler_is_told_at_the_next_heartbeat(
        queue, dsn, schema):
    """The row is cancelled at once, but its handler runs on until its worker's next
    heartbeat: the command says so, naming the worker."""
    job = queue.enqueue("t")
    queue.claim("worker-7", limit=1)
    result = pgbaton("cancel", str(job), "--schema", schema, dsn=dsn)
    assert result.returncode == 0, result.stderr
    assert f"job {job} cancelled; its handler on worker-7 is told to stop" in result.stdout
    assert queue.get(job).status == "cancelled"


def test_jobs_filters_by_key_text_and_time(queue, dsn, schema, db):
    """`pgbaton jobs` takes the dashboard's filters: --key, --text (args or errors),
    --since and --until, and refuses a time it cannot read in one line."""
    s = ("--schema", schema)
    keyed = queue.enqueue("t", {"customer": "ada"}, key="customer:1")
    other = queue.enqueue("t", {"customer": "grace"})
    old = queue.enqueue("t", {"customer": "old"})
    db.execute("UPDATE jobs SET created_at = '2020-01-01T00:00:00Z' WHERE id = %s", (old,))

    def listed(*options: str) -> list[int]:
        result = pgbaton("jobs", "--json", *options, *s, dsn=dsn)
        assert result.returncode == 0, result.stderr
        return [job["id"] for job in json.loads(result.stdout)]

    assert listed("--key", "customer:1") == [keyed]
    assert listed("--text", "GRACE") == [other]
    assert listed("--since", "2021-01-01") == [other, keyed]
    assert listed("--until", "2021-01-01") == [old]
    bad = pgbaton("jobs", "--since", "yesterday-ish", *s, dsn=dsn)
    assert bad.returncode != 0 and "since" in bad.stderr


def test_one_set_of_states_scheduled_and_paused_in_jobs_and_stats(queue, dsn, schema):
    """A job due later is `scheduled` in `jobs --status scheduled`, in Job.state and
    in `stats`; `pending` means due; a paused queue says paused beside its counts."""
    s = ("--schema", schema)
    due = queue.enqueue("t", queue="mail")
    later = queue.enqueue("t", queue="mail", delay=3600)
    queue.pause("mail")
    assert (queue.get(due).state, queue.get(later).state) == ("pending", "scheduled")
    for state, wanted in (("scheduled", [later]), ("pending", [due])):
        listed = json.loads(pgbaton("jobs", "--status", state, "--json", *s, dsn=dsn).stdout)
        assert [(j["id"], j["state"]) for j in listed] == [(i, state) for i in wanted]
    [mail] = json.loads(pgbaton("stats", "--json", *s, dsn=dsn).stdout)
    assert (mail["pending"], mail["scheduled"], mail["paused"]) == (1, 1, True)
    table = pgbaton("stats", *s, dsn=dsn).stdout
    row = next(line for line in table.splitlines() if "mail" in line)
    assert "paused" in row
    unknown = pgbaton("jobs", "--status", "sheduled", *s, dsn=dsn)
    assert unknown.returncode != 0 and "scheduled" in unknown.stderr
