"""The data plane as a face over an engine (docs/explanation/architecture.md):
`queue.engine` runs the worker's and the leader's statements on the queue's own pool,
and the queue's names for them give the same answers."""

from __future__ import annotations

from typing import Any

import psycopg

import pgbaton
from pgbaton.engine import Engine
from pgbaton.engine_async import AsyncEngine


def test_the_engine_works_the_queues_jobs_on_the_queues_pool(
    queue: pgbaton.Queue, db: psycopg.Connection[Any]
):
    """Jobs the face enqueued are claimed and completed by the engine, through the one
    pool the queue opened; the face reads what the engine wrote."""
    assert isinstance(queue.engine, Engine)
    ids = queue.enqueue_many([{"task": "t", "args": {"n": n}} for n in range(3)])
    batch = queue.engine.claim_batch("w", limit=3)
    assert [claim.id for claim in batch.claims] == ids
    pool = queue._pool
    assert queue.engine.complete_many([(claim, {"n": 1}) for claim in batch.claims]) == [
        True, True, True]
    assert queue._pool is pool  # the engine opened no pool of its own
    assert [job.status for job in map(queue.get, ids) if job] == ["done"] * 3


def test_a_limit_set_through_the_face_reaches_the_engines_next_claim_at_once(
    queue: pgbaton.Queue,
):
    """The engine keeps the flow state for up to a second, and its plain claim leaves a
    limited queue alone; a limit set through the same queue makes the very next claim
    read the state again and take the queue's job by the flow claim."""
    job_id = queue.enqueue("t", queue="reports")
    assert queue.claim("w", queues=["other"]) == []  # the flow state is read: none
    queue.set_concurrency("reports", 5)
    assert [c.id for c in queue.engine.claim_batch("w", queues=["reports"]).claims] == [
        job_id]
    assert queue.limited_queues == frozenset({"reports"})


async def test_the_async_queues_delegates_answer_as_its_engine_does(
    aqueue: pgbaton.AsyncQueue,
):
    """AsyncQueue.heartbeat and release_many are the engine's, answer for answer."""
    assert isinstance(aqueue.engine, AsyncEngine)
    await aqueue.enqueue_many([{"task": "t"}, {"task": "t"}])
    one, two = await aqueue.claim("w", limit=2)
    assert await aqueue.heartbeat([one, two], lease=60) == [True, True]
    assert await aqueue.engine.release_many([one]) == [True]
    assert await aqueue.heartbeat([one, two]) == await aqueue.engine.heartbeat([one, two])
    assert await aqueue.release_many([one, two]) == [False, True]
