"""A pool connection prepares each statement at its first run, so the claim is planned
once per connection (its generic plan: plan_cache_mode=force_generic_plan), not also
at each of psycopg's first five runs, which go unprepared and are planned every time
(3.3 ms a plan of the claim: 80 ms of a worker's first seconds, four connections of six
plans each; docs/explanation/claim-table.md)."""

from __future__ import annotations

import pgbaton

CLAIMS = 3


def _plans(conn, marker: str) -> list[dict[str, int]]:
    return conn.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
        " WHERE statement LIKE %s", (f"%{marker}%",)
    ).fetchall()


def test_the_claim_is_prepared_and_planned_once_at_its_first_run(queue, dsn, schema):
    one = pgbaton.Queue(dsn, schema=schema, pool_size=1)  # every statement on one conn
    try:
        for n in range(CLAIMS):
            one.enqueue("t", {"n": n})
            assert len(one.engine.claim_batch("w", limit=1).claims) == 1
        with one._connection() as conn:
            # Every run went through the prepared statement and its one generic plan
            # (generic_plans counts the runs that used it).
            assert _plans(conn, "The SKIP LOCKED claim") == [
                {"generic_plans": CLAIMS, "custom_plans": 0}]
    finally:
        one.close()


def test_a_transaction_pool_still_prepares_nothing(queue, dsn, schema):
    """prepare=False (a transaction pool, where a prepared statement can reach another
    server connection) keeps statements unprepared."""
    one = pgbaton.Queue(dsn, schema=schema, pool_size=1, prepare=False)
    try:
        for n in range(CLAIMS):
            one.enqueue("t", {"n": n})
            assert len(one.engine.claim_batch("w", limit=1).claims) == 1
        with one._connection() as conn:
            assert _plans(conn, "The SKIP LOCKED claim") == []
    finally:
        one.close()
