"""Per-key serialisation, single-process cases: one running job per key, oldest first."""

from __future__ import annotations

import psycopg
import pytest


def test_keyed_jobs_run_one_at_a_time_in_enqueue_order(queue):
    """While a key's job runs, its next job waits; other keys and unkeyed jobs do not."""
    k1 = queue.enqueue_many([{"task": "t", "key": "cust-1"} for _ in range(3)])
    k2 = queue.enqueue("t", key="cust-2")
    free = queue.enqueue("t")
    first = queue.claim("w", limit=10)
    assert sorted(c.id for c in first) == sorted([k1[0], k2, free])
    assert queue.claim("w", limit=10) == []
    for claim in first:
        queue.complete(claim)
    assert [c.id for c in queue.claim("w", limit=10)] == [k1[1]]


def test_a_keyed_job_waiting_for_retry_holds_back_its_key(queue):
    """A failed keyed job keeps its place: the next job of its key waits for it."""
    first, _second = queue.enqueue_many([{"task": "t", "key": "k"}, {"task": "t", "key": "k"}])
    [claim] = queue.claim("w")
    assert claim.id == first
    queue.fail(claim, "try later", retry_in=3600)
    assert queue.claim("w", limit=10) == []


def test_database_refuses_two_running_jobs_of_one_key(queue, db):
    """The unique index is the backstop even for a writer that bypasses the claim."""
    queue.enqueue_many([{"task": "t", "key": "k"}, {"task": "t", "key": "k"}])
    queue.claim("w")
    with pytest.raises(psycopg.errors.UniqueViolation):
        db.execute(
            "UPDATE jobs SET status = 'running', claim_token = gen_random_uuid(),"
            " lease_until = now() WHERE status = 'pending'"
        )
