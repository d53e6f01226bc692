"""drain(): due jobs run through the real worker in the test's process; how each ended
comes back, and the table agrees."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from pgbaton.testing import DrainTimeout, drain, drain_async


@pytest.fixture
def app(queue: pgbaton.Queue, dsn: str, schema: str) -> pgbaton.App:
    return pgbaton.App(dsn, schema=schema)


def test_jobs_enqueued_by_handlers_run_in_the_same_drain(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """A follow-up job enqueued by a handler is due at once, so the drain runs it too."""

    @app.task
    def ship(order_id: int) -> int:
        notify.defer(order_id=order_id)
        return order_id

    @app.task
    async def notify(order_id: int) -> str:
        return f"order {order_id} shipped"

    ship.defer(order_id=1)
    ship.defer(order_id=2)
    results = drain(app)
    assert [(r.task, r.args, r.status) for r in results] == [
        ("ship", {"order_id": 1}, "done"), ("ship", {"order_id": 2}, "done"),
        ("notify", {"order_id": 1}, "done"), ("notify", {"order_id": 2}, "done"),
    ]
    rows = db.execute("SELECT status, attempts, count(*) AS n FROM jobs "
                      "GROUP BY status, attempts").fetchall()
    assert rows == [{"status": "done", "attempts": 1, "n": 4}]


def test_drain_leaves_other_queues_and_later_jobs_alone(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """Only due jobs of the drained queue run."""

    @app.task
    def work(n: int) -> int:
        return n

    work.using(queue="a").defer(n=1)
    work.using(queue="b").defer(n=2)
    work.using(queue="a", delay=3600).defer(n=3)
    results = drain(app, "a")
    assert [(r.args, r.status) for r in results] == [({"n": 1}, "done")]
    rows = db.execute("SELECT args->>'n' AS n, status FROM jobs ORDER BY id").fetchall()
    assert [(r["n"], r["status"]) for r in rows] == [
        ("1", "done"), ("2", "pending"), ("3", "pending"),
    ]


def test_a_result_json_cannot_hold_fails_the_attempt_as_on_a_worker(app: pgbaton.App) -> None:
    """The worker's result check applies; a failure with a later retry stays pending."""

    @app.task(max_attempts=2)
    def bad() -> Any:
        return {"at": object()}

    bad.defer()
    (result,) = drain(app)
    assert (result.status, result.attempts) == ("pending", 1)
    assert result.error is not None
    assert result.error.startswith("NotSerializable: result of task 'bad' cannot be stored")


def test_middleware_wraps_every_drained_job(app: pgbaton.App) -> None:
    """The App's middleware runs around each handler, with the job's context."""
    seen: list[tuple[str, int]] = []

    @app.middleware
    async def record(context: pgbaton.JobContext, call_next: Any) -> Any:
        seen.append((context.claim.task, context.attempt))
        return await call_next()

    @app.task(retry=lambda attempt: 0, max_attempts=2)
    def flaky() -> None:
        if len(seen) < 2:
            raise RuntimeError("not yet")

    flaky.defer()
    (result,) = drain(app)
    assert seen == [("flaky", 1), ("flaky", 2)]
    assert (result.status, result.attempts) == ("done", 2)


async def test_drain_inside_an_event_loop_is_drain_async(app: pgbaton.App) -> None:
    """drain() refuses to nest event loops and names the async form; that one works."""

    @app.task
    async def tick() -> None:
        await asyncio.sleep(0)

    await tick.defer_async()
    with pytest.raises(pgbaton.ConfigurationError, match="await drain_async"):
        drain(app)
    results = await drain_async(app)
    assert [r.status for r in results] == ["done"]


def test_an_empty_queue_drains_to_nothing(app: pgbaton.App) -> None:
    """With nothing due, drain returns at once with no result."""
    assert drain(app, timeout=10) == []


def test_a_drain_past_its_timeout_raises_and_hands_the_job_back(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """A job still running at the timeout: DrainTimeout, and the job is pending again."""

    @app.task
    async def forever() -> None:
        await asyncio.sleep(3600)

    forever.defer()
    with pytest.raises(DrainTimeout, match=r"gave up after 0.5 s"):
        drain(app, timeout=0.5)
    row = db.execute("SELECT status, claim_token FROM jobs").fetchone()
    assert row == {"status": "pending", "claim_token": None}


def test_emptying_the_schema_leaves_no_row_of_any_job(queue, db, dsn, schema):
    """The test kit's reset (pgbaton_queue, pgbaton_app) gives ids from 1 again, so no
    table may keep rows of a job: the next test's job 1 would replay the last one's
    durable steps or take its events."""
    from pgbaton.testing.fixtures import empty

    job_id = queue.enqueue("t")
    [claim] = queue.claim("w")
    queue.send_event(job_id, "e", {"n": 1})
    db.execute("INSERT INTO job_steps (job_id, seq, name, kind, result, finished_at) "
               "VALUES (%s, 0, 's', 'step', '100', now())", (job_id,))
    queue.write_logs([(claim, [{"message": "x"}], 0)])
    empty(dsn, schema)
    with_job_id = db.execute(
        "SELECT table_name FROM information_schema.columns WHERE table_schema = %s"
        " AND column_name IN ('job_id', 'id') AND table_name LIKE 'job%%'", (schema,)
    ).fetchall()
    for row in with_job_id:
        count = db.execute(f'SELECT count(*) AS n FROM "{row["table_name"]}"').fetchone()
        assert count["n"] == 0, row["table_name"]
