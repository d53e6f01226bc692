"""A handler's chosen outcomes (Snooze, Cancel, Discard) and retries decided by the
error, through the real worker (drain) and inline mode, checked in the table."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from pgbaton.testing import drain, inline


@pytest.fixture
def app(queue: pgbaton.Queue, dsn: str, schema: str) -> pgbaton.App:
    return pgbaton.App(dsn, schema=schema)


def _row(db: psycopg.Connection[DictRow], job_id: int) -> dict[str, Any]:
    row = db.execute("SELECT status, attempts, snoozes, run_at - now() AS due_in, errors, "
                     "claim_token, lease_until, finished_at FROM jobs WHERE id = %s",
                     (job_id,)).fetchone()
    assert row is not None
    return row


def test_a_snooze_gives_the_attempt_back_and_moves_run_at(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """Snooze(600): pending again, due in ten minutes, no attempt spent, one snooze
    counted, the claim released, no error recorded; Job and JobResult say so."""
    events: list[pgbaton.Event] = []
    app.subscribe(events.append, ["job.snoozed"])

    @app.task
    def poll() -> None:
        raise pgbaton.Snooze(600, note="not ready yet")

    job_id = poll.defer()
    (result,) = drain(app)
    assert (result.status, result.attempts, result.snoozes) == ("pending", 0, 1)
    row = _row(db, job_id)
    assert (row["status"], row["attempts"], row["snoozes"]) == ("pending", 0, 1)
    assert dt.timedelta(seconds=590) < row["due_in"] <= dt.timedelta(seconds=600)
    assert (row["claim_token"], row["lease_until"], row["errors"]) == (None, None, [])
    job = app.queue.get(job_id)
    assert job is not None and job.snoozes == 1 and job.state == "scheduled"
    app.events.flush()
    assert [(e.job_id, e.detail) for e in events] == [
        (job_id, {"seconds": 600.0, "until": None, "note": "not ready yet"})]


def test_snooze_until_a_time_and_a_snooze_due_at_once_runs_again(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """Snooze(until=) sets run_at to that time; Snooze(0) is due at once, so the drain
    runs the job again, and its snoozes add up while its attempts do not."""
    at = dt.datetime(2031, 5, 1, 12, 0, tzinfo=dt.UTC)

    @app.task
    async def later() -> None:  # an async handler, on the worker's loop
        raise pgbaton.Snooze(until=at)

    @app.task(pass_context=True)
    def twice(ctx: pgbaton.JobContext) -> str:
        row = db.execute("SELECT snoozes FROM jobs WHERE id = %s", (ctx.job_id,)).fetchone()
        assert row is not None
        if row["snoozes"] < 2:
            raise pgbaton.Snooze(0)
        return "third time"

    later_id, twice_id = later.defer(), twice.defer()
    drain(app)
    row = db.execute("SELECT run_at FROM jobs WHERE id = %s", (later_id,)).fetchone()
    assert row is not None and row["run_at"] == at
    row = _row(db, twice_id)
    assert (row["status"], row["attempts"], row["snoozes"]) == ("done", 1, 2)


def test_past_max_snoozes_the_job_fails_saying_so(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """max_snoozes=2: the third snooze ends the job failed, with a SnoozeLimit error
    naming the limit and the note, and no attempt counted; its job.failed event says
    SnoozeLimit."""
    events: list[pgbaton.Event] = []
    app.subscribe(events.append, ["job.failed", "job.snoozed"])

    @app.task(max_snoozes=2)
    def forever() -> None:
        raise pgbaton.Snooze(0, note="still waiting for the bank")

    job_id = forever.defer()
    (result,) = drain(app)
    assert (result.status, result.snoozes, result.attempts) == ("failed", 2, 0)
    row = _row(db, job_id)
    (error,) = row["errors"]
    assert error["type"] == "SnoozeLimit"
    assert "snoozed 2 times, its task's max_snoozes" in error["message"]
    assert "still waiting for the bank" in error["message"]
    assert row["finished_at"] is not None and row["claim_token"] is None
    app.events.flush()
    assert [(e.name, e.error_type) for e in events] == [
        ("job.snoozed", "Snooze"), ("job.snoozed", "Snooze"), ("job.failed", "SnoozeLimit")]
    assert events[-1].detail == {"max_snoozes": 2}


def test_cancel_and_discard_end_the_job_at_once_with_the_reason(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """Cancel: cancelled, not retried, the reason kept. Discard: failed on its first of
    five attempts, the reason as its error. Neither holds a claim afterwards."""
    events: list[pgbaton.Event] = []
    app.subscribe(events.append, ["job.cancelled", "job.discarded"])

    @app.task
    def refund(order: int) -> None:
        raise pgbaton.Cancel(f"order {order} was refunded by hand")

    @app.task
    def parse(text: str) -> None:
        raise pgbaton.Discard(f"{text!r} is not a date")

    cancelled_id, discarded_id = refund.defer(order=7), parse.defer(text="tuesday-ish")
    results = {r.id: r for r in drain(app)}
    assert results[cancelled_id].status == "cancelled"
    assert results[cancelled_id].error == "Cancel: order 7 was refunded by hand"
    assert results[discarded_id].status == "failed"
    assert results[discarded_id].error == "Discard: 'tuesday-ish' is not a date"
    for job_id in (cancelled_id, discarded_id):
        row = _row(db, job_id)
        assert (row["attempts"], row["claim_token"], row["lease_until"]) == (1, None, None)
        assert row["finished_at"] is not None and len(row["errors"]) == 1
    app.events.flush()
    assert sorted((e.name, e.job_id, (e.detail or {}).get("reason")) for e in events) == [
        ("job.cancelled", cancelled_id, "order 7 was refunded by hand"),
        ("job.discarded", discarded_id, "'tuesday-ish' is not a date"),
    ]


def test_cancel_cancels_the_jobs_that_wait_for_it(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """A job its handler cancels ends as an operator's cancel does: its children go."""

    @app.task
    def parent() -> None:
        raise pgbaton.Cancel("nothing to do")

    @app.task
    def child() -> None: ...

    parent_id = parent.defer()
    child_id = child.using(after=[parent_id]).defer()
    drain(app)
    row = _row(db, child_id)
    assert row["status"] == "cancelled"


def test_retry_on_retries_only_those_errors(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """retry_on=(ConnectionError,): a ConnectionError is retried, a KeyError fails the
    job on its first attempt of five."""

    @app.task(retry_on=(ConnectionError,), retry=lambda attempt: 3600)
    def fetch(kind: str) -> None:
        raise ConnectionError("reset") if kind == "net" else KeyError(kind)

    net, key = fetch.defer(kind="net"), fetch.defer(kind="key")
    drain(app)
    assert (_row(db, net)["status"], _row(db, net)["attempts"]) == ("pending", 1)
    row = _row(db, key)
    assert (row["status"], row["attempts"], row["errors"][0]["type"]) == ("failed", 1, "KeyError")


def test_a_two_argument_policy_sees_the_error_and_none_stops(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """retry=(attempt, error): its delay is used, and None ends the job as failed; a
    one-argument policy's None still means the default backoff."""
    seen: list[tuple[int, str]] = []

    def policy(attempt: int, error: BaseException) -> float | None:
        seen.append((attempt, type(error).__name__))
        return 0 if isinstance(error, TimeoutError) and attempt < 3 else None

    @app.task(retry=policy, max_attempts=10)
    def call() -> None:
        raise TimeoutError("slow")

    @app.task(retry=lambda attempt: None, max_attempts=10)
    def old_style() -> None:
        raise ValueError("x")

    call_id, old_id = call.defer(), old_style.defer()
    drain(app)
    assert seen == [(1, "TimeoutError"), (2, "TimeoutError"), (3, "TimeoutError")]
    row = _row(db, call_id)
    assert (row["status"], row["attempts"]) == ("failed", 3)
    row = _row(db, old_id)
    assert (row["status"], row["attempts"]) == ("pending", 1)
    assert dt.timedelta(0) < row["due_in"] < dt.timedelta(seconds=2)  # Backoff(): ~1 s


def test_a_two_argument_policy_that_breaks_falls_back_to_the_default_backoff(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """A policy that returns a negative delay or raises is the attempt's error, naming
    the policy, and the default backoff applies: a broken policy ends no job."""

    @app.task(retry=lambda attempt, error: -1, max_attempts=3)
    def negative() -> None:
        raise TimeoutError("slow")

    @app.task(retry=lambda attempt, error: 1 / 0, max_attempts=3)
    def raising() -> None:
        raise TimeoutError("slow")

    ids = negative.defer(), raising.defer()
    drain(app)
    for job_id, said in zip(ids, ("retry_in must be a >= 0 number", "ZeroDivisionError"),
                            strict=True):
        row = _row(db, job_id)
        assert (row["status"], row["attempts"]) == ("pending", 1)
        (error,) = row["errors"]
        assert error["type"] == "HandlerExit"
        assert "the retry policy of task" in error["message"] and said in error["message"]


def test_task_options_are_checked_when_the_task_is_made(app: pgbaton.App) -> None:
    """A retry_on that is not a tuple of exception classes, a max_snoozes out of range
    and a retry that is not callable are refused, naming the problem."""
    cases: list[tuple[dict[str, Any], str]] = [
        ({"retry_on": ValueError}, "write retry_on=(ValueError,)"),
        ({"retry_on": [ValueError]}, "retry_on must be a tuple of exception classes"),
        ({"retry_on": (ValueError, "KeyError")}, "a tuple of exception classes"),
        ({"retry_on": (int,)}, "a tuple of exception classes"),
        ({"max_snoozes": -1}, "max_snoozes must be a whole number from 0"),
        ({"max_snoozes": 1.5}, "max_snoozes must be a whole number"),
        ({"retry": 5}, "retry must be callable"),
    ]
    for options, message in cases:
        with pytest.raises(pgbaton.InvalidArgument, match=message.replace("(", r"\(")
                           .replace(")", r"\)")):
            app.task(name=f"t{len(app.tasks)}", **options)(lambda: None)
    assert not app.tasks


@pytest.mark.parametrize(("make", "message"), [
    (lambda: pgbaton.Snooze(-1), "Snooze seconds must be a >= 0 number"),
    (lambda: pgbaton.Snooze(float("nan")), "Snooze seconds must be"),
    (lambda: pgbaton.Snooze(float("inf")), "Snooze seconds must be"),
    (lambda: pgbaton.Snooze(400 * 365 * 86400), "at most ten years"),
    (lambda: pgbaton.Snooze(until=dt.datetime(9999, 12, 31, tzinfo=dt.UTC)),
     "run_at must lie between"),
    (lambda: pgbaton.Snooze(until=dt.datetime(2030, 1, 1)), "timezone-aware"),
    (pgbaton.Snooze, "either seconds or until=, not neither"),
    (lambda: pgbaton.Snooze(1, until=dt.datetime.now(dt.UTC)), "not both"),
    (lambda: pgbaton.Snooze(1, note="x" * 4001), "at most 4,000 characters"),
    (lambda: pgbaton.Cancel("x" * 4001), "Cancel reason must be at most 4,000"),
    (lambda: pgbaton.Discard(""), "Discard reason must be a non-empty string"),
    (lambda: pgbaton.Cancel(None), "Cancel reason must be a non-empty string"),  # type: ignore[arg-type]
])
def test_bad_outcomes_are_refused_and_the_attempt_fails_as_any_error(
    app: pgbaton.App, db: psycopg.Connection[DictRow], make: Any, message: str
) -> None:
    """A bad Snooze, Cancel or Discard raises InvalidArgument in the handler: the
    attempt is an ordinary failure (retried), nothing is snoozed or ended."""
    with pytest.raises(pgbaton.InvalidArgument, match=message):
        make()

    @app.task(retry=lambda attempt: 3600)
    def handler() -> None:
        raise make()

    job_id = handler.defer()
    drain(app)
    row = _row(db, job_id)
    assert (row["status"], row["attempts"], row["snoozes"]) == ("pending", 1, 0)
    assert row["errors"][0]["type"] == "InvalidArgument"


def test_inline_reports_the_same_outcomes_without_sleeping(app: pgbaton.App) -> None:
    """inline(): a snooze is reported pending with one snooze and no attempt, a cancel
    as cancelled, a discard and an error not retried as failed; none is raised."""

    @app.task
    def snoozes() -> None:
        raise pgbaton.Snooze(3600)

    @app.task
    def cancels() -> None:
        raise pgbaton.Cancel("no")

    @app.task
    def discards() -> None:
        raise pgbaton.Discard("never")

    with inline(app) as jobs:
        snoozes.defer()
        cancels.defer()
        discards.defer()
    assert [(r.task, r.status, r.attempts, r.snoozes, r.error) for r in jobs] == [
        ("snoozes", "pending", 0, 1, "Snooze: snoozed 3600 s"),
        ("cancels", "cancelled", 1, 0, "Cancel: no"),
        ("discards", "failed", 1, 0, "Discard: never"),
    ]
