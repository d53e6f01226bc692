"""The worker's fenced writes settle on one cached plan, however small their batches.

Each of them joins `jobs` to the arrays it is sent. Planning such a statement afresh
costs as much as running it for a batch of eight (the table's fourteen indexes, most
partial, are looked over each time), and PostgreSQL plans a prepared statement afresh
at every call for as long as the plan made for the call's own values looks cheaper
than the generic plan: with the arrays' lengths known, a batch shorter than the
generic estimate (ten elements) always does. So the statements read their arrays
through a scalar subquery, whose length no plan knows, and after five calls the cached
generic plan is used (docs/explanation/performance.md, "Planned once").
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgbaton
from pgbaton import _sql
from pgbaton._engine_base import claim_params
from tests.helpers import auto_explained, plan_nodes

# Sent by the worker (and the handlers' context) at every batch, from one job up.
FENCED_WRITES = (
    "job_heartbeat_many", "job_hold_key_many", "job_start_many", "job_progress_many",
    "job_logs_insert_many", "job_complete_many", "job_fail_many", "job_release_many",
    "job_end_many",
)
CALLS = 12
JOBS = 5_000
PLACEHOLDER = re.compile(r"%\((\w+)\)[sb](::([a-z0-9_]+(\[\])?))?")
ELEMENT = {
    "bigint": 1, "uuid": uuid.UUID(int=1), "jsonb": None, "float8": 1.0, "float4": 0.5,
    "text": "x", "int4": 1, "integer": 1, "timestamptz": None, "boolean": False,
}


def values_for(statement: str, length: int) -> dict[str, Any]:
    """Parameters of the right types for `statement`: arrays of `length` elements."""
    params: dict[str, Any] = {}
    for match in PLACEHOLDER.finditer(statement):
        name, cast, array = match.group(1), match.group(3), match.group(4)
        if cast is None:
            raise AssertionError(f"{name} has no cast to build a value from")
        element = ELEMENT[cast.removesuffix("[]")]
        params[name] = [element] * length if array else element
    return params


@pytest.fixture(scope="module")
def filled(server_dsn: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with pgbaton.Queue(server_dsn, schema=name) as queue:
        queue.migrate()
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        # A table of some size, with statistics: on an empty one every plan is cheap.
        conn.execute(
            f'INSERT INTO "{name}".jobs (task) SELECT %s FROM generate_series(1, %s)',  # type: ignore[arg-type]
            ("t", JOBS),
        )
        conn.execute(f'VACUUM ANALYZE "{name}".jobs')  # type: ignore[arg-type]
    yield name
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{name}" CASCADE')  # type: ignore[arg-type]


@pytest.mark.parametrize("name", FENCED_WRITES)
def test_a_fenced_write_is_planned_once(server_dsn: str, filled: str, name: str) -> None:
    statement = _sql.queries(filled)[name]
    with psycopg.connect(server_dsn, autocommit=True, prepare_threshold=0) as conn:
        for call in range(CALLS):
            # Batches of one to eight jobs, none of them running: nothing is written.
            conn.execute(statement, values_for(statement, 1 + call % 8))  # type: ignore[arg-type]
        (generic, custom), = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE NOT from_sql",
            prepare=False,
        ).fetchall()
    # The first five calls are planned for their own values, as for every prepared
    # statement; from then on the one generic plan.
    assert (generic, custom) == (CALLS - 5, 5)


@pytest.mark.parametrize("name", FENCED_WRITES)
def test_the_generic_plan_reads_jobs_by_id(server_dsn: str, filled: str, name: str) -> None:
    """Made for ten elements, the plan still fits a batch of 500: one probe of the
    primary key each, never a scan of the table."""
    statement = _sql.queries(filled)[name]
    with psycopg.connect(server_dsn, autocommit=True, prepare_threshold=0) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        plans = auto_explained(conn)
        conn.execute(statement, values_for(statement, 500))  # type: ignore[arg-type]
    scans = [(node["Node Type"], node.get("Index Name"))
             for plan in plans for node in plan_nodes(plan["Plan"])
             if node.get("Relation Name") == "jobs"]
    assert scans and all(scan in {("Index Scan", "jobs_pkey"), ("ModifyTable", None)}
                         for scan in scans), scans


@pytest.mark.parametrize("queues", [None, ["default"], ["default", "mail"]])
def test_the_claim_is_planned_once(server_dsn: str, filled: str, queues: list[str] | None):
    """The claims too, job_claim_many and job_claim_queues: planned for one named
    queue, the named queues' claim looked cheaper than the generic plan's ten, and a
    worker with --queues planned its claim (more than a millisecond) at every call. The
    limit varies from call to call as a worker's does."""
    statement = _sql.queries(filled)["job_claim_many" if queues is None else "job_claim_queues"]
    with psycopg.connect(server_dsn, autocommit=True, prepare_threshold=0) as conn:
        for call in range(CALLS):
            params = claim_params("w", 1 + call % 32, 30.0, queues, None)
            conn.execute(statement, params)
        (generic, custom), = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE NOT from_sql",
            prepare=False,
        ).fetchall()
    # Five plans for the calls' own values, as always, and perhaps one more while the
    # average of their costs settles (the limit varies); then the generic plan.
    assert custom <= 6 and generic == CALLS - custom
