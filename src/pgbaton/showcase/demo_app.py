"""The tasks that `pgbaton demo` runs. Each writes what it did to demo_effects, so the
demo's report is computed from SQL rather than from counters kept by the demo."""

from __future__ import annotations

import asyncio
import os
import time

import psycopg

from .. import _sql
from ..app import App
from ..context import JobContext

SCHEMA = os.environ.get("PGBATON_DEMO_SCHEMA", "pgbaton_demo")
app = App(schema=SCHEMA)

SQL = _sql.queries(SCHEMA)

_connection: psycopg.AsyncConnection[object] | None = None


async def _record(context: JobContext, what: str) -> None:
    global _connection  # noqa: PLW0603 - one connection per worker process, made on first use
    if _connection is None or _connection.closed:
        _connection = await psycopg.AsyncConnection.connect(app.dsn, autocommit=True)
        await _connection.execute(SQL["demo_effects_session_setup"])
    await _connection.execute(SQL["demo_effect_record"], _effect(context, what))


def _effect(context: JobContext, what: str) -> dict[str, object]:
    """demo_effect_record's parameters: what this job's attempt did, in this process."""
    return {"job_id": context.job_id, "attempt": context.attempt,
            "worker_pid": os.getpid(), "what": what}


@app.task(pass_context=True)
async def process_order(context: JobContext, customer: str, order: int, ms: float = 5) -> str:
    """An ordinary job: a few milliseconds of I/O, bracketed by effects."""
    await _record(context, "start")
    await asyncio.sleep(ms / 1000)
    await _record(context, "end")
    return f"order {order} of {customer} processed"


@app.task(pass_context=True, queue="long")
async def long_job(context: JobContext, seconds: float) -> str:
    """Its first attempt waits on a dependency that never answers, so it is surely in
    flight when its worker is killed; a later attempt takes `seconds`."""
    await _record(context, "start")
    await asyncio.sleep(3600 if context.attempt == 1 else seconds)
    await _record(context, "end")
    return "long job done"


@app.task(pass_context=True, queue="stall")
async def slow_report(context: JobContext, stall_seconds: float) -> str:
    """On its first attempt it blocks the worker's whole event loop, heartbeats and all (a
    stop-the-world pause), until its lease has long run out and another worker has
    written the report; at most stall_seconds. Later attempts run normally."""
    await _record(context, "start")
    if context.attempt == 1:
        _stall_until_someone_else_finishes(context, stall_seconds)
    await _record(context, "end")
    return f"report written on attempt {context.attempt}"


def _stall_until_someone_else_finishes(context: JobContext, at_most: float) -> None:
    """Blocks, then records that it woke before the event loop runs again: once the loop
    runs, the worker learns the claim is lost and cancels this handler, which could
    cancel a `woke` written with an await (the demo waits for that row)."""
    deadline = time.monotonic() + at_most
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                SQL["demo_effect_finished_by_another"], {"job_id": context.job_id}
            ).fetchone()
            if row and row[0]:
                time.sleep(0.2)  # and a moment more, for its completion to commit
                break
            time.sleep(0.05)
        conn.execute(SQL["demo_effect_record"], _effect(context, "woke"))


@app.task(max_attempts=3, retry=lambda attempt: 0.05)
def poison(order: int) -> None:
    """A job that can never succeed."""
    raise ValueError(f"order {order} has a malformed address")
