"""A worker's hot-path statement that has no answer within its bound has its connection
cut off (_cut_off.py): it raises StatementCutOff at once, a passing error, and the pool
goes on with a fresh connection. Shutting the socket does not stop the server: a
statement that was only slow still commits (docs/explanation/reliability.md, "A network
that goes silent"). Here the statement waits for a row lock another session holds."""

from __future__ import annotations

import time
from typing import Any

import psycopg

import pgbaton
from pgbaton._cut_off import StatementCutOff
from pgbaton._transient import is_transient
from tests.helpers import wait_for

BOUND_SECONDS = 0.5  # set on the database directly: bound_hot_path keeps 5 s at least
# The cut comes at the bound, not after psycopg's cancel and its own waits (5 s and more).
CUT_WITHIN_SECONDS = BOUND_SECONDS + 2.0


async def test_a_statement_with_no_answer_is_cut_off_and_the_pool_goes_on(
    aqueue: pgbaton.AsyncQueue, dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    job = await aqueue.enqueue("noop")
    (claim,) = (await aqueue.engine.claim_batch("cut", limit=1)).claims
    aqueue.engine._db.hot_path_bound = BOUND_SECONDS
    with psycopg.connect(dsn) as locker:
        locker.execute(f'SELECT 1 FROM "{schema}".jobs WHERE id = %s FOR UPDATE',  # type: ignore[arg-type]
                       (job,))
        began = time.monotonic()
        try:
            await aqueue.engine.complete_many([(claim, "late")])
        except StatementCutOff as error:
            cut = error
        else:
            raise AssertionError("the completion waiting on the lock was not cut off")
        took = time.monotonic() - began
        assert took < CUT_WITHIN_SECONDS, took
        assert is_transient(cut)  # the worker's parts retry it, as a lost connection
        assert "within 0.5 s" in str(cut)
        # The pool goes on, on another connection, while the cut one's backend still
        # waits on the lock.
        assert await aqueue.engine.claim_batch("cut", limit=1) is not None
        locker.rollback()
    # The server ran the statement once the lock was gone: only the client was cut off.
    await wait_for(lambda: db.execute("SELECT status FROM jobs WHERE id = %s", (job,)
                                      ).fetchone()["status"] == "done",
                   "the cut-off completion to commit on the server")
    assert await aqueue.engine.complete_many([(claim, "again")]) == [False]
