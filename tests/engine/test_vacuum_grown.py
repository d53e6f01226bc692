"""The leader vacuums a jobs table that outgrew its planner statistics (engine.vacuum's
`grown`; docs/explanation/performance.md, "Planned once").

A worker prepares its claim in its first seconds, often on a table that is nearly empty
and was never vacuumed or analyzed: the planner takes it for ten pages, and the claim's
UPDATE finds its candidates by reading the whole table. The cached plan is kept until
the table's statistics change, which with autovacuum off (or before its first visit)
came only with the leader's VACUUM of 50,000 dead rows. A VACUUM once the table holds
ten times the rows its statistics last counted makes the claim planned again, onto
jobs_pkey.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import pgbaton
from pgbaton import _sql
from pgbaton._engine_base import claim_params
from pgbaton.engine import GROWN_MIN_ROWS
from tests.helpers import auto_explained, plan_nodes
from tests.worker_processes import scalar, wait_until

THRESHOLDS = {"min_dead": 50_000, "min_dead_share": 0.05}  # the leader's


@pytest.fixture
def fresh(other_schema: str, server_dsn: str) -> Iterator[tuple[pgbaton.Queue, str]]:
    """A schema of its own, never vacuumed, whose table autovacuum leaves alone."""
    with pgbaton.Queue(server_dsn, schema=other_schema) as queue:
        queue.migrate()
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'ALTER TABLE "{other_schema}".jobs SET (autovacuum_enabled = false)')  # type: ignore[arg-type]
        yield queue, other_schema


def add_jobs(conn: psycopg.Connection[Any], schema: str, count: int) -> None:
    """Insert `count` pending jobs, and wait for the statistics to count them live."""
    before = live(conn, schema)
    conn.execute(
        f'INSERT INTO "{schema}".jobs (task) SELECT %s FROM generate_series(1, %s)',  # type: ignore[arg-type]
        ("t", count),
    )
    conn.execute("SELECT pg_stat_force_next_flush()")
    wait_until(lambda: live(conn, schema) >= before + count,
               what="the statistics to count the new rows")


def live(conn: psycopg.Connection[Any], schema: str) -> int:
    return int(scalar(conn, "SELECT coalesce(n_live_tup, 0) AS live FROM pg_stat_user_tables"
                            " WHERE relid = %s::regclass", f'"{schema}".jobs'))


def planned(conn: psycopg.Connection[Any], schema: str) -> float:
    return float(scalar(conn, "SELECT reltuples FROM pg_class WHERE oid = %s::regclass",
                        f'"{schema}".jobs'))


def test_the_leader_vacuums_a_table_that_outgrew_its_statistics(fresh, server_dsn: str):
    queue, schema = fresh
    with psycopg.connect(server_dsn, autocommit=True, row_factory=dict_row) as conn:
        add_jobs(conn, schema, GROWN_MIN_ROWS - 1)
        assert queue.engine.vacuum(**THRESHOLDS, grown=10.0) == 0  # too small to matter
        add_jobs(conn, schema, 1)
        assert planned(conn, schema) < 0  # never counted
        assert queue.engine.vacuum(**THRESHOLDS) == 0  # without `grown`, as before
        assert planned(conn, schema) < 0
        queue.engine.vacuum(**THRESHOLDS, grown=10.0)
        assert planned(conn, schema) == GROWN_MIN_ROWS
        add_jobs(conn, schema, 8_000)  # 9x what the statistics say: not yet
        queue.engine.vacuum(**THRESHOLDS, grown=10.0)
        assert planned(conn, schema) == GROWN_MIN_ROWS
        add_jobs(conn, schema, 2_000)  # past 10x
        queue.engine.vacuum(**THRESHOLDS, grown=10.0)
        assert planned(conn, schema) == 11_000


def test_the_claim_prepared_on_a_small_table_is_planned_again(fresh, server_dsn: str):
    queue, schema = fresh
    claim = _sql.queries(schema)["job_claim_many"]
    params = claim_params("w", 8, 30.0, None, None)
    with psycopg.connect(server_dsn, autocommit=True, row_factory=dict_row) as conn, \
            psycopg.connect(server_dsn, autocommit=True, prepare_threshold=0) as worker:
        # The generic plan, as a worker's claim settles on it within six calls (a test's
        # few calls on an empty table may keep to plans for their own values).
        worker.execute("SET plan_cache_mode = force_generic_plan")
        worker.execute(claim, params)
        add_jobs(conn, schema, 20_000)
        plans = auto_explained(worker)

        def table_scans() -> list[str]:
            plans.clear()
            worker.execute(claim, params)
            return [node["Node Type"] for plan in plans for node in plan_nodes(plan["Plan"])
                    if node.get("Relation Name") == "jobs" and node["Node Type"] == "Seq Scan"]

        if table_scans() != ["Seq Scan"]:
            pytest.skip("this server planned the claim on the empty table onto its indexes")
        queue.engine.vacuum(**THRESHOLDS, grown=10.0)
        assert table_scans() == []
