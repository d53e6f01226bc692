"""The App that `pgbaton worker` processes run in the outcomes hammer
(test_outcomes_hammer.py): each job's args say how its handler ends once it has
snoozed `snoozes` times (return, Cancel, Discard, an error retried until its attempts
run out, an error its task does not retry, or snoozing past max_snoozes).

Handlers write what they did into the `effects` table, and hold a session advisory lock
on their job's id while they run: one they cannot take means another live process runs
the same job at that moment, and is written down as an overlap.
"""

from __future__ import annotations

import os
import time

import psycopg

import pgbaton

SCHEMA = os.environ.get("PGBATON_TEST_SCHEMA", "pgbaton")
app = pgbaton.App(schema=SCHEMA)

LOCK_SPACE = 4242  # the advisory locks' first key: the job's id is the second

EFFECTS_DDL = """
CREATE TABLE "{schema}".effects (
    id         bigserial PRIMARY KEY,
    job_id     bigint NOT NULL,
    attempt    int NOT NULL,
    snoozes    int NOT NULL,
    worker_pid int NOT NULL,
    what       text NOT NULL,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

# How many times a `limit` job may snooze; its next snooze fails it.
MAX_SNOOZES = 3
# Attempts of the jobs that end by an error retried until none is left.
FAIL_ATTEMPTS = 3
# A handler's own connection, under the full suite's load beside SIGKILLed workers
# whose sessions the server has not yet reaped, can fail to open (seen once: a
# `not_retried` job failed with this OperationalError instead of its KeyError). The
# hammer tests the worker's outcomes, not the test's own connection: it tries again.
CONNECT_TRIES = 5


def _connect() -> psycopg.Connection:
    for attempt in range(1, CONNECT_TRIES + 1):
        try:
            return psycopg.connect(app.dsn, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError:
            if attempt == CONNECT_TRIES:
                raise
            time.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


def _run(context: pgbaton.JobContext, final: str, snoozes: int, work: float) -> str:
    with _connect() as conn:
        conn.execute(f'SET search_path TO "{SCHEMA}"')  # type: ignore[arg-type]

        def record(what: str, snoozed: int) -> None:
            conn.execute(
                "INSERT INTO effects (job_id, attempt, snoozes, worker_pid, what)"
                " VALUES (%s, %s, %s, %s, %s)",
                (context.job_id, context.attempt, snoozed, os.getpid(), what),
            )

        row = conn.execute("SELECT pg_try_advisory_lock(%s, %s::int), snoozes FROM jobs"
                           " WHERE id = %s", (LOCK_SPACE, context.job_id,
                                              context.job_id)).fetchone()
        assert row is not None
        locked, snoozed = row
        if not locked:
            record("overlap", snoozed)
        record("start", snoozed)
        time.sleep(work)
        if final == "limit" or snoozed < snoozes:
            record("snooze", snoozed)
            raise pgbaton.Snooze(0.05, note=f"snooze {snoozed + 1}")
        record("decide", snoozed)
        if final == "cancel":
            raise pgbaton.Cancel(f"job {context.job_id} is not wanted")
        if final == "discard":
            raise pgbaton.Discard(f"job {context.job_id} can never succeed")
        if final == "fail":
            raise ValueError("retried until no attempt is left")
        if final == "not_retried":
            raise KeyError("not one of retry_on")
        return "done"
    # The connection's close ended the advisory lock before the outcome is written.


@app.task(pass_context=True, max_attempts=50, retry=lambda attempt, error: 0.05)
def ends(context: pgbaton.JobContext, final: str, snoozes: int, work: float) -> str:
    """done, cancel, discard: after its snoozes the handler returns, cancels or
    discards; killed attempts are retried at once (50 attempts: kills never spend them)."""
    return _run(context, final, snoozes, work)


@app.task(pass_context=True, max_attempts=FAIL_ATTEMPTS, retry=lambda attempt: 0.05)
def fails(context: pgbaton.JobContext, final: str, snoozes: int, work: float) -> str:
    """An error retried (a one-argument policy) until no attempt is left."""
    return _run(context, final, snoozes, work)


@app.task(pass_context=True, max_attempts=50, retry=lambda attempt: 0.05,
          retry_on=(ConnectionError,))
def picky(context: pgbaton.JobContext, final: str, snoozes: int, work: float) -> str:
    """An error that is not one of retry_on: failed at once."""
    return _run(context, final, snoozes, work)


@app.task(pass_context=True, max_attempts=50, retry=lambda attempt: 0.05,
          max_snoozes=MAX_SNOOZES)
def snoozes_forever(context: pgbaton.JobContext, final: str, snoozes: int,
                    work: float) -> str:
    """Snoozes until its max_snoozes fails it."""
    return _run(context, final, snoozes, work)


TASK_OF = {"done": ends, "cancel": ends, "discard": ends, "fail": fails,
           "not_retried": picky, "limit": snoozes_forever}
