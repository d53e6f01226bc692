"""The App of the randomised chaos run (tests/fleet/chaos.py), and the two tables that
prove it in SQL.

`runs`: each handler writes the claim token it ran with when it starts (and when it is
told to stop), through PostgreSQL's Unix socket, which no network cut reaches, and
returns that token as its result. `ledger`: a trigger on the jobs table writes every
claim token the database granted and how each claim ended (done, failed, back to
pending; the token it ended with and the error appended, if any). Every row of both is
written by the server or the handler, never by the test's own bookkeeping.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from psycopg_pool import AsyncConnectionPool

import pgbaton

SCHEMA = os.environ.get("PGBATON_TEST_SCHEMA", "pgbaton")
app = pgbaton.App(schema=SCHEMA)

TABLES_DDL = """
CREATE TABLE "{schema}".runs (
    id         bigserial PRIMARY KEY,
    job_id     bigint NOT NULL,
    token      uuid NOT NULL,
    attempt    int NOT NULL,
    worker_pid int NOT NULL,
    what       text NOT NULL,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE "{schema}".ledger (
    id       bigserial PRIMARY KEY,
    job_id   bigint NOT NULL,
    event    text NOT NULL,   -- granted, or ended:<the status the claim ended in>
    token    uuid NOT NULL,
    attempts int NOT NULL,
    error    text,            -- the type of the error the end appended, if any
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON "{schema}".ledger (job_id, id);
CREATE INDEX ON "{schema}".runs (job_id);
CREATE FUNCTION "{schema}".ledger_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'running' AND NEW.claim_token IS DISTINCT FROM OLD.claim_token THEN
        INSERT INTO "{schema}".ledger (job_id, event, token, attempts)
        VALUES (NEW.id, 'granted', NEW.claim_token, NEW.attempts);
    ELSIF OLD.status = 'running' AND NEW.status <> 'running' THEN
        INSERT INTO "{schema}".ledger (job_id, event, token, attempts, error)
        VALUES (NEW.id, 'ended:' || NEW.status, OLD.claim_token, NEW.attempts,
                CASE WHEN jsonb_array_length(NEW.errors) > jsonb_array_length(OLD.errors)
                     THEN NEW.errors -> -1 ->> 'type' END);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER ledger AFTER UPDATE ON "{schema}".jobs
    FOR EACH ROW EXECUTE FUNCTION "{schema}".ledger_write();
"""

# This process's connections for the runs table, opened on the first run.
_pools: dict[str, AsyncConnectionPool] = {}


async def _record(context: pgbaton.JobContext, what: str) -> None:
    pool = _pools.get("runs")
    if pool is None:
        pool = _pools["runs"] = AsyncConnectionPool(
            os.environ["PGBATON_EFFECTS_DSN"], min_size=1, max_size=5, open=False,
            kwargs={"autocommit": True}, check=AsyncConnectionPool.check_connection,
        )
        await pool.open()
    async with pool.connection(timeout=10) as conn:
        await conn.execute(
            f'INSERT INTO "{SCHEMA}".runs (job_id, token, attempt, worker_pid, what)'
            " VALUES (%s, %s, %s, %s, %s)",
            (context.job_id, context.token, context.attempt, os.getpid(), what),
        )


@app.task(pass_context=True, max_attempts=50)
async def chaos_work(context: pgbaton.JobContext, seconds: float = 0.0,
                     fail: bool = False) -> dict[str, Any]:
    """Records its token, works, returns the token; `fail` jobs are meant to fail."""
    await _record(context, "start")
    if fail:
        raise RuntimeError("meant to fail")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        await asyncio.shield(_record(context, f"stopped:{context.stop_reason}"))
        raise
    return {"token": str(context.token)}
