"""Per-key order under operator actions and out-of-order commits
(docs/explanation/guarantees.md).

A cancelled or retried job keeps its key, and a retried job does not start again, while
the handler of its cancelled claim may still run: until that holder releases the claim
or its lease runs out. Leases pass on the server's clock (tests/helpers.py), never by
guessing at a sleep.
"""

from __future__ import annotations

from typing import Any

import psycopg

import pgbaton
from tests.helpers import job_rows, wait_for_lease_to_pass


def _wait_until_due(db: psycopg.Connection[Any], job_id: int) -> None:
    """Sleep on the server until the job's run_at is behind the server's clock."""
    db.execute(
        "SELECT pg_sleep(greatest(0, extract(epoch FROM run_at - clock_timestamp())) + 0.001)"
        " FROM jobs WHERE id = %s",
        (job_id,),
    )
    row = db.execute("SELECT run_at <= now() AS due FROM jobs WHERE id = %s", (job_id,))
    assert row.fetchone()["due"]  # type: ignore[index]


def _claimed_ids(queue: pgbaton.Queue) -> list[int]:
    return [claim.id for claim in queue.claim("next", limit=10, lease=60)]


def test_cancelling_a_running_keyed_job_keeps_its_key_until_the_holder_releases(queue, db):
    """The next job of a cancelled running job's key waits while the cancelled handler may
    still run; other keys do not wait; the holder's release frees the key at once."""
    first, second = queue.enqueue_many([{"task": "charge", "key": "customer-3"}] * 2)
    other = queue.enqueue("charge", key="customer-4")
    [holder] = queue.claim("w1", lease=60)
    assert holder.id == first

    assert queue.cancel(first) is True
    assert _claimed_ids(queue) == [other]  # customer-3 stays taken, customer-4 does not
    assert queue.heartbeat(holder) == [False]  # the holder learns it lost the job
    assert _claimed_ids(queue) == []

    assert queue.release(holder) is False  # lost, but its handler has stopped
    assert _claimed_ids(queue) == [second]
    assert job_rows(db, "id", "status", "claim_token IS NULL") == [
        (first, "cancelled", True),
        (second, "running", False),
        (other, "running", False),
    ]


def test_a_cancelled_holder_that_never_reports_frees_its_key_when_its_lease_passes(queue, db):
    """Without a word from the holder, the key of a cancelled job is free once the
    holder's lease has run out, and the reaper then clears the leftover hold."""
    first, second = queue.enqueue_many([{"task": "charge", "key": "customer-3"}] * 2)
    [holder] = queue.claim("w1", lease=0.5)
    assert queue.cancel(first) is True
    assert _claimed_ids(queue) == []

    wait_for_lease_to_pass(db, first)
    assert _claimed_ids(queue) == [second]
    assert queue.reap() == 0  # nothing was running with an expired lease ...
    assert job_rows(db, "status", "claim_token", "lease_until")[0] == ("cancelled", None, None)
    assert queue.release(holder) is False  # ... and the late holder changes nothing


def test_retrying_a_cancelled_job_whose_handler_may_run_waits_for_the_holder(queue, db):
    """`retry` of a job cancelled a moment ago does not start it a second time while the
    first handler may still run: it is pending, but claimable only once that holder's
    lease has passed, and its key's later jobs still wait behind it."""
    first, second = queue.enqueue_many([{"task": "charge", "key": "customer-3"}] * 2)
    loose = queue.enqueue("report")
    [holder] = queue.claim("w1", lease=1.0)
    [loose_holder] = queue.claim("w2", lease=1.0)
    assert (holder.id, loose_holder.id) == (first, loose)
    assert queue.cancel(first) is True and queue.cancel(loose) is True
    assert queue.retry(first) is True and queue.retry(loose) is True

    assert job_rows(db, "status") == [("pending",)] * 3
    assert _claimed_ids(queue) == []  # neither retried job, nor customer-3's second job
    assert queue.heartbeat([holder, loose_holder]) == [False, False]

    # Each retried job became due when its holder's lease ran out.
    run_ats = job_rows(db, "run_at")
    assert (run_ats[0][0], run_ats[2][0]) == (holder.lease_until, loose_holder.lease_until)
    _wait_until_due(db, loose)
    _wait_until_due(db, first)
    retried = queue.claim("w3", limit=10, lease=60)
    assert sorted(claim.id for claim in retried) == [first, loose]
    assert all(claim.attempts == 1 for claim in retried)
    assert queue.complete_many([(claim, None) for claim in retried]) == [True, True]
    assert _claimed_ids(queue) == [second]


def test_retrying_a_cancelled_job_whose_holder_let_go_runs_it_at_once(queue, db):
    """Once the cancelled holder has released its claim, `retry` makes the job claimable
    at once: the wait is only for a handler that may still run."""
    job_id = queue.enqueue("charge", key="customer-3")
    [holder] = queue.claim("w1", lease=600)
    assert queue.cancel(job_id) is True
    assert queue.release(holder) is False
    assert queue.retry(job_id) is True
    assert _claimed_ids(queue) == [job_id]


def test_a_retried_job_runs_as_soon_as_its_old_handler_lets_go(queue, db):
    """`retry` while the cancelled handler still runs, then that handler stops and its
    worker releases the lost claim: the retried job is due at once, not at the lease."""
    job_id = queue.enqueue("charge", key="customer-3")
    [holder] = queue.claim("w1", lease=600)
    assert queue.cancel(job_id) is True
    assert queue.retry(job_id) is True
    assert _claimed_ids(queue) == []
    assert queue.release(holder) is False  # the old handler has stopped
    [again] = queue.claim("w2", lease=60)
    assert (again.id, again.attempts) == (job_id, 1) and again.token != holder.token
    assert queue.release(holder) is False and queue.heartbeat(again) == [True]


def test_a_retried_job_still_held_keeps_its_key_from_an_older_late_commit(queue, dsn, db):
    """An older job of the key committed late, while a retried job's old handler may still
    run, waits for that handler too: the retried job is pending, not running, yet its
    key stays taken."""
    with psycopg.connect(dsn) as slow:
        older = queue.enqueue("charge", key="customer-3", conn=slow)
        retried = queue.enqueue("charge", key="customer-3")
        [holder] = queue.claim("w1", lease=600)
        assert holder.id == retried
        assert queue.cancel(retried) is True and queue.retry(retried) is True
        slow.commit()
    assert _claimed_ids(queue) == []
    assert queue.release(holder) is False
    assert _claimed_ids(queue) == [older]


def test_the_reaper_clears_expired_holds_of_cancelled_jobs(queue, db):
    """A cancelled job whose holder's lease has passed loses its token and lease at the
    next reap, so it leaves the lease and key indexes; running jobs are reaped as before."""
    cancelled, running = queue.enqueue_many(
        [{"task": "charge", "key": "customer-3"}, {"task": "charge"}]
    )
    queue.claim("w1", limit=2, lease=0.5)
    assert queue.cancel(cancelled) is True
    wait_for_lease_to_pass(db, cancelled)
    wait_for_lease_to_pass(db, running)
    assert queue.reap() == 1
    assert job_rows(db, "id", "status", "claim_token", "lease_until") == [
        (cancelled, "cancelled", None, None),
        (running, "pending", None, None),
    ]


# -- "oldest first" when enqueueing transactions commit out of id order ---------------


def test_a_job_in_an_open_transaction_is_invisible_and_the_later_commit_runs_first(
    queue, dsn, db
):
    """Documented: jobs of a key run in id order among the jobs committed when the claim
    looks. An older job still in an open transaction is invisible; the newer committed
    job runs first, and the older one runs after it, once committed."""
    with psycopg.connect(dsn) as slow:
        older = queue.enqueue("charge", key="customer-3", conn=slow)  # not committed yet
        newer = queue.enqueue("charge", key="customer-3")
        assert older < newer
        [claim] = queue.claim("w1", lease=60)
        assert claim.id == newer
        slow.commit()
    # The older job is now visible, but the key's running job holds it back.
    assert _claimed_ids(queue) == []
    assert queue.complete(claim) is True
    assert _claimed_ids(queue) == [older]


def test_an_older_job_committed_before_the_claim_looks_runs_first(queue, dsn, db):
    """Documented: once both are committed, the lower id runs first, whichever committed
    first."""
    with psycopg.connect(dsn) as slow:
        older = queue.enqueue("charge", key="customer-3", conn=slow)
        newer = queue.enqueue("charge", key="customer-3")
        slow.commit()
    assert _claimed_ids(queue) == [older]
    assert _claimed_ids(queue) == []  # the newer job waits for the older one
    assert job_rows(db, "id", "status") == [(older, "running"), (newer, "pending")]
