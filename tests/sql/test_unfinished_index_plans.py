"""Statements that read only unfinished jobs read the partial indexes of unfinished
jobs, never the table: with 300,000 done jobs (a third of them keyed), 3,500 pending,
200 running and 100 waiting, an event sent by key reads jobs_key_unfinished and
jobs_key_waiting (migration 25), and doctor's queue lag counts the running jobs in
jobs_held (a running job always holds a lease: the CHECK jobs_token_while_held).

send_event_by_key is a plpgsql function, so its statements' plans come from
auto_explain (nested statements, sent to the client), as in test_held_index_plans.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgbaton
from tests.helpers import explained_run, plan_nodes

DONE = 300_000
PENDING = 3_500
RUNNING = 200
WAITING = 100
KEYS = 1_000
QUEUES = ["default", "mail", "reports"]
KEY = "k-7"  # one job of each unfinished state, beside its done ones


@pytest.fixture(scope="module")
def big(server_dsn: str) -> Iterator[tuple[str, dict[str, int]]]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with pgbaton.Queue(server_dsn, schema=schema) as queue:
        queue.migrate()
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
        conn.execute(
            "INSERT INTO jobs (queue, task, key, status, attempts, finished_at)"
            " SELECT (%s::text[])[1 + i %% 3], 't',"
            "  CASE WHEN i %% 3 = 0 THEN 'k-' || i %% %s END, 'done', 1, now()"
            " FROM generate_series(1, %s) AS i", (QUEUES, KEYS, DONE),
        )
        # Keyed pending jobs of keys other than KEY (one running job per key at most).
        conn.execute(
            "INSERT INTO jobs (queue, task, key, run_at)"
            " SELECT (%s::text[])[1 + i %% 3], 't',"
            "  CASE WHEN i %% 3 = 0 THEN 'p-' || i %% 500 END, now() + i * interval '1 s'"
            " FROM generate_series(1, %s) AS i", (QUEUES, PENDING),
        )
        conn.execute(
            "INSERT INTO jobs (queue, task, key, status, claim_token, lease_until, worker_id,"
            " attempts, started_at)"
            " SELECT (%s::text[])[1 + i %% 3], 't', CASE WHEN i %% 3 = 0 THEN 'r-' || i END,"
            "  'running', gen_random_uuid(), now() + interval '1 hour', 'w', 1, now()"
            " FROM generate_series(1, %s) AS i", (QUEUES, RUNNING),
        )
        conn.execute(
            "INSERT INTO jobs (queue, task, key, status, waiting_for)"
            " SELECT 'default', 't', 'w-' || i, 'waiting', 1 FROM generate_series(1, %s) AS i",
            (WAITING,),
        )
        ids = {
            status: conn.execute(query, (KEY,)).fetchone()[0]  # type: ignore[index]
            for status, query in [
                ("pending", "INSERT INTO jobs (queue, task, key) VALUES ('default', 't', %s)"
                            " RETURNING id"),
                ("running", "INSERT INTO jobs (queue, task, key, status, claim_token,"
                            " lease_until, attempts, started_at) VALUES ('default', 't', %s,"
                            " 'running', gen_random_uuid(), now() + interval '1 hour', 1,"
                            " now()) RETURNING id"),
                ("waiting", "INSERT INTO jobs (queue, task, key, status, waiting_for)"
                            " VALUES ('default', 't', %s, 'waiting', 1) RETURNING id"),
            ]
        }
        conn.execute("VACUUM ANALYZE jobs")
    yield schema, ids
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')  # type: ignore[arg-type]


def _job_scans(plans: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """Every node that reads the jobs table or one of its indexes: (node type, index)."""
    return [
        (node["Node Type"], node.get("Index Name"))
        for plan in plans for node in plan_nodes(plan["Plan"])
        if node.get("Relation Name") == "jobs" or "Index Name" in node
    ]


@pytest.mark.parametrize("runs", [1, 8])
def test_an_event_by_key_reads_the_keys_unfinished_jobs_by_index(big, server_dsn, runs):
    """send_event_by_key finds the key's pending, running and waiting jobs through
    jobs_key_unfinished and jobs_key_waiting, not among the 300,000 done rows, in a
    custom plan and in the generic plan of a long-lived connection; it still sends the
    event to all three, in id order, and to none of the key's done jobs."""
    schema, ids = big
    plans, rows = explained_run(server_dsn, schema, "job_event_send_by_key",
                       {"key": KEY, "event": "e", "payload": None}, runs=runs)
    assert rows == [{"ids": sorted(ids.values())}]
    scans = _job_scans(plans)
    assert ("Seq Scan", None) not in scans, scans
    indexes = {index for _, index in scans}
    assert {"jobs_key_unfinished", "jobs_key_waiting"} <= indexes, scans
    # Each of the key's jobs is then sent its event by id (send_event).
    assert indexes <= {"jobs_key_unfinished", "jobs_key_waiting", "jobs_pkey", None,
                       "job_events_pkey", "job_events_job_name"}, scans


def test_an_event_by_key_still_refuses_a_key_with_only_done_jobs(big, server_dsn):
    """The key of done jobs alone (k-0 .. k-999 each have some) is refused as before."""
    schema, _ = big
    with pytest.raises(psycopg.errors.NoDataFound, match="no unfinished job has key 'k-3'"):
        explained_run(server_dsn, schema, "job_event_send_by_key",
             {"key": "k-3", "event": "e", "payload": None})


def test_the_doctors_queue_lag_reads_only_the_unfinished_jobs_indexes(big, server_dsn):
    """doctor's queue lag counts the pending jobs in jobs_claimable (or its per-queue
    twin) and the running ones in jobs_held: no Seq Scan over the done rows, and the
    counts are those of the table."""
    schema, _ = big
    plans, rows = explained_run(server_dsn, schema, "doctor_queue_lag", {})
    scans = _job_scans(plans)
    assert ("Seq Scan", None) not in scans, scans
    indexes = {index for _, index in scans}
    assert "jobs_held" in indexes, scans
    assert indexes <= {"jobs_held", "jobs_claimable", "jobs_queue_claimable", None,
                       "queues_pkey"}, scans
    assert sum(row["running"] for row in rows) == RUNNING + 1
    assert sum(row["due"] + row["scheduled"] for row in rows) == PENDING + 1
