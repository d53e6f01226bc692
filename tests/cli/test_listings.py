"""What `stats`, `jobs` and `show` print: job data as data, whole on a pipe, durations
that read as durations."""

from __future__ import annotations

import re

import pytest

import pgbaton as pgbaton_module
from tests.cli.cli_helpers import pgbaton

HOSTILE_ERROR = "expected [/] separator [link=https://evil.example]click[/link] \x1b[2J"
HOSTILE_TASK = "[bold red]task[/bold red]"
HOSTILE_QUEUE = "q\x1b]8;;https://evil.example\x1b\\x"


@pytest.fixture
def failed_hostile_job(queue):
    """A job whose task and queue names and whose error would be markup or terminal
    escape sequences if printed as they are."""
    job_id = queue.enqueue(HOSTILE_TASK, {"note": "[red]x[/red]"}, queue=HOSTILE_QUEUE,
                           max_attempts=1)
    [claim] = queue.claim("w1", limit=1, queues=[HOSTILE_QUEUE])
    assert queue.fail(claim, ValueError(HOSTILE_ERROR))
    return job_id


@pytest.mark.parametrize("command", [("jobs",), ("jobs", "--status", "failed"), ("stats",)])
def test_listings_print_hostile_text_as_text(failed_hostile_job, dsn, schema, command):
    """Markup in job data is printed literally, escape characters are shown escaped, and
    the command succeeds."""
    result = pgbaton(*command, "--schema", schema, dsn=dsn)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\x1b" not in result.stdout
    assert "q\\x1b]8;;https://evil.example\\x1b\\x" in result.stdout
    if command[0] == "jobs":
        assert HOSTILE_TASK in result.stdout
        assert "expected [/] separator [link=https://evil.example]click[/link]" in result.stdout


def test_show_prints_every_error_as_text(failed_hostile_job, dsn, schema):
    """`show` prints the job's fields and each attempt's error without obeying them."""
    result = pgbaton("show", str(failed_hostile_job), "--schema", schema, dsn=dsn)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\x1b" not in result.stdout
    assert " on w1: ValueError: expected [/] separator [link=" in result.stdout
    assert "[red]x[/red]" in result.stdout


def test_show_prints_args_as_json_each_traceback_and_where_the_last_attempt_ran(
        queue, dsn, schema):
    """Args that `enqueue --args` takes back (JSON, not a Python repr), every attempt's
    stored traceback under its line, and, for a failed job whose holder is cleared,
    the worker its last attempt ran on."""
    job = queue.enqueue("report", {"month": "märz", "ok": True, "n": None}, max_attempts=1)
    [claim] = queue.claim("worker-9", limit=1)
    try:
        raise LookupError("no rows for märz")
    except LookupError as error:
        failed = queue.fail(claim, error)
    assert failed
    result = pgbaton("show", str(job), "--schema", schema, dsn=dsn)
    assert result.returncode == 0, result.stderr[-2000:]
    assert '{"n": null, "ok": true, "month": "märz"}' in result.stdout  # jsonb's order
    assert "none now (attempt 1 ran on worker-9)" in result.stdout
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "on worker-9: LookupError: no rows" in line)
    assert lines[at + 1] == "    Traceback (most recent call last):"
    assert any("test_listings.py" in line for line in lines[at + 2:])
    assert lines[-1] == "    LookupError: no rows for märz"


def test_tables_on_a_pipe_are_printed_whole(queue, dsn, schema):
    """Output to a pipe is not cut at 80 columns: a long error appears in full."""
    long_message = "timeout talking to the payment provider " + "x" * 300 + " (end)"
    queue.enqueue("charge", {}, max_attempts=1)
    [claim] = queue.claim("w1", limit=1)
    queue.fail(claim, RuntimeError(long_message))
    result = pgbaton("jobs", "--schema", schema, dsn=dsn)
    assert long_message in result.stdout
    assert "…" not in result.stdout


def test_ages_read_as_durations(queue, dsn, schema, db):
    """The oldest pending job's age is `3 h 12 min`, not seconds with six decimals."""
    queue.enqueue("t", {})
    db.execute("UPDATE jobs SET run_at = now() - interval '3 hours 12 minutes 5 seconds'")
    result = pgbaton("stats", "--schema", schema, dsn=dsn)
    assert "3 h 12 min" in result.stdout, result.stdout


def test_show_prints_the_snoozes(queue, dsn, schema):
    """`show` has a snoozes field: how many times the handler snoozed, none an attempt."""
    job = queue.enqueue("poll", {})
    [claim] = queue.claim("w", limit=1)
    assert queue.snooze(claim, pgbaton_module.Snooze(60)) == "pending"
    result = pgbaton("show", str(job), "--schema", schema, dsn=dsn)
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"^\W*snoozes\W+1\W*$", result.stdout, re.M), result.stdout
    assert re.search(r"^\W*attempts\W+0\W*$", result.stdout, re.M), result.stdout
def test_show_logs_and_running_progress_print_as_text(queue, dsn, schema):
    """`show ID --logs` prints each run's lines under its label, markup and escapes
    as text, a cut attempt's marker; `jobs --status running` shows each job's progress;
    `show --json --logs` carries the lines."""
    line = {"at": "2026-01-01T00:00:00+00:00", "level": "INFO", "logger": "app",
            "message": "[red]<b>x</b>[/red] \x1b[2J\nsecond line"}
    job = queue.enqueue("report", max_attempts=2)
    [claim] = queue.claim("w1")
    assert queue.write_logs([(claim, [line], 4)]) == [True]
    assert queue.write_progress([(claim, 0.4, "[bold]rows[/bold] \x1b[2J")]) == [True]
    listed = pgbaton("jobs", "--status", "running", "--schema", schema, dsn=dsn)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "40% [bold]rows[/bold] \\x1b[2J" in listed.stdout and "\x1b" not in listed.stdout
    assert queue.fail(claim, "boom", retry_in=0)
    [again] = queue.claim("w1")  # attempt 2's first run, labelled as its job ends
    assert queue.write_logs([(again, [{**line, "message": "again"}], 0)],
                            ended=["succeeded"]) == [True]
    assert queue.complete(again)
    result = pgbaton("show", str(job), "--logs", "--schema", schema, dsn=dsn)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\x1b" not in result.stdout
    assert "logs of attempt 1, run 1:" in result.stdout
    assert result.stdout.index("logs of attempt 1, run 1:") < result.stdout.index(
        "logs of attempt 2, run 2 (succeeded):")
    assert "40% [bold]rows[/bold] \\x1b[2J" in result.stdout  # the progress field
    assert "INFO app: [red]<b>x</b>[/red] \\x1b[2J" in result.stdout
    assert "      second line" in result.stdout
    assert "... 4 more lines not kept" in result.stdout
    as_json = pgbaton("show", str(job), "--logs", "--json", "--schema", schema, dsn=dsn)
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    assert '"progress_note": "[bold]rows[/bold]' in as_json.stdout
    assert '"dropped": 4' in as_json.stdout
    assert '"run": 2' in as_json.stdout and '"ended": "succeeded"' in as_json.stdout
    none = pgbaton("show", str(queue.enqueue("quiet")), "--logs", "--schema", schema, dsn=dsn)
    assert "no log lines kept for this job" in none.stdout
