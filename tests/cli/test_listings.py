"""What `stats`, `jobs` and `show` print: job data as data, whole on a pipe, durations
that read as durations."""

from __future__ import annotations

import pytest

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
