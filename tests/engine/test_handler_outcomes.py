"""The statements behind a handler's outcomes (job_release_many as a snooze,
job_end_many): fenced by token and status, bad input refused with nothing written, and
a snoozed keyed job keeping its key's place."""

from __future__ import annotations

import datetime as dt

import pytest

import pgbaton
from tests.helpers import job_rows, wait_for_lease_to_pass

COLUMNS = ("id", "status", "attempts", "snoozes", "claim_token", "lease_until", "errors",
           "run_at", "finished_at")


def _lose_claim(queue: pgbaton.Queue, db) -> tuple[pgbaton.Claim, pgbaton.Claim]:
    """A stale claim (lease expired, reaped, re-claimed by another worker) and the live one."""
    queue.enqueue("charge", {"order": 7})
    [stale] = queue.claim("stalled", lease=0.2)
    wait_for_lease_to_pass(db, stale.id)
    assert queue.reap() == 1
    [live] = queue.claim("healthy", lease=30)
    assert live.id == stale.id and live.token != stale.token
    return stale, live


def test_a_stale_snooze_cancel_or_discard_changes_nothing(queue, db):
    """A worker that lost the claim snoozes, cancels and discards nothing; the live
    holder's writes in the same batch are accepted, each judged by its own token."""
    stale, live = _lose_claim(queue, db)
    before = job_rows(db, *COLUMNS)
    assert queue.snooze(stale, pgbaton.Snooze(60)) is None
    assert queue.end_many([(stale, "cancelled", pgbaton.Cancel("no")),
                           (stale, "failed", pgbaton.Discard("no"))]) == [None, None]
    assert job_rows(db, *COLUMNS) == before
    assert queue.snooze_many([(stale, pgbaton.Snooze(60), None),
                              (live, pgbaton.Snooze(60), None)]) == [None, "pending"]
    [(status, attempts, snoozes)] = job_rows(db, "status", "attempts", "snoozes")
    assert (status, attempts, snoozes) == ("pending", 1, 1)  # the reaped attempt counts


def test_a_job_cancelled_under_its_holder_is_not_ended_again(queue, db):
    """An operator's cancel wins: the holder's snooze or end changes nothing but lets go
    of the hold (its handler has stopped), and the job stays cancelled."""
    job_id = queue.enqueue("charge", {}, key="k")
    [claim] = queue.claim("w")
    assert queue.cancel(job_id)
    assert queue.end_many([(claim, "failed", pgbaton.Discard("late"))]) == [None]
    assert queue.snooze(claim, pgbaton.Snooze(0)) is None
    [(status, token, errors)] = job_rows(db, "status", "claim_token", "errors")
    assert (status, token, errors) == ("cancelled", None, [])


def test_end_many_ends_failed_or_cancelled_whatever_attempts_are_left(queue, db):
    """job_end_many: failed on the first of five attempts, or cancelled; the error is
    kept with its attempt and worker, and no claim is left."""
    queue.enqueue("a", {}, max_attempts=5)
    queue.enqueue("b", {}, max_attempts=5)
    claims = queue.claim("w", limit=2)
    assert queue.end_many([(claims[0], "failed", pgbaton.Discard("bad input")),
                           (claims[1], "cancelled", "not wanted")]) == ["failed", "cancelled"]
    rows = job_rows(db, "status", "attempts", "claim_token", "lease_until", "errors")
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("failed", 1, None, None), ("cancelled", 1, None, None)]
    assert [(e["type"], e["message"], e["attempt"], e["worker_id"])
            for r in rows for e in r[4]] == [
        ("Discard", "bad input", 1, "w"), ("Error", "not wanted", 1, "w")]


def test_bad_input_to_the_statements_is_refused_before_anything_is_written(queue, db):
    """An end state other than failed or cancelled, something that is not a Snooze, a
    negative max_snoozes: InvalidArgument, and the job is still running."""
    queue.enqueue("a", {})
    [claim] = queue.claim("w")
    before = job_rows(db, *COLUMNS)
    with pytest.raises(pgbaton.InvalidArgument, match="ends as 'failed' or 'cancelled'"):
        queue.end_many([(claim, "done", "x")])
    with pytest.raises(pgbaton.InvalidArgument, match=r"expected a pgbaton\.Snooze"):
        queue.snooze_many([(claim, 5, None)])  # type: ignore[list-item]
    with pytest.raises(pgbaton.InvalidArgument, match="max_snoozes must be a whole number"):
        queue.snooze(claim, pgbaton.Snooze(1), max_snoozes=-1)
    assert job_rows(db, *COLUMNS) == before


def test_a_snooze_counts_up_to_max_snoozes_then_fails(queue, db):
    """With max_snoozes=2 the first two snoozes go back to pending, each giving the
    attempt back; the third ends the job failed with the SnoozeLimit error."""
    job_id = queue.enqueue("poll", {})
    for expected in ("pending", "pending", "failed"):
        [claim] = queue.claim("w")
        assert queue.snooze(claim, pgbaton.Snooze(0, note="n"), max_snoozes=2) == expected
    [(status, attempts, snoozes, token, errors, finished)] = job_rows(
        db, "status", "attempts", "snoozes", "claim_token", "errors", "finished_at")
    assert (status, attempts, snoozes, token) == ("failed", 0, 2, None)
    assert finished is not None
    assert [e["type"] for e in errors] == ["SnoozeLimit"]
    # An operator's retry starts the count again, as it does the attempts.
    assert queue.retry(job_id)
    assert job_rows(db, "status", "attempts", "snoozes") == [("pending", 0, 0)]


def test_a_plain_release_keeps_run_at_and_counts_no_snooze(queue, db):
    """release() is the same statement with nothing to move or count."""
    queue.enqueue("a", {})
    [(run_at,)] = job_rows(db, "run_at")
    [claim] = queue.claim("w")
    assert queue.release(claim) is True
    assert job_rows(db, "status", "attempts", "snoozes", "run_at") == [
        ("pending", 0, 0, run_at)]


def test_a_snoozed_keyed_job_keeps_its_place_at_the_head_of_its_key(queue, db):
    """Place = its id, the key's order: a snoozed job stays its key's oldest, so the
    later jobs of its key wait for it (not due, it still holds them back), and it runs
    first once due again. Other keys are not held up."""
    first = queue.enqueue("step", {"n": 1}, key="order-1")
    second = queue.enqueue("step", {"n": 2}, key="order-1")
    other = queue.enqueue("step", {"n": 3}, key="order-2")
    [claim] = queue.claim("w", limit=1)
    assert claim.id == first
    assert queue.snooze(claim, pgbaton.Snooze(3600)) == "pending"
    # The key's second job is due, but its older, snoozed job holds it back.
    assert [c.id for c in queue.claim("w", limit=10)] == [other]
    # Due again, the snoozed job runs before the second, and the second only after it.
    db.execute("UPDATE jobs SET run_at = now() WHERE id = %s", (first,))
    [again] = queue.claim("w", limit=10)
    assert (again.id, again.attempts) == (first, 1)  # the snooze spent no attempt
    assert queue.claim("w", limit=10) == []
    assert queue.complete(again)
    assert [c.id for c in queue.claim("w", limit=10)] == [second]
    assert job_rows(db, "id", "snoozes") == [(first, 1), (second, 0), (other, 0)]


def test_snooze_until_lands_on_that_time(queue, db):
    """Snooze(until=) is stored as given (the server's now() is not involved)."""
    queue.enqueue("a", {})
    at = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    [claim] = queue.claim("w")
    assert queue.snooze(claim, pgbaton.Snooze(until=at)) == "pending"
    assert job_rows(db, "run_at", "attempts") == [(at, 0)]
