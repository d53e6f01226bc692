"""The flow claim never walks blocked jobs: with 100,000 pending jobs in a paused queue
and 100,000 in a full one, a claim reads what it would read with none of them.

The claim is a plpgsql function, so its statements' plans come from auto_explain
(nested statements, analysed, sent to the client as LOG messages), and its cost from
the function scan's buffer counts, which include everything the function read.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import pgbaton
from pgbaton import _sql
from tests.helpers import auto_explained, plan_nodes

BLOCKED_PER_QUEUE = 100_000
OPEN_JOBS = 50
BATCH = 10


def _make(server_dsn: str, blocked: bool) -> str:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with pgbaton.Queue(server_dsn, schema=schema) as queue:
        queue.migrate()
        queue.pause("blocked")
        queue.set_concurrency("full", 1)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
        if blocked:
            # Higher priority than the open queue's jobs: a claim that walked the
            # claim order across queues would meet all of them first.
            conn.execute(
                "INSERT INTO jobs (queue, task, priority) SELECT q, 'report', 10"
                " FROM unnest(ARRAY['blocked', 'full']) AS q,"
                " generate_series(1, %s)", (BLOCKED_PER_QUEUE,),
            )
            conn.execute(
                "UPDATE jobs SET status = 'running', claim_token = gen_random_uuid(),"
                " lease_until = now() + interval '1 hour', attempts = 1"
                " WHERE id = (SELECT min(id) FROM jobs WHERE queue = 'full')"
            )
        conn.execute(
            "INSERT INTO jobs (queue, task) SELECT 'open', 'report'"
            " FROM generate_series(1, %s)", (OPEN_JOBS,),
        )
        conn.execute("VACUUM ANALYZE jobs")
    return schema


@pytest.fixture(scope="module")
def schemas(server_dsn: str) -> Iterator[dict[str, str]]:
    made = {"blocked": _make(server_dsn, True), "empty": _make(server_dsn, False)}
    yield made
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        for schema in made.values():
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')  # type: ignore[arg-type]


def _claim_explained(server_dsn: str, schema: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """Run one flow claim of BATCH (rolled back) and return the nested statements'
    plans and the claimed rows."""
    with psycopg.connect(server_dsn, autocommit=True, row_factory=dict_row) as conn:
        plans = auto_explained(conn, "auto_explain.log_analyze = on",
                               "auto_explain.log_buffers = on")
        query = _sql.queries(schema)["job_claim_flow"]
        params = {"worker_id": "explainer", "limit": BATCH, "lease": 30.0, "queues": None,
                  "tasks": None, "finished": None, "starting": BATCH, "after": None}
        # The first call of a session also reads the catalogue to plan the function's
        # statements (hundreds of pages); a worker pays that once. Measure the second.
        with conn.transaction(force_rollback=True):
            conn.execute(query, params)  # type: ignore[arg-type]
        plans.clear()
        with conn.transaction(force_rollback=True):
            rows = conn.execute(query, params).fetchall()  # type: ignore[arg-type]
    return plans, rows


def _job_scans(plans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every node of the claim's inner statements that reads the jobs table."""
    return [
        node for plan in plans if "job_claim_flow" not in plan["Query Text"]
        for node in plan_nodes(plan["Plan"]) if node.get("Relation Name") == "jobs"
    ]


def _rows_read(scans: list[dict[str, Any]]) -> int:
    return sum(
        int(node["Actual Rows"] * node["Actual Loops"])
        + int(node.get("Rows Removed by Filter", 0))
        for node in scans
    )


def _function_pages(plans: list[dict[str, Any]]) -> int:
    [outer] = [p for p in plans if "job_claim_flow" in p["Query Text"]]
    plan = outer["Plan"]
    return int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])


def test_the_flow_claim_does_not_walk_jobs_of_paused_or_full_queues(schemas, server_dsn):
    """Behind 200,000 blocked jobs of higher priority, a claim of ten reads the open
    queue's ten through jobs_queue_claimable, no table scan, and about as many index
    entries and pages as with no blocked job at all (within 2x)."""
    blocked_plans, claimed = _claim_explained(server_dsn, schemas["blocked"])
    empty_plans, claimed_empty = _claim_explained(server_dsn, schemas["empty"])

    assert [row["queue"] for row in claimed] == ["open"] * BATCH
    assert len(claimed_empty) == BATCH

    scans = _job_scans(blocked_plans)
    assert scans, "auto_explain showed no inner statement"
    assert not [n for n in scans if n["Node Type"] in ("Seq Scan", "Bitmap Heap Scan")]
    # The open queue's ten (and a row or two past the limit), one entry per queue for
    # finding the queues, one held job of the full queue: nothing near 100,000.
    assert _rows_read(scans) <= 4 * BATCH, [(n["Node Type"], n.get("Index Name"),
                                              n["Actual Rows"]) for n in scans]
    assert "jobs_queue_claimable" in {n.get("Index Name") for n in scans}

    blocked_pages = _function_pages(blocked_plans)
    empty_pages = _function_pages(empty_plans)
    assert blocked_pages <= 2 * empty_pages, (blocked_pages, empty_pages)

