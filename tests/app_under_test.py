"""The App that worker processes run in the tests of the `processes/` folders.

Handlers write what they did into an `effects` table in the test's schema, so tests
prove behaviour from SQL, not from the worker's own counters.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
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


def effects_dsn() -> str:
    """Where effects are written: straight to the server, even when the worker itself
    reaches it through a proxy the test may cut."""
    return os.environ.get("PGBATON_EFFECTS_DSN") or app.dsn


def record(context: pgbaton.JobContext | None, what: str, job_id: int | None = None) -> None:
    """Write one effect row on a connection of its own, committed at once."""
    with psycopg.connect(effects_dsn(), autocommit=True) as conn:
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
    with psycopg.connect(effects_dsn(), autocommit=True) as conn:
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


# -- hostile handlers: each must end as one failed attempt, never as a stuck worker ------

@app.task(max_attempts=2, retry=pgbaton.Backoff(base=0.01, cap=0.01))
async def returns_a_set(kind: str = "set") -> object:
    """Returns a value JSON cannot hold."""
    return {1, 2} if kind == "set" else object()


def _raising_policy(attempt: int) -> float:
    raise ZeroDivisionError("the retry policy divides by zero")


@app.task(max_attempts=3, retry=_raising_policy)
async def fails_with_bad_policy() -> None:
    raise ValueError("first failure")


@app.task(max_attempts=1)
def sync_exits(code: int = 3) -> None:
    """sys.exit() in a sync handler (a thread of the pool)."""
    sys.exit(code)


@app.task(max_attempts=1)
async def async_exits(how: str = "exit") -> None:
    """SystemExit, KeyboardInterrupt or a CancelledError of its own in an async handler."""
    await asyncio.sleep(0)
    if how == "interrupt":
        raise KeyboardInterrupt
    if how == "cancelled":
        raise asyncio.CancelledError
    sys.exit("handler asked to exit")


@app.task(pass_context=True, lease=1)
async def short_lease(context: pgbaton.JobContext, seconds: float = 3.0) -> str:
    """A task whose lease is far shorter than the worker's: the heartbeat must follow it."""
    await asyncio.to_thread(record, context, "start")
    await asyncio.sleep(seconds)
    await asyncio.to_thread(record, context, "end")
    return "ok"


@app.task(pass_context=True, timeout=0.3, max_attempts=1)
def ignores_stop(context: pgbaton.JobContext, seconds: float = 2.0) -> None:
    """A sync handler that outlives its timeout without looking at should_stop."""
    record(context, "start")
    time.sleep(seconds)
    record(context, "thread-returned")


@app.task(pass_context=True)
async def blocks_loop(context: pgbaton.JobContext, seconds: float = 1.0) -> None:
    """time.sleep in an async def: the whole loop stops."""
    await asyncio.to_thread(record, context, "start")
    time.sleep(seconds)


@app.task(pass_context=True)
async def long_async(context: pgbaton.JobContext, seconds: float = 30.0) -> str:
    """Async work that records when it is cancelled."""
    await asyncio.to_thread(record, context, "start")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        await asyncio.shield(asyncio.to_thread(record, context, f"cancelled:{context.stop_reason}"))
        raise
    await asyncio.to_thread(record, context, "end")
    return "ok"


@app.task
async def noop() -> None:
    """Nothing at all: the bulk of a soak."""


@app.task(pass_context=True, timeout=0.2, max_attempts=2,
          retry=pgbaton.Backoff(base=0.01, cap=0.01))
def overruns(context: pgbaton.JobContext, seconds: float = 0.6) -> None:
    """A sync handler that runs past its timeout and never looks at should_stop: each
    attempt's start and end are effects, to check in SQL that no two overlap."""
    record(context, "start")
    time.sleep(seconds)
    record(context, "end")


@app.task(pass_context=True, max_attempts=2)
async def kills_its_worker(context: pgbaton.JobContext) -> None:
    """Ends its worker process as it starts, as a segfaulting extension would."""
    await asyncio.to_thread(record, context, "start")
    os._exit(70)


# Progress and each job's own log lines (docs/howto/progress-and-logs.md).
job_log = logging.getLogger("tests.app_under_test.job_log")


@app.task(pass_context=True, max_attempts=2, retry=pgbaton.Backoff(base=0.01, cap=0.01))
async def logs_and_reports(context: pgbaton.JobContext, lines: int = 5,
                           hold: float = 0.0, fail_first: bool = False) -> int:
    """Log `lines` lines naming the job, report progress after each, hold the last
    report for `hold` seconds, and fail the first attempt when asked."""
    for n in range(lines):
        job_log.info("job %s attempt %s line %d", context.job_id, context.attempt, n)
        context.progress((n + 1) / lines, note=f"line {n + 1} of {lines}")
        await asyncio.sleep(0)
    await asyncio.sleep(hold)
    if fail_first and context.attempt == 1:
        raise RuntimeError("the first attempt fails on purpose")
    return lines


@app.task(pass_context=True)
def sync_logs_and_reports(context: pgbaton.JobContext, lines: int = 5,
                          hold: float = 0.0) -> int:
    """logs_and_reports for a sync handler, in the worker's thread pool."""
    for n in range(lines):
        job_log.warning("job %s attempt %s line %d", context.job_id, context.attempt, n)
        context.progress((n + 1) / lines)
    time.sleep(hold)
    return lines


@app.task(pass_context=True)
async def snoozes_once(context: pgbaton.JobContext, seconds: float = 0.3) -> str:
    """Record each run; snooze `seconds` on the first (test_wakeup: its due-time wake)."""
    first = not await asyncio.to_thread(effect_exists, context.job_id, "start")
    await asyncio.to_thread(record, context, "start")
    if first:
        raise pgbaton.Snooze(seconds)
    return "ok"


@app.task(pass_context=True, max_attempts=2, retry=pgbaton.Backoff(base=0.3, cap=0.3))
async def fails_once_slowly(context: pgbaton.JobContext) -> str:
    """Record each run; fail the first, retried after 0.3 s (test_wakeup)."""
    await asyncio.to_thread(record, context, "start")
    if context.attempt == 1:
        raise RuntimeError("the first attempt fails on purpose")
    return "ok"


@app.task(pass_context=True)
async def sleeps_durably(context: pgbaton.JobContext, seconds: float = 0.3) -> str:
    """Record each run; sleep durably once (test_wakeup: its due-time wake)."""
    await asyncio.to_thread(record, context, "start")
    await context.sleep(seconds)
    return "ok"
