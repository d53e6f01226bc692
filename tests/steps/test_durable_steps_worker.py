"""Durable steps through the real worker in this process, where its held claims, its
counters and its heartbeat can be read: a suspension refused because the job was
cancelled under its handler, and a handler that cancels its own job and returns
(docs/howto/durable-steps.md). Checked in SQL."""

from __future__ import annotations

import asyncio
import logging

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from pgbaton.worker import Worker, WorkerConfig
from tests.helpers import wait_for

DEADLINE_SECONDS = 30.0


@pytest.fixture
def app(queue: pgbaton.Queue, dsn: str, schema: str) -> pgbaton.App:
    return pgbaton.App(dsn, schema=schema)


def row_of(db: psycopg.Connection[DictRow], job_id: int) -> DictRow:
    row = db.execute("SELECT status, claim_token, lease_until, waiting_event, attempts "
                     "FROM jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return row


@pytest.mark.parametrize("how", ["sleep", "wait_for", "operator"])
async def test_a_refused_suspension_lets_go_of_the_claim(
    app: pgbaton.App, queue: pgbaton.Queue, db: psycopg.Connection[DictRow],
    caplog: pytest.LogCaptureFixture, how: str,
) -> None:
    """A job cancelled while its handler runs, which then sleeps or waits: the fenced
    suspend is refused, the job stays cancelled, and the worker counts the claim as
    lost, holds nothing of it (no lease extended, its key let go at once, not at the
    lease's end), writes nothing more for it and says so in one line."""
    cancelled = asyncio.Event()

    @app.task(pass_context=True)
    async def napper(ctx: pgbaton.JobContext) -> str:
        await ctx.step("before", lambda: 1)
        if how == "operator":  # the dashboard's bulk action
            await asyncio.to_thread(queue.cancel_matching, pgbaton.JobFilter(), upto=ctx.job_id)
        else:
            await asyncio.to_thread(queue.cancel, ctx.job_id)
        cancelled.set()
        if how == "wait_for":
            await ctx.wait_for("go", timeout=60)
        else:
            await ctx.sleep(60)
        return "never"

    job_id = napper.using(key="k").defer()
    # A long lease: the key must be let go by the worker, not by the lease running out.
    worker = Worker(app, WorkerConfig(lease=120, maintenance=False, poll_interval=0.05))
    # As a worker that does not hear cancels (behind a transaction pool with no listen
    # DSN): the suspension itself must be refused. A worker that hears the cancel may
    # stop the handler before it suspends (tests/worker/test_cancel_delivered.py).
    worker.cancels.heard = lambda payload: None  # type: ignore[method-assign]
    caplog.set_level(logging.INFO, logger="pgbaton")
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(cancelled.wait(), DEADLINE_SECONDS)
        await wait_for(lambda: worker.stats["claims_lost"] == 1, "the claim counted lost")
        await wait_for(lambda: not len(worker.held), "the worker to hold nothing")
        await wait_for(lambda: row_of(db, job_id)["claim_token"] is None,
                       "the worker to let go of the job's key")
        beats = worker.stats["heartbeats"]
    finally:
        worker.request_stop()
        assert await running == 0
    row = row_of(db, job_id)
    assert (row["status"], row["lease_until"], row["waiting_event"]) == ("cancelled", None,
                                                                          None)
    kinds = db.execute("SELECT kind FROM job_steps WHERE job_id = %s ORDER BY seq",
                       [job_id]).fetchall()
    assert [k["kind"] for k in kinds] == ["step"]  # no sleep or wait written
    assert worker.stats["heartbeats"] == beats  # nothing was extended since
    lines = [r.getMessage() for r in caplog.records
             if r.name == "pgbaton.worker" and f"job {job_id}" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "cancelled" in lines[0] and ("sleep" in lines[0] or "wait" in lines[0]), lines
