"""Inline mode: enqueue runs the job at once, with no database, for unit tests."""

import pytest

import pgbaton
from pgbaton.testing import inline
from shop_jobs import app, charge, place_order


def test_inline_runs_each_job_as_it_is_enqueued() -> None:
    with inline(app) as jobs:
        place_order(customer_id=3, amount=100)
    assert [(r.task, r.status, r.result) for r in jobs] == [
        ("charge", "done", {"charged": 100}),
        ("send_receipt", "done", "receipt 1003 sent with key pgbaton-job-2"),
    ]


def test_inline_checks_arguments_as_the_real_enqueue_does() -> None:
    with inline(app), pytest.raises(pgbaton.InvalidArgument, match="missing 'amount'"):
        charge.enqueue({"customer_id": 3})


def test_a_failing_job_raises_from_the_enqueue() -> None:
    with inline(app), pytest.raises(ValueError, match="cannot charge -5"):
        charge.defer(customer_id=3, amount=-5)
