"""Every statement that reads leases reads jobs_held, never the table: with 200,000
finished jobs and 100 running (ten of them with their lease run out), the reaper, the
flow claim's held count, doctor's expired leases and the dashboard's and queue list's
counts of held jobs are planned onto the index (migration 23).

The flow claim is a plpgsql function, so every statement's plan comes from auto_explain
(nested statements, sent to the client), as in tests/flow/test_flow_plan.py.
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
from pgbaton.job_filter import JobFilter
from tests.helpers import explained_run, plan_nodes

FINISHED = 200_000
RUNNING = 100
EXPIRED = 10
QUEUES = ["default", "mail", "limited"]


@pytest.fixture(scope="module")
def big(server_dsn: str) -> Iterator[str]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with pgbaton.Queue(server_dsn, schema=schema) as queue:
        queue.migrate()
        queue.set_concurrency("limited", 1_000)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
        conn.execute(
            "INSERT INTO jobs (queue, task, status, attempts, finished_at)"
            " SELECT (%s::text[])[1 + i %% 3], 't', 'done', 1, now()"
            " FROM generate_series(1, %s) AS i", (QUEUES, FINISHED),
        )
        conn.execute(
            "INSERT INTO jobs (queue, task, status, claim_token, lease_until, worker_id,"
            " attempts, started_at)"
            " SELECT (%s::text[])[1 + i %% 3], 't', 'running', gen_random_uuid(),"
            "  now() + CASE WHEN i <= %s THEN -interval '1 minute' ELSE interval '1 hour' END"
            "   + i * interval '1 ms',"
            "  'w' || i %% 4, 1, now()"
            " FROM generate_series(1, %s) AS i", (QUEUES, EXPIRED, RUNNING),
        )
        conn.execute(
            "INSERT INTO jobs (queue, task) SELECT 'limited', 't' FROM generate_series(1, 50)"
        )
        conn.execute("VACUUM ANALYZE jobs")
    yield schema
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')  # type: ignore[arg-type]


def _plans(server_dsn: str, schema: str, name: str, params: dict[str, Any],
           runs: int = 1) -> list[dict[str, Any]]:
    return explained_run(server_dsn, schema, name, params, runs)[0]


def _job_scans(plans: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """Every node that reads the jobs table: (node type, index)."""
    return [
        (node["Node Type"], node.get("Index Name"))
        for plan in plans for node in plan_nodes(plan["Plan"])
        if node.get("Relation Name") == "jobs" or node["Node Type"] == "Bitmap Index Scan"
    ]


def _reads_jobs_held_only(scans: list[tuple[str, str | None]], *others: str) -> None:
    assert ("Seq Scan", None) not in scans, scans
    assert any(index == "jobs_held" for _, index in scans), scans
    allowed = {"jobs_held", None, *others}  # None: a bitmap heap scan over jobs_held
    assert {index for _, index in scans} <= allowed, scans


@pytest.mark.parametrize(("name", "params"), [
    ("job_reap", {}),
    ("doctor_expired_leases", {"grace": 0.0, "limit": 50}),
    ("dashboard_workers", {}),
    ("worker_list", {"stale_after": 60.0}),
])
def test_the_readers_of_every_lease_read_jobs_held(big, server_dsn, name, params):
    """The reaper, doctor's expired leases and the lists of workers holding jobs read
    jobs_held, testing lease_until in the index, not the 200,000 finished rows."""
    _reads_jobs_held_only(_job_scans(_plans(server_dsn, big, name, params)))


def test_the_reaper_reaps_the_expired_leases_through_jobs_held(big, server_dsn):
    """Executed (and rolled back), the reaper's scan finds exactly the expired leases."""
    with psycopg.connect(server_dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(f'SET search_path TO "{big}"')  # type: ignore[arg-type]
        with conn.transaction(force_rollback=True):
            [row] = conn.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + _sql.queries(big)["job_reap"]  # type: ignore[operator]
            ).fetchall()
    plan = row["QUERY PLAN"][0]["Plan"]
    scans = [n for n in plan_nodes(plan) if n.get("Relation Name") == "jobs" and "Index Cond" in n]
    assert scans and all(n["Index Name"] == "jobs_held" for n in scans), scans
    assert sum(int(n["Actual Rows"]) for n in scans) == EXPIRED


def test_the_queue_counts_of_held_jobs_read_jobs_held(big, server_dsn):
    """The dashboard's running count per queue and the queue list's held counts read
    jobs_held by queue (the other counts read their own partial indexes)."""
    counts = _job_scans(_plans(server_dsn, big, "dashboard_queue_counts", {}))
    _reads_jobs_held_only(counts, "jobs_claimable", "jobs_failed")
    settings = _job_scans(_plans(server_dsn, big, "queue_settings_list", {"name": None}))
    _reads_jobs_held_only(settings, "jobs_queue_claimable")


def test_the_job_lists_running_tab_reads_jobs_held(big, server_dsn):
    """The job list's running tab counts through jobs_held, not the 200,000 finished
    rows: a running job always holds a lease (the CHECK jobs_token_while_held)."""
    params = {**JobFilter().params(), "status": None, "cap": 10_000}
    plans = _plans(server_dsn, big, "dashboard_state_counts", params)
    nodes = [node for plan in plans for node in plan_nodes(plan["Plan"])]
    assert not [node for node in nodes if node["Node Type"] == "Seq Scan"
                and "'running'" in node.get("Filter", "")], nodes
    assert any(node.get("Index Name") == "jobs_held" for node in nodes), nodes


@pytest.mark.parametrize("finished", [None, [str(uuid.uuid4())]])
def test_the_flow_claims_held_count_reads_one_queue_of_jobs_held(big, server_dsn, finished):
    """The flow claim counts a limited queue's held jobs in jobs_held, by queue: with and
    without finished claims to leave out, and in the generic plan of a worker's
    long-lived connection (the eighth call)."""
    params = {"worker_id": "explainer", "limit": 10, "lease": 30.0, "queues": ["limited"],
              "tasks": None, "finished": finished, "starting": 10, "after": None}
    for runs in (1, 8):
        plans = _plans(server_dsn, big, "job_claim_flow", params, runs=runs)
        held = [
            node for plan in plans for node in plan_nodes(plan["Plan"])
            if node.get("Index Name") == "jobs_held"
        ]
        assert held, _job_scans(plans)
        assert all(node["Index Cond"].startswith("(queue = ") for node in held), held
        assert ("Seq Scan", None) not in _job_scans(plans)
