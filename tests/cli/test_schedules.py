"""`pgbaton schedule`, driven as an operator drives it: subprocesses, real output, one
clear line and exit 1 for each bad input, and nothing written then."""

from __future__ import annotations

import json

import pytest

import pgbaton
from tests.cli.cli_helpers import pgbaton as run
from tests.cli.cli_helpers import write_app


def rows(db) -> list[dict]:
    return db.execute("SELECT * FROM schedules ORDER BY name").fetchall()


def test_add_list_update_pause_resume_run_now_remove(queue: pgbaton.Queue, dsn, schema,
                                                      db, tmp_path):
    s = ("--schema", schema)
    spec = write_app(tmp_path, "schedule_app", dsn, schema)
    added = run("schedule", "add", "billing", "--cron", "30 2 * * *", "--task", "charge",
                "--args", '{"customer_id": 7, "amount": 5}', "--timezone", "Europe/Berlin",
                "--catch-up", "latest", "--app", spec, *s, dsn=dsn, cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    assert "added schedule 'billing'" in added.stdout and "+0" in added.stdout
    (row,) = rows(db)
    assert (row["timezone"], row["catch_up"], row["updated_by"][:4]) == (
        "Europe/Berlin", "latest", "cli:")
    listed = json.loads(run("schedule", "list", "--json", *s, dsn=dsn).stdout)
    assert [(r["name"], r["state"], len(r["next_fires"])) for r in listed] == [
        ("billing", "active", 5)]
    assert run("schedule", "update", "billing", "--cron", "0 3 * * *", *s,
               dsn=dsn).returncode == 0
    assert run("schedule", "pause", "billing", *s, dsn=dsn).returncode == 0
    assert "paused" in run("schedule", "list", *s, dsn=dsn).stdout
    assert run("schedule", "resume", "billing", *s, dsn=dsn).returncode == 0
    job_id = int(run("schedule", "run-now", "billing", "--app", spec, *s, dsn=dsn,
                     cwd=tmp_path).stdout)
    job = db.execute("SELECT queue, max_attempts FROM jobs WHERE id = %s",
                     (job_id,)).fetchone()
    assert (job["queue"], job["max_attempts"]) == ("billing", 3)  # the task's own
    assert rows(db)[0]["cron"] == "0 3 * * *" and rows(db)[0]["last_job_id"] == job_id
    assert run("schedule", "remove", "billing", *s, dsn=dsn).returncode == 0
    assert rows(db) == []


@pytest.mark.parametrize(("arguments", "message"), [
    (["--cron", "0 0 30 2 *", "--task", "noop"], "never fires"),
    (["--cron", "* * * * *", "--task", "noop", "--timezone", "Mars/Base"],
     "unknown time zone 'Mars/Base'"),
    (["--cron", "* * * * *", "--task", "nope"], "unknown task 'nope'"),
    (["--cron", "* * * * *", "--task", "charge", "--args", '{"customer_id": 1}'],
     "missing 'amount'"),
    (["--cron", "* * * * *", "--task", "noop", "--args", "[1"], "--args is not JSON"),
    (["--cron", "every day", "--task", "noop"], "not a cron expression"),
])
def test_bad_input_is_one_line_exit_1_and_nothing_written(queue, dsn, schema, db, tmp_path,
                                                          *, arguments, message):
    spec = write_app(tmp_path, "schedule_app", dsn, schema)
    result = run("schedule", "add", "x", *arguments, "--app", spec, "--schema", schema,
                 dsn=dsn, cwd=tmp_path)
    assert result.returncode == 1, result
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert rows(db) == []


def test_without_an_app_the_task_needs_new_and_a_name_is_taken_once(queue, dsn, schema, db):
    s = ("--schema", schema)
    refused = run("schedule", "add", "a", "--cron", "* * * * *", "--task", "later", *s,
                  dsn=dsn)
    assert refused.returncode == 1 and "pass new=True (--new)" in refused.stderr
    assert rows(db) == []
    assert run("schedule", "add", "a", "--cron", "* * * * *", "--task", "later", "--new",
               *s, dsn=dsn).returncode == 0
    taken = run("schedule", "add", "a", "--cron", "* * * * *", "--task", "later", *s,
                dsn=dsn)
    assert taken.returncode == 1 and "exists already" in taken.stderr
    gone = run("schedule", "pause", "b", *s, dsn=dsn)
    assert gone.returncode == 1 and "no schedule named 'b' (schedules: 'a')" in gone.stderr


def test_list_shows_a_row_with_a_zone_this_machine_lacks_marked_among_the_rest(
        queue: pgbaton.Queue, dsn, schema, db):
    """A schedule written by a host with newer tz data does not fail the whole list: it
    is listed, marked in its next-fire cell, with one line on stderr saying what is
    wrong and how to fix it; the exit is 0 unless --strict asks for 1."""
    s = ("--schema", schema)
    queue.add_schedule("hourly", "0 * * * *", "sync", new=True)
    queue.add_schedule("martian", "0 * * * *", "sync", new=True)
    db.execute("UPDATE schedules SET timezone = 'Mars/Olympus' WHERE name = 'martian'")
    listed = run("schedule", "list", *s, dsn=dsn)
    assert listed.returncode == 0, listed.stderr
    lines = {line.split("│")[1].strip(): line for line in listed.stdout.splitlines()
             if line.count("│") > 2 and ("hourly" in line or "martian" in line)}
    assert "! unreadable here (below)" in lines["martian"]
    assert ":00:00+00:00" in lines["hourly"]
    assert listed.stderr.strip().splitlines() == [
        "schedule 'martian' cannot be read on this machine: unknown time zone "
        "'Mars/Olympus': give an IANA zone name such as 'UTC' or 'Europe/Berlin'; its "
        "fire times cannot be computed here, and a leader on such a host skips it. Fix: "
        "pgbaton schedule update martian --timezone ZONE, or install the zone's tz data "
        "here (pip install tzdata)"]
    as_json = run("schedule", "list", "--json", *s, dsn=dsn)
    assert as_json.returncode == 0
    by_name = {r["name"]: r for r in json.loads(as_json.stdout)}
    assert by_name["martian"]["next_fires"] == [] and "Mars/Olympus" in by_name[
        "martian"]["problem"]
    assert len(by_name["hourly"]["next_fires"]) == 5 and by_name["hourly"]["problem"] is None
    strict = run("schedule", "list", "--strict", *s, dsn=dsn)
    assert strict.returncode == 1 and "martian" in strict.stdout and "hourly" in strict.stdout
    db.execute("UPDATE schedules SET timezone = 'UTC' WHERE name = 'martian'")
    assert run("schedule", "list", "--strict", *s, dsn=dsn).returncode == 0
