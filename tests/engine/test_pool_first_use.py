"""A fresh Queue used first by several threads (or tasks) at once opens one pool, and
every caller gets it: a sync handler's enqueue in each of a worker's threads is such a
first use."""

from __future__ import annotations

import asyncio
import threading

import psycopg
import pytest

import pgbaton

CALLERS = 8


def test_threads_using_a_fresh_queue_at_once_all_enqueue(queue, dsn, schema, db):
    """Every thread's first enqueue succeeds; all of them share one pool."""
    fresh = pgbaton.Queue(dsn, schema=schema)
    start = threading.Barrier(CALLERS)
    errors: list[BaseException] = []

    def enqueue(n: int) -> None:
        start.wait()
        try:
            fresh.enqueue("t", {"n": n})
        except BaseException as error:  # the test reports every one
            errors.append(error)

    threads = [threading.Thread(target=enqueue, args=(n,)) for n in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    fresh.close()
    assert errors == []
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": CALLERS}


def test_tasks_using_a_fresh_async_queue_at_once_all_enqueue(queue, dsn, schema, db):
    """The same for coroutines of one loop and an AsyncQueue."""

    async def main() -> None:
        fresh = pgbaton.AsyncQueue(dsn, schema=schema)
        try:
            await asyncio.gather(*(fresh.enqueue("t", {"n": n}) for n in range(CALLERS)))
        finally:
            await fresh.close()

    asyncio.run(main())
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": CALLERS}


def test_a_pooled_connection_comes_back_clean_whatever_its_holder_did(queue, db):
    """The checkout hands back, for the next holder, a connection that is idle and in
    autocommit: one left in a transaction is rolled back (its write undone; through
    pool.connection() it was committed, but no statement of pgbaton's leaves one: they
    run in autocommit, in transaction() blocks or in a pipeline), one whose statement
    failed or whose holder raised is usable, one left closed is replaced."""
    with queue._connection() as conn:
        conn.execute("BEGIN")
        conn.execute(f'INSERT INTO "{queue.schema}".jobs (task) VALUES (%s)', ("left",))  # type: ignore[arg-type]
    with pytest.raises(psycopg.errors.UndefinedTable), queue._connection() as conn:
        conn.execute("SELECT * FROM no_such_table")
    with pytest.raises(RuntimeError), queue._connection() as conn:
        raise RuntimeError("the holder failed")
    with queue._connection() as conn:
        conn.close()
    for _ in range(3):
        with queue._connection() as conn:
            assert not conn.closed and conn.autocommit
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 0}
    assert queue.enqueue("after") > 0
