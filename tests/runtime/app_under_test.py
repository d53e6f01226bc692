"""The App that worker processes run in the runtime tests.

Handlers write what they did into an `effects` table in the test's schema, so tests
prove behaviour from SQL, not from the worker's own counters.
"""

from __future__ import annotations

import asyncio
import os
import time

import psycopg

import pgbaton

SCHEMA = os.environ.get("PGBATON_TEST_SCHEMA", "pgbaton")
app = pgbaton.App(schema=SCHEMA)

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS "{schema}".effects (
    id         bigserial PRIMARY KEY,
    job_id     bigint,
    attempt    int,
    worker_pid int,
    what       text,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def record(context: pgbaton.JobContext | None, what: str, job_id: int | None = None) -> None:
    """Write one effect row on a connection of its own, committed at once."""
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{SCHEMA}".effects (job_id, attempt, worker_pid, what)'
            " VALUES (%s, %s, %s, %s)",
            (
                context.job_id if context else job_id,
                context.attempt if context else None,
                os.getpid(),
                what,
            ),
        )


@app.task(pass_context=True)
async def work(context: pgbaton.JobContext, seconds: float = 0.0) -> str:
    """Async work: record the start, sleep (yielding to the loop), record the end."""
    await asyncio.to_thread(record, context, "start")
    await asyncio.sleep(seconds)
    await asyncio.to_thread(record, context, "end")
    return "ok"


@app.task(pass_context=True)
def sync_work(context: pgbaton.JobContext, seconds: float = 0.0) -> str:
    """Sync work in the thread pool; stops early when told to."""
    record(context, "start")
    if context.wait_for_stop(seconds):
        record(context, f"stopped:{context.stop_reason}")
        return "stopped"
    record(context, "end")
    return "ok"


@app.task(pass_context=True)
async def stall(context: pgbaton.JobContext, seconds: float) -> str:
    """Blocks the whole event loop, heartbeats included: a stalled worker process."""
    await asyncio.to_thread(record, context, "start")
    time.sleep(seconds)
    record(context, "woke")
    return "stalled"


@app.task(pass_context=True)
async def wait_to_be_cancelled(context: pgbaton.JobContext) -> None:
    """Runs until cancelled, and records that it was."""
    await asyncio.to_thread(record, context, "start")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        record(context, "cancelled")
        raise


@app.task(max_attempts=2, retry=pgbaton.Backoff(base=0.01, cap=0.01))
def always_fails(n: int = 0) -> None:
    raise RuntimeError(f"always fails ({n})")


@app.task(timeout=0.2)
async def too_slow() -> None:
    await asyncio.sleep(3600)


@app.periodic("* * * * * *", pass_context=True)
async def every_second(context: pgbaton.JobContext) -> None:
    await asyncio.to_thread(record, context, "tick")


def effect_exists(job_id: int, what: str, min_attempt: int = 0) -> bool:
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT 1 FROM "{SCHEMA}".effects'
            " WHERE job_id = %s AND what = %s AND coalesce(attempt, 0) >= %s",
            (job_id, what, min_attempt),
        ).fetchone()
    return row is not None


@app.task(pass_context=True)
async def stall_first_attempt(context: pgbaton.JobContext) -> str:
    """Attempt 1 stalls the whole event loop until attempt 2 has started elsewhere; a later
    attempt finishes once the test inserts a 'proceed' effect for the job."""
    await asyncio.to_thread(record, context, "start")
    if context.attempt == 1:
        # Blocking on the loop's own thread: no heartbeat runs, as in a long GC pause.
        deadline = time.monotonic() + 30
        while not effect_exists(context.job_id, "start", 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        record(context, "woke")
    else:
        while not await asyncio.to_thread(effect_exists, context.job_id, "proceed"):
            await asyncio.sleep(0.05)
        await asyncio.to_thread(record, context, "end")
    return f"attempt {context.attempt} by pid {os.getpid()}"
