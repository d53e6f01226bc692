"""job_hold_key_many (AsyncEngine.hold_keys): while the sync thread of a cancelled job
runs on, its worker extends the job's lease, so neither the next job of its key nor the
job itself, retried meanwhile, starts beside the thread; the let-go frees both."""

from __future__ import annotations

import pgbaton


def _cancelled_and_retried(queue: pgbaton.Queue, **options) -> tuple[int, pgbaton.Claim]:
    job = queue.enqueue("t", {}, **options)
    [claim] = queue.claim("w1", lease=0.2)
    assert queue.cancel(job)
    assert queue.retry(job)
    return job, claim


def test_a_retried_job_without_a_key_waits_for_its_old_thread(queue: pgbaton.Queue, db):
    """A job with no key has no key probe to hold it back: its run_at moves with the
    extended lease, and it is claimable at once when its old worker lets go."""
    job, claim = _cancelled_and_retried(queue)
    assert queue.engine.hold_keys([claim], lease=30.0) == [True]
    db.execute("SELECT pg_sleep(0.3)")  # past the claim's own 0.2 s lease
    assert queue.claim("w2", lease=30.0) == []
    assert queue.engine.release_many([claim]) == [False]  # let go (it was not running)
    [again] = queue.claim("w2", lease=30.0)
    assert again.id == job and again.token != claim.token


def test_the_hold_is_fenced_by_the_token(queue: pgbaton.Queue, db):
    """Once another worker holds the job, the old claim's hold changes nothing."""
    job, claim = _cancelled_and_retried(queue, key="k")
    assert queue.engine.release_many([claim]) == [False]
    [live] = queue.claim("w2", lease=30.0)
    before = db.execute("SELECT lease_until, run_at FROM jobs WHERE id = %s",
                        [job]).fetchone()
    assert queue.engine.hold_keys([claim], lease=300.0) == [False]
    assert db.execute("SELECT lease_until, run_at FROM jobs WHERE id = %s",
                      [job]).fetchone() == before
    assert live.id == job
