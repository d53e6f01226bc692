"""A pool connection prepares each statement at its second run, so the claim is planned
twice per connection (once unprepared, then its generic plan:
plan_cache_mode=force_generic_plan), not at each of psycopg's first five runs, which go
unprepared and are planned every time (3.3 ms a plan of the claim: 80 ms of a worker's
first seconds, four connections of six plans each; docs/explanation/claim-table.md).
Not at its first run: a statement that has never succeeded on a connection would leave
a prepared statement on the server at each failing call."""

from __future__ import annotations

import pytest

import pgbaton

CLAIMS = 3


def _claim_plans(dsn: str, schema: str, **options: object) -> list[dict[str, int]]:
    """What pg_prepared_statements says of the claim after CLAIMS claims through a Queue
    of one connection (every statement on it)."""
    with pgbaton.Queue(dsn, schema=schema, pool_size=1, **options) as one:
        for n in range(CLAIMS):
            one.enqueue("t", {"n": n})
            assert len(one.engine.claim_batch("w", limit=1).claims) == 1
        with one._connection() as conn:
            return conn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE '%%The SKIP LOCKED claim%%'"
            ).fetchall()


def test_the_claim_is_prepared_at_its_second_run(queue, dsn, schema):
    # Every run but the first went through the prepared statement and its one generic
    # plan (generic_plans counts the runs that used it).
    assert _claim_plans(dsn, schema) == [{"generic_plans": CLAIMS - 1, "custom_plans": 0}]


def test_a_transaction_pool_still_prepares_nothing(queue, dsn, schema):
    """prepare=False (a transaction pool, where a prepared statement can reach another
    server connection) keeps statements unprepared."""
    assert _claim_plans(dsn, schema, prepare=False) == []


def test_a_statement_that_always_fails_leaves_nothing_prepared(queue, dsn, schema):
    """psycopg prepares before it runs: had it prepared at the first run, each failing
    call of a statement that never succeeded on the connection would leave one more
    prepared statement on the server, for the connection's life."""
    one = pgbaton.Queue(dsn, schema=schema, pool_size=1)
    try:
        for _ in range(CLAIMS):
            with pytest.raises(pgbaton.JobNotFound):
                one.send_event_by_key("no-such-key", "ev")
        with one._connection() as conn:
            row = conn.execute("SELECT count(*) AS n FROM pg_prepared_statements").fetchone()
            assert row == {"n": 0}
    finally:
        one.close()
