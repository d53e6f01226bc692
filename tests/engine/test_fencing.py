"""Every write by a worker is fenced by its claim token: a stale holder changes nothing."""

from __future__ import annotations

import dataclasses

import pgbaton
from tests.helpers import job_rows, wait_for_lease_to_pass

COLUMNS = ("id", "status", "attempts", "claim_token", "lease_until", "errors", "result", "run_at")


def _lose_claim(queue: pgbaton.Queue, db) -> tuple[pgbaton.Claim, pgbaton.Claim]:
    """A stale claim (lease expired, reaped, re-claimed by another worker) and the live one."""
    queue.enqueue("charge", {"order": 7})
    [stale] = queue.claim("stalled", lease=0.2)
    wait_for_lease_to_pass(db, stale.id)
    assert queue.reap() == 1
    [live] = queue.claim("healthy", lease=30)
    assert live.id == stale.id and live.token != stale.token
    return stale, live


def test_stale_heartbeat_returns_false_and_does_not_extend_the_new_lease(queue, db):
    """A heartbeat with an old token is refused and leaves the new holder's lease alone."""
    stale, live = _lose_claim(queue, db)
    before = job_rows(db, *COLUMNS)
    assert queue.heartbeat(stale, lease=600) == [False]
    assert job_rows(db, *COLUMNS) == before
    assert queue.heartbeat([stale, live], lease=60) == [False, True]
    assert live.lease_until > before[0][4]


def test_stale_completion_returns_false_and_changes_nothing(queue, db):
    """A completion with an old token is refused; the job stays with its new holder."""
    stale, live = _lose_claim(queue, db)
    before = job_rows(db, *COLUMNS)
    assert queue.complete(stale, {"charged": True}) is False
    assert queue.complete_many([(stale, 1), (live, 2)]) == [False, True]
    assert job_rows(db, "status", "result") == [("done", 2)]
    assert before[0][1] == "running"


def test_stale_failure_returns_false_and_changes_nothing(queue, db):
    """A failure with an old token is refused: no error recorded, no retry scheduled."""
    stale, _live = _lose_claim(queue, db)
    before = job_rows(db, *COLUMNS)
    assert queue.fail(stale, RuntimeError("late"), retry_in=0) is False
    assert job_rows(db, *COLUMNS) == before


def test_stale_release_returns_false_and_changes_nothing(queue, db):
    """A release with an old token does not hand the new holder's job back."""
    stale, _live = _lose_claim(queue, db)
    before = job_rows(db, *COLUMNS)
    assert queue.release(stale) is False
    assert job_rows(db, *COLUMNS) == before


def test_cancel_fences_out_the_running_holder(queue, db):
    """Cancelling a running job fences its holder out (heartbeat, completion and failure
    fail, the lease stops moving) while the job keeps the holder's token until the holder
    releases it; then the job is cancelled and holds nothing."""
    job_id = queue.enqueue("report")
    [claim] = queue.claim("w")
    assert queue.cancel(job_id) is True
    lease = job_rows(db, "lease_until")
    assert queue.heartbeat(claim) == [False]
    assert queue.complete(claim) is False
    assert queue.fail(claim, "boom") is False
    assert job_rows(db, "status", "claim_token") == [("cancelled", claim.token)]
    assert job_rows(db, "lease_until") == lease
    assert queue.release(claim) is False  # lost, but its handler has stopped: let go
    assert job_rows(db, "status", "claim_token", "lease_until") == [("cancelled", None, None)]
    assert queue.cancel(job_id) is False  # final states stay final


def test_completion_of_a_held_claim_stores_the_result(queue, db):
    """The holder's completion is accepted once; a second completion of the same claim is not."""
    queue.enqueue("add", {"a": 1, "b": 2})
    [claim] = queue.claim("w")
    assert queue.complete(claim, {"sum": 3}) is True
    assert queue.complete(claim, {"sum": 4}) is False
    job = queue.get(claim.id)
    assert job is not None
    assert (job.status, job.result, job.claim_token) == ("done", {"sum": 3}, None)
    assert job.lease_until is None
    assert job.finished_at is not None


def test_release_gives_the_attempt_back(queue, db):
    """A released job is pending again with its attempt count as before the claim."""
    queue.enqueue("slow")
    [claim] = queue.claim("w")
    assert claim.attempts == 1
    assert queue.release(claim) is True
    assert job_rows(db, "status", "attempts", "claim_token", "worker_id") == [
        ("pending", 0, None, None)
    ]
    [again] = queue.claim("w2")
    assert again.attempts == 1 and again.token != claim.token


def test_heartbeat_extends_every_held_lease_in_one_call(queue, db):
    """heartbeat() moves lease_until forward for each held claim and says which are held."""
    queue.enqueue_many([{"task": "t"} for _ in range(3)])
    claims = queue.claim("w", limit=3, lease=5)
    old = [c.lease_until for c in claims]
    assert queue.heartbeat(claims, lease=120) == [True, True, True]
    assert all(c.lease_until > o for c, o in zip(claims, old, strict=True))
    stored = [row[0] for row in job_rows(db, "lease_until")]
    assert stored == [c.lease_until for c in claims]


def test_each_job_of_a_claim_has_its_own_token_and_a_new_one_at_each_claim(queue, db):
    """A claim draws its tokens' random half once and makes each job's token of it and
    the job's id (jobs.sql, job_claim_many): no two jobs of a batch share a token, a
    job's next claim gives it a new one, and one job's token fences no other job in."""
    queue.enqueue_many([{"task": "charge", "args": {"order": n}} for n in range(40)])
    first = queue.engine.claim_batch("w", limit=40, starting=8).claims
    assert len(first) == 40 and len({c.token for c in first}) == 40
    one, other = first[0], first[1]
    borrowed = dataclasses.replace(one, token=other.token)
    assert queue.complete(borrowed, "forged") is False
    assert queue.heartbeat(borrowed) == [False]
    assert queue.engine.release_many(first) == [True] * 40
    again = queue.engine.claim_batch("w", limit=40, starting=40).claims
    assert {c.id for c in again} == {c.id for c in first}
    assert not {c.token for c in again} & {c.token for c in first}
    assert len({c.token for c in again}) == 40
    assert queue.complete(one, "stale") is False
    assert job_rows(db, "status")[0] == ("running",)
