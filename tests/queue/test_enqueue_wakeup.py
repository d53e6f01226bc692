"""The wake-up of every enqueue path: one NOTIFY per queue with due jobs when the
enqueue's transaction commits, none before, none on rollback, none for jobs due later."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pgbaton

Enqueue = Callable[[pgbaton.Queue, str, Any], Any]


def _in_sql(query: str) -> Enqueue:
    """An enqueue through the SQL API (docs/reference/sql.md), on the caller's
    connection or, with None, on one of its own in autocommit."""
    def enqueue(queue: pgbaton.Queue, q: str, conn: Any) -> Any:
        statement = query.replace("__schema__", f'"{queue.schema}"')
        if conn is not None:
            return conn.execute(statement, {"q": q}).fetchall()
        with psycopg.connect(queue.dsn, autocommit=True) as own:
            return own.execute(statement, {"q": q}).fetchall()
    return enqueue

# Each path of pgbaton's enqueue, writing jobs of queue q (conn= the caller's, or None).
PATHS: dict[str, Enqueue] = {
    "enqueue": lambda queue, q, conn: queue.enqueue("t", queue=q, conn=conn),
    "enqueue_once": lambda queue, q, conn: queue.enqueue_once(
        "t", queue=q, idempotency_key=f"once-{q}", conn=conn),
    "enqueue_many (INSERT)": lambda queue, q, conn: queue.enqueue_many(
        [{"task": "t", "queue": q, "args": {"n": n}} for n in range(20)], conn=conn),
    "enqueue_many with keys (INSERT)": lambda queue, q, conn: queue.enqueue_many(
        [{"task": "t", "queue": q, "idempotency_key": f"{q}-{n}"} for n in range(20)],
        conn=conn),
    "enqueue_many (COPY)": lambda queue, q, conn: queue.enqueue_many(
        [{"task": "t", "queue": q, "args": {"n": n}} for n in range(600)], conn=conn),
    "enqueue_many (COPY, some jobs later)": lambda queue, q, conn: queue.enqueue_many(
        [{"task": "t", "queue": q, **({"delay": 3600} if n % 2 else {})} for n in range(600)],
        conn=conn),
    "enqueue with after= (a graph)": lambda queue, q, conn: queue.enqueue(
        "t", queue=q, conn=conn, after=[queue.enqueue("parent", queue=q, conn=conn)]),
    "SQL enqueue": _in_sql("SELECT __schema__.enqueue('t', queue => %(q)s)"),
    "SQL enqueue_many": _in_sql(
        "SELECT __schema__.enqueue_many(jsonb_build_array("
        "jsonb_build_object('task', 't', 'queue', %(q)s::text),"
        "jsonb_build_object('task', 't', 'queue', %(q)s::text, 'delay', 5)))"),
}


@pytest.fixture
def listener(dsn: str, queue: pgbaton.Queue):
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f'LISTEN "{queue.channel}"')  # type: ignore[arg-type]
    yield conn
    conn.close()


def _heard(listener: psycopg.Connection) -> list[str]:
    """What arrives: waiting up to 5 s for the first notification, then 0.2 s for more."""
    first = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    return first + [n.payload for n in listener.notifies(timeout=0.2)] if first else []


def _nothing_yet(listener: psycopg.Connection) -> bool:
    return list(listener.notifies(timeout=0.2)) == []


@pytest.mark.parametrize("path", list(PATHS))
def test_a_commit_wakes_the_queue_once_and_a_rollback_never(queue, dsn, listener, path):
    """In the caller's transaction: nothing before the commit, one NOTIFY for the queue
    at it (PostgreSQL folds repeats within a transaction), none for a rollback. On the
    queue's own connections: at once, for the queue, once per statement."""
    enqueue = PATHS[path]
    with psycopg.connect(dsn) as conn:
        enqueue(queue, "rolled-back", conn)
        conn.rollback()
        enqueue(queue, "committed", conn)
        assert _nothing_yet(listener)
        conn.commit()
    assert _heard(listener) == ["committed"]
    enqueue(queue, "pooled", None)
    heard = _heard(listener)
    # The graph path writes the parent and the child in two statements of their own.
    assert heard == ["pooled"] * (2 if "after=" in path else 1)


def test_jobs_due_later_wake_nobody_on_any_path(queue, listener):
    queue.enqueue("t", queue="later", delay=3600)
    queue.enqueue_many([{"task": "t", "queue": "later", "delay": 3600}] * 20)
    queue.enqueue_many([{"task": "t", "queue": "later", "delay": 3600}] * 600)
    _in_sql("SELECT __schema__.enqueue('t', queue => %(q)s, delay => 3600)")(
        queue, "later", None)
    queue.enqueue("marker", queue="marker")
    assert _heard(listener) == ["marker"]


def test_a_batch_of_several_queues_wakes_each_queue_once(queue, listener):
    for count in (20, 600):  # the INSERT and the COPY
        queue.enqueue_many([{"task": "t", "queue": f"q{n % 3}"} for n in range(count)])
        assert sorted(_heard(listener)) == ["q0", "q1", "q2"]
