"""Poison jobs stop: attempts are counted and the job ends `failed` with every error kept."""

from __future__ import annotations

from tests.helpers import job_rows, wait_for_lease_to_pass


def _raised(error: Exception) -> Exception:
    """The exception as a handler would hand it over: raised, so it has a traceback."""
    try:
        raise error
    except Exception as caught:
        return caught


def test_a_job_that_always_fails_ends_failed_after_max_attempts(queue, db):
    """Three failing attempts of a max_attempts=3 job leave it failed with three errors."""
    job_id = queue.enqueue("explode", max_attempts=3)
    for attempt in (1, 2, 3):
        [claim] = queue.claim("w")
        assert (claim.id, claim.attempts) == (job_id, attempt)
        assert queue.fail(claim, _raised(ValueError(f"boom {attempt}")), retry_in=0) is True
    assert queue.claim("w") == []
    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.claim_token) == ("failed", 3, None)
    assert [e["message"] for e in job.errors] == ["boom 1", "boom 2", "boom 3"]
    assert [e["attempt"] for e in job.errors] == [1, 2, 3]
    assert all(e["type"] == "ValueError" and "Traceback" in e["traceback"] for e in job.errors)
    assert job.finished_at is not None


def test_a_job_whose_worker_always_dies_ends_failed_after_max_attempts(queue, db):
    """Leases that expire every time are reaped back to pending, then to failed."""
    job_id = queue.enqueue("crash_the_worker", max_attempts=2)
    for attempt in (1, 2):
        [claim] = queue.claim(f"doomed-{attempt}", lease=0.1)
        assert claim.attempts == attempt
        wait_for_lease_to_pass(db, job_id)  # the worker died: nobody heartbeats
        assert queue.reap() == 1
    assert job_rows(db, "status", "attempts", "claim_token") == [("failed", 2, None)]
    job = queue.get(job_id)
    assert job is not None
    assert [(e["type"], e["worker_id"]) for e in job.errors] == [
        ("LeaseExpired", "doomed-1"),
        ("LeaseExpired", "doomed-2"),
    ]
    assert queue.claim("w") == []


def test_failure_schedules_a_retry_with_backoff(queue, db):
    """A failed attempt with attempts left goes back to pending, run_at pushed back."""
    queue.enqueue("flaky", max_attempts=5)
    [claim] = queue.claim("w")
    assert queue.fail(claim, "upstream 503") is True
    row = db.execute(
        "SELECT status, run_at > now() AS later, errors FROM jobs"
    ).fetchone()
    assert row["status"] == "pending" and row["later"]
    assert row["errors"][0]["message"] == "upstream 503"
    assert queue.claim("w") == []  # not before its run_at


def test_retry_brings_a_failed_job_back_with_fresh_attempts(queue, db):
    """retry() moves a failed job to pending, attempts 0, errors kept."""
    job_id = queue.enqueue("explode", max_attempts=1)
    [claim] = queue.claim("w")
    assert queue.fail(claim, "no") is True
    assert job_rows(db, "status") == [("failed",)]
    assert queue.retry(job_id) is True
    assert queue.retry(job_id) is False
    assert job_rows(db, "status", "attempts", "jsonb_array_length(errors)") == [("pending", 0, 1)]
    [again] = queue.claim("w")
    assert again.attempts == 1
