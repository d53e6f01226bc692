"""Idempotency keys are per task, and the caller can see whether a job was new."""

from __future__ import annotations

import psycopg
import pytest

import pgbaton
from tests.helpers import job_rows


def _count(db: psycopg.Connection) -> int:
    return int(db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"])  # type: ignore[index]


def _drop_the_global_index(db: psycopg.Connection) -> None:
    """What the release after this one does once no producer of the previous one runs."""
    db.execute("DROP INDEX jobs_idempotency_key_unique")


def test_a_key_taken_by_another_task_is_refused_naming_that_job(queue, db):
    """enqueue("send_receipt", idempotency_key="order-42") after a charge_card job took
    the key no longer returns the charge_card job's id: it raises IdempotencyKeyTaken
    naming that job and task, and writes nothing."""
    charge = queue.enqueue("charge_card", {"amount": 10}, idempotency_key="order-42")
    for call in (
        lambda: queue.enqueue("send_receipt", idempotency_key="order-42"),
        lambda: queue.enqueue_once("send_receipt", idempotency_key="order-42"),
    ):
        with pytest.raises(pgbaton.IdempotencyKeyTaken) as raised:
            call()
        message = str(raised.value)
        assert f"job {charge} of task 'charge_card'" in message and "'order-42'" in message
        assert "\n" not in message
        assert isinstance(raised.value, pgbaton.InvalidArgument)
    assert job_rows(db, "id", "task") == [(charge, "charge_card")]


def test_enqueue_many_with_a_key_of_another_task_writes_none_of_the_batch(queue, db, dsn):
    """A batch in which one job's key belongs to another task's job raises and writes
    none of its jobs, on a pooled connection and inside the caller's transaction, whose
    own earlier work survives."""
    queue.enqueue("charge_card", idempotency_key="order-42")
    batch = [
        {"task": "send_receipt", "idempotency_key": "order-41"},
        {"task": "send_receipt"},
        {"task": "send_receipt", "idempotency_key": "order-42"},
    ]
    with pytest.raises(pgbaton.IdempotencyKeyTaken, match="task 'charge_card'"):
        queue.enqueue_many(batch)
    assert _count(db) == 1

    with psycopg.connect(dsn) as conn:
        mine = queue.enqueue("audit", conn=conn)
        with pytest.raises(pgbaton.IdempotencyKeyTaken):
            queue.enqueue_many(batch, conn=conn)
        conn.commit()
    assert job_rows(db, "task") == [("charge_card",), ("audit",)]
    assert mine == job_rows(db, "id")[1][0]


def test_enqueue_once_says_whether_the_job_is_new(queue, db):
    """enqueue_once returns the job's id and created=True the first time, the same id and
    created=False after, even once the job is done; enqueue() still returns an int."""
    first = queue.enqueue_once("charge_card", {"amount": 10}, idempotency_key="order-7")
    assert first == pgbaton.Enqueued(id=first.id, created=True)
    again = queue.enqueue_once("charge_card", {"amount": 999}, idempotency_key="order-7")
    assert again == pgbaton.Enqueued(id=first.id, created=False)
    [claim] = queue.claim("w1")
    assert queue.complete(claim) is True
    assert queue.enqueue_once("charge_card", idempotency_key="order-7").created is False
    plain = queue.enqueue("charge_card", idempotency_key="order-7")
    assert type(plain) is int and plain == first.id
    assert job_rows(db, "id", "args") == [(first.id, {"amount": 10})]


async def test_async_enqueue_once_says_whether_the_job_is_new(aqueue):
    """AsyncQueue.enqueue_once behaves as the sync one."""
    first = await aqueue.enqueue_once("charge_card", idempotency_key="order-7")
    again = await aqueue.enqueue_once("charge_card", idempotency_key="order-7")
    assert (first.created, again.created, again.id) == (True, False, first.id)


def test_enqueue_once_without_a_key_is_refused(queue, db):
    """enqueue_once needs a key; without one it raises InvalidArgument and writes nothing."""
    with pytest.raises(pgbaton.InvalidArgument, match="idempotency_key"):
        queue.enqueue_once("charge_card", idempotency_key=None)  # type: ignore[arg-type]
    assert _count(db) == 0


def test_once_the_global_index_is_gone_each_task_has_its_own_keys(queue, db):
    """Without the previous release's global index (dropped by a later release), two
    tasks may use one key: each gets its own job, and each task still deduplicates."""
    _drop_the_global_index(db)
    charge = queue.enqueue_once("charge_card", idempotency_key="order-42")
    receipt = queue.enqueue_once("send_receipt", idempotency_key="order-42")
    assert charge.created and receipt.created and charge.id != receipt.id
    assert queue.enqueue("send_receipt", idempotency_key="order-42") == receipt.id
    ids = queue.enqueue_many([
        {"task": "charge_card", "idempotency_key": "order-42"},
        {"task": "refund", "idempotency_key": "order-42"},
        {"task": "refund", "idempotency_key": "order-42"},
    ])
    assert ids[0] == charge.id and ids[1] == ids[2] and ids[1] not in (charge.id, receipt.id)
    assert job_rows(db, "task", "idempotency_key") == [
        ("charge_card", "order-42"), ("send_receipt", "order-42"), ("refund", "order-42"),
    ]
