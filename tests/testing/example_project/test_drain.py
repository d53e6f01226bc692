"""drain(): every due job runs through the real worker, and the test sees how it ended."""

import pgbaton
from pgbaton.testing import drain, refute_enqueued
from shop_jobs import charge, place_order, seen_by_middleware


def test_drain_runs_every_due_job(pgbaton_app: pgbaton.App) -> None:
    place_order(customer_id=3, amount=100)
    results = drain(pgbaton_app)
    assert [(r.task, r.status) for r in results] == [
        ("charge", "done"), ("send_receipt", "done"),
    ]
    assert results[0].result == {"charged": 100}
    assert results[1].result.endswith("with key pgbaton-job-2")
    assert seen_by_middleware[-2:] == ["charge", "send_receipt"]  # the App's middleware ran
    refute_enqueued(charge)


def test_drain_retries_a_failing_job_until_it_fails(pgbaton_app: pgbaton.App) -> None:
    charge.defer(customer_id=3, amount=-5)
    (result,) = drain(pgbaton_app)
    assert (result.status, result.attempts) == ("failed", 3)
    assert result.error == "ValueError: cannot charge -5"
