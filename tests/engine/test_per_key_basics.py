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


@pytest.mark.parametrize("claim", ["plain", "flow"])
def test_an_older_job_waiting_for_its_parents_holds_back_its_key(queue, claim):
    """A job of key k that waits for a parent (`after=`) keeps its place, as an older
    delayed job does: a newer pending job of k is not claimed before it, by the plain
    claim or the flow claim (a limited queue, so job_claim_flow serves it). Other keys
    and jobs without a key go on."""
    if claim == "flow":
        queue.set_concurrency("default", 10)
    parent = queue.enqueue("parent")
    parked = queue.enqueue("t", key="k", after=[parent])
    newer = queue.enqueue("t", key="k")
    other = queue.enqueue("t", key="other")
    delayed = queue.enqueue("t", key="d", delay=3600)
    after_delayed = queue.enqueue("t", key="d")

    first = queue.claim("w", limit=10)
    assert sorted(c.id for c in first) == sorted([parent, other])
    assert queue.claim("w", limit=10) == []
    for c in first:
        assert queue.complete(c)
    # The parent is done: the parked job is pending and comes before the newer one.
    [second] = queue.claim("w", limit=10)
    assert second.id == parked
    assert queue.claim("w", limit=10) == []
    assert queue.complete(second)
    [third] = queue.claim("w", limit=10)
    assert third.id == newer
    assert queue.get(after_delayed).status == "pending"  # type: ignore[union-attr]
    assert {delayed, after_delayed}.isdisjoint({c.id for c in [*first, second, third]})


@pytest.mark.parametrize("claim", ["plain", "flow"])
def test_a_parked_job_cancelled_with_its_parent_lets_its_key_go(queue, claim):
    """When the parent of an older parked job of the key is cancelled, the parked job is
    cancelled with it and the newer job of the key is claimable at once."""
    if claim == "flow":
        queue.set_concurrency("default", 10)
    parent = queue.enqueue("parent", queue="elsewhere")
    parked = queue.enqueue("t", key="k", after=[parent])
    newer = queue.enqueue("t", key="k")
    assert queue.claim("w", limit=10, queues=["default"]) == []
    assert queue.cancel(parent)
    assert queue.get(parked).status == "cancelled"  # type: ignore[union-attr]
    assert [c.id for c in queue.claim("w", limit=10, queues=["default"])] == [newer]


def test_a_child_listed_before_its_parent_of_the_same_key_never_blocks_it(queue):
    """enqueue_many may list a job before the parent it waits for: its id is still
    drawn after the parent's, so the parked child (older in the list) does not hold the
    key against its own parent, and the two run parent first."""
    child, middle, parent = queue.enqueue_many([
        {"task": "child", "key": "k", "after": ["middle"]},
        {"task": "middle", "label": "middle", "after": ["parent"]},
        {"task": "parent", "label": "parent", "key": "k"},
    ])
    assert parent < middle < child
    for expected in (parent, middle, child):
        [claim] = queue.claim("w", limit=10)
        assert claim.id == expected
        assert queue.complete(claim)
    assert queue.claim("w", limit=10) == []
