"""Task.defer_and_wait and defer_and_wait_async against a real worker process."""

from __future__ import annotations

import pytest

import pgbaton
from tests import app_under_test


def test_defer_and_wait_returns_what_the_worker_returned(start_worker):
    start_worker()
    assert app_under_test.work.defer_and_wait(30, seconds=0) == "ok"
    with pytest.raises(pgbaton.JobFailed) as failed:
        app_under_test.always_fails.defer_and_wait(30, n=1)
    assert len(failed.value.errors) == 2  # max_attempts=2: both attempts' errors


async def test_defer_and_wait_async_returns_what_the_worker_returned(start_worker):
    start_worker()
    assert await app_under_test.sync_work.defer_and_wait_async(30, seconds=0) == "ok"


def test_a_job_in_the_callers_transaction_cannot_be_waited_for(app_schema, dsn):
    import psycopg

    with psycopg.connect(dsn) as conn, pytest.raises(pgbaton.InvalidArgument,
                                                     match="cannot be waited for"):
        app_under_test.work.using(conn=conn).defer_and_wait(1, seconds=0)
