"""Enqueueing: one job, many jobs, idempotency keys, and the caller's own transaction."""

from __future__ import annotations

import datetime as dt
import itertools

import psycopg
import pytest

import pgbaton


def _listener(dsn: str, channel: str) -> psycopg.Connection:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f'LISTEN "{channel}"')  # type: ignore[arg-type]
    return conn


def _notifications(conn: psycopg.Connection, timeout: float) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]


def test_rollback_leaves_no_job_and_no_wakeup(queue, dsn, db):
    """A job enqueued in a transaction that rolls back never existed, and nobody was woken."""
    listener = _listener(dsn, queue.channel)
    with psycopg.connect(dsn) as conn:
        queue.enqueue("send_receipt", {"order": 1}, conn=conn)
        assert conn.execute(f'SELECT count(*) FROM "{queue.schema}".jobs').fetchone() == (1,)
        conn.rollback()
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    assert queue.claim("w") == []
    # A commit on the same channel afterwards proves the listener was listening all along,
    # so the empty result above is not a deaf listener.
    queue.enqueue("marker", queue="after-rollback")
    assert _notifications(listener, timeout=5) == ["after-rollback"]
    listener.close()


def test_commit_makes_the_job_claimable_and_notifies_once(queue, dsn):
    """Committed jobs are claimable; one statement of many rows sends one notification."""
    listener = _listener(dsn, queue.channel)
    with psycopg.connect(dsn) as conn:
        queue.enqueue_many([{"task": "t", "queue": "mail"} for _ in range(50)], conn=conn)
        assert queue.claim("w") == []  # not visible before the commit
        conn.commit()
    assert _notifications(listener, timeout=5) == ["mail"]
    assert list(listener.notifies(timeout=0.2)) == []  # one per statement, not per row
    assert len(queue.claim("w", limit=100)) == 50
    listener.close()


async def test_async_enqueue_in_the_callers_transaction(aqueue, dsn):
    """The async queue writes into an async connection's transaction, committed by the caller."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        job_id = await aqueue.enqueue("t", {"x": 1}, conn=conn)
        assert await aqueue.claim("w") == []
        await conn.commit()
    [claim] = await aqueue.claim("w")
    assert (claim.id, claim.args) == (job_id, {"x": 1})
    assert await aqueue.complete(claim, "ok") is True


def test_sync_queue_rejects_an_async_connection(queue):
    """conn= of the wrong kind is an error that names what is expected."""
    with pytest.raises(pgbaton.InvalidArgument, match=r"psycopg\.Connection"):
        queue.enqueue("t", conn=object())  # type: ignore[arg-type]


def test_enqueue_many_returns_ids_in_input_order_with_options(queue, db):
    """enqueue_many writes every option and returns ids in the order given."""
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    ids = queue.enqueue_many(
        [
            {"task": "a", "args": {"n": 1}, "priority": 5},
            {"task": "b", "queue": "other", "key": "k1", "max_attempts": 2},
            {"task": "c", "run_at": later},
            {"task": "d", "delay": 3600, "idempotency_key": "once"},
        ]
    )
    assert len(ids) == 4 and all(a < b for a, b in itertools.pairwise(ids))  # input order
    rows = db.execute(
        "SELECT id, task, queue, priority, key, max_attempts, idempotency_key,"
        " run_at > now() + interval '59 minutes' AS later FROM jobs ORDER BY id"
    ).fetchall()
    assert [(r["id"], r["task"]) for r in rows] == list(zip(ids, "abcd", strict=True))
    assert rows[0]["priority"] == 5 and rows[1]["queue"] == "other" and rows[1]["key"] == "k1"
    assert rows[1]["max_attempts"] == 2 and rows[3]["idempotency_key"] == "once"
    assert [r["later"] for r in rows] == [False, False, True, True]


def test_idempotency_key_returns_the_existing_job(queue, db):
    """A repeated idempotency key writes nothing and returns the first job's id, also in bulk."""
    first = queue.enqueue("charge", {"order": 1}, idempotency_key="order-1")
    assert queue.enqueue("charge", {"order": 1}, idempotency_key="order-1") == first
    ids = queue.enqueue_many(
        [
            {"task": "charge", "idempotency_key": "order-2"},
            {"task": "charge", "idempotency_key": "order-1"},
            {"task": "charge", "idempotency_key": "order-2"},
        ]
    )
    assert ids[1] == first and ids[0] == ids[2] != first
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 2


def test_enqueue_many_gives_left_out_fields_what_enqueue_gives(queue, db):
    """enqueue_many sends only the fields that differ from the defaults; the rows it
    writes equal, column for column, the rows enqueue() writes for the same jobs."""
    jobs = [
        {"task": "t", "args": {"n": 1}},
        {"task": "t", "args": {"n": 1}},  # a task seen already takes the short path
        {"task": "t"},
        {"task": "t", "args": {"n": 1}, "queue": "default", "priority": 0, "max_attempts": 5},
        {"task": "t", "args": {"n": 1}, "queue": "q", "priority": -3, "max_attempts": 1,
         "key": "k"},
    ]
    singles = [queue.enqueue(**job) for job in jobs]
    many = queue.enqueue_many(jobs)
    columns = "queue, task, args, priority, key, idempotency_key, max_attempts, status, attempts"
    def row(job_id: int) -> dict[str, object]:
        return db.execute(
            f"SELECT {columns}, run_at - created_at AS wait FROM jobs WHERE id = %s",  # type: ignore[arg-type]
            (job_id,),
        ).fetchone()
    assert [row(i) for i in many] == [row(i) for i in singles]
    assert row(many[2])["args"] == {} and row(many[0])["max_attempts"] == 5


def test_claim_respects_priority_run_at_and_queues(queue):
    """Higher priority first, future run_at not yet, and only the queues asked for."""
    low = queue.enqueue("t", priority=0)
    high = queue.enqueue("t", priority=10)
    queue.enqueue("t", priority=100, delay=3600)
    other = queue.enqueue("t", queue="other", priority=50)
    assert [c.id for c in queue.claim("w", limit=10, queues=["default"])] == [high, low]
    assert [c.id for c in queue.claim("w", limit=10)] == [other]


def test_claim_hands_each_claim_the_job_fields(queue):
    """A claim carries what a handler needs: task, args, key, queue, attempts, idempotency key."""
    job_id = queue.enqueue("ship", {"sku": "x"}, key="cust-1", queue="q1")
    [claim] = queue.claim("w", queues=["q1"], lease=0.5)
    assert (claim.task, claim.args, claim.key, claim.queue, claim.attempts) == (
        "ship", {"sku": "x"}, "cust-1", "q1", 1,
    )
    assert claim.idempotency_key == f"pgbaton-job-{job_id}"
    assert claim.lease_until - claim.created_at < dt.timedelta(seconds=30)


def test_stats_and_listing(queue):
    """stats() counts jobs by queue and status; jobs() filters by status."""
    queue.enqueue_many([{"task": "t"}, {"task": "t"}, {"task": "t", "queue": "b"}])
    [claim] = queue.claim("w", queues=["b"])
    by_queue = {s.queue: s for s in queue.stats()}
    assert (by_queue["default"].pending, by_queue["b"].running) == (2, 1)
    assert by_queue["default"].oldest_pending_seconds is not None
    assert [j.id for j in queue.jobs(status="running")] == [claim.id]
