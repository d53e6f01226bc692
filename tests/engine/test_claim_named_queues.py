"""A claim of named queues reads only those queues' heads, however big another queue's
backlog and whatever plan the server settles on.

The backlog is older and of higher priority than the named queue's jobs, and ANALYZE
runs before the named queue gets any: the statistics say the table holds one queue, so
a plan that trusted them would read jobs_claimable in claim order and filter by queue,
stepping over the whole backlog. The generic plan (a worker's connection ends on it) is
forced, and what the claim read is counted from EXPLAIN (ANALYZE, BUFFERS).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import re
import traceback
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import DictRow, dict_row

import pgbaton
from pgbaton import _sql
from tests.helpers import run_at_once

BACKLOG = 60_000
SIDE_JOBS = 30
SPAWN = multiprocessing.get_context("spawn")
# A spawned process imports psycopg and pgbaton afresh: seconds on a loaded machine.
PROCESS_TIMEOUT_SECONDS = 90.0
PROCESSES = 4


@pytest.fixture(scope="module")
def backlogged(server_dsn: str) -> Iterator[str]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with pgbaton.Queue(server_dsn, schema=schema) as queue:
        queue.migrate()
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        try:
            conn.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
            conn.execute(
                "INSERT INTO jobs (queue, task, priority, run_at)"
                " SELECT 'bulk', 'report', 10, now() - interval '1 day'"
                " FROM generate_series(1, %s)", (BACKLOG,),
            )
            conn.execute("VACUUM ANALYZE jobs")
            # Priorities interleave across the two small queues, so a merge that kept
            # one queue's order and not the other's would be seen.
            conn.execute(
                "INSERT INTO jobs (queue, task, priority, args)"
                " SELECT CASE WHEN g %% 2 = 0 THEN 'side' ELSE 'aside' END, 'mail', g,"
                " jsonb_build_object('n', g) FROM generate_series(1, %s) AS g",
                (SIDE_JOBS,),
            )
            yield schema
        finally:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _explain_generic_claim(
    server_dsn: str, schema: str, queues: list[str] | None, limit: int
) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the claim the engine sends (job_claim_many, or with queues
    job_claim_queues), prepared and run under its generic plan on a connection of its
    own, rolled back."""
    query = _sql.queries(schema)["job_claim_many" if queues is None else "job_claim_queues"]
    names: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", placeholder, query)
    params = {"worker_id": "explainer", "limit": limit, "lease": 30.0, "queues": queues,
              "tasks": None, "starting": limit, "after": None}
    execute = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE claim ({})").format(
        sql.SQL(", ").join(sql.Literal(params[name]) for name in names)
    )
    conn: psycopg.Connection[DictRow]
    with psycopg.connect(server_dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute("SET jit = off")
        conn.execute("PREPARE claim AS " + prepared)  # type: ignore[operator]
        with conn.transaction(force_rollback=True):
            [row] = conn.execute(execute).fetchall()
    return row["QUERY PLAN"][0]["Plan"]  # type: ignore[no-any-return]


def _job_reads(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The executed nodes of the candidate CTE that read jobs for candidates (not the
    per-key probes, which meet no keyed job here)."""
    [cte] = [n for n in _nodes(plan) if n.get("Subplan Name") == "CTE candidate"]
    return [
        n for n in _nodes(cte)
        if n.get("Relation Name") == "jobs" and n.get("Actual Loops", 0) > 0
        and n.get("Alias", "").startswith("c")
    ]


@pytest.mark.parametrize("queues", [["side"], ["side", "aside"]])
def test_generic_plan_of_a_named_queue_claim_skips_the_backlog(
    server_dsn, backlogged, queues
):
    """Under the generic plan, the claim of `side` (and of `side` with `aside`) reads
    its queues' heads from jobs_queue_claimable: ten rows taken, none stepped over, a
    handful of pages, against the backlog's thousands."""
    plan = _explain_generic_claim(server_dsn, backlogged, queues, 10)
    assert plan["Actual Rows"] == 10
    reads = _job_reads(plan)
    assert reads, plan
    assert {n.get("Index Name") for n in reads} == {"jobs_queue_claimable"}, reads
    assert sum(n.get("Rows Removed by Filter", 0) for n in reads) == 0, reads
    assert sum(n["Actual Rows"] for n in reads) <= 10 * len(queues), reads
    # A page per row taken plus the index's descent: 10 to 13 a queue (PostgreSQL 18
    # counts a few more than 15); the backlog behind it would cost thousands.
    pages = sum(n["Shared Hit Blocks"] + n["Shared Read Blocks"] for n in reads)
    assert pages <= 25 * len(queues), reads


def test_generic_plan_of_an_all_queue_claim_still_reads_jobs_claimable(
    server_dsn, backlogged
):
    """Without queues the claim (job_claim_many) reads the head of jobs_claimable and
    nothing else of jobs."""
    plan = _explain_generic_claim(server_dsn, backlogged, None, 10)
    assert plan["Actual Rows"] == 10
    reads = _job_reads(plan)
    assert [n.get("Index Name") for n in reads] == ["jobs_claimable"], reads
    assert reads[0]["Actual Rows"] == 10


def test_prepared_claims_of_named_queues_take_them_in_claim_order(server_dsn, backlogged):
    """Real claims on one connection (prepared after a few, as psycopg does) take only
    the named queues' jobs, merged in priority order across the queues, and the
    backlog is untouched."""
    with pgbaton.Queue(server_dsn, schema=backlogged) as queue:
        taken: list[tuple[str, int]] = []
        for _ in range(SIDE_JOBS // 3 + 1):
            claims = queue.claim("w", limit=3, queues=["side", "aside"])
            priorities = [c.priority for c in claims]
            assert priorities == sorted(priorities, reverse=True)
            taken += [(c.queue, c.priority) for c in claims]
            for claim in claims:
                assert queue.complete(claim)
    try:
        assert sorted(p for _, p in taken) == list(range(1, SIDE_JOBS + 1))
        # Each batch of three was the best left: priorities come off in descending order.
        assert [p for _, p in taken] == list(range(SIDE_JOBS, 0, -1))
        assert {q for q, _ in taken} == {"side", "aside"}
        with psycopg.connect(server_dsn, row_factory=dict_row) as conn:
            [row] = conn.execute(
                sql.SQL("SELECT count(*) AS n FROM {}.jobs"
                        " WHERE queue = 'bulk' AND status = 'pending'").format(
                    sql.Identifier(backlogged))
            ).fetchall()
        assert row["n"] == BACKLOG
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("UPDATE {}.jobs SET status = 'pending', attempts = 0,"
                        " finished_at = NULL, result = NULL"
                        " WHERE queue IN ('side', 'aside')").format(
                    sql.Identifier(backlogged))
            )


def _claimer(
    index: int, dsn: str, schema: str, start: multiprocessing.synchronize.Barrier,
    reports: multiprocessing.Queue[dict[str, Any]],
) -> None:
    """One spawned process: claim batches of the two named queues, each job completed
    with the process's index, until a claim comes back empty."""
    try:
        claimed = 0
        with pgbaton.Queue(dsn, schema=schema) as queue:
            queue.open()
            start.wait(timeout=PROCESS_TIMEOUT_SECONDS)
            while claims := queue.claim(f"w{index}", limit=4, queues=["side", "aside"]):
                for claim in claims:
                    assert queue.complete(claim, {"by": index})
                claimed += len(claims)
        reports.put({"process": index, "claimed": claimed})
    except BaseException:
        start.abort()
        reports.put({"process": index, "error": traceback.format_exc()})


def test_processes_claiming_named_queues_take_each_job_once(queue, db, dsn, schema):
    """Four processes claim two named queues at once, behind another queue's backlog:
    every job of the two is done exactly once, by the one process whose claim took it,
    and the backlog is untouched."""
    db.execute(
        "INSERT INTO jobs (queue, task, priority) SELECT 'bulk', 'report', 10"
        " FROM generate_series(1, 2000)"
    )
    db.execute(
        "INSERT INTO jobs (queue, task, priority)"
        " SELECT CASE WHEN g % 2 = 0 THEN 'side' ELSE 'aside' END, 'mail', g % 7"
        " FROM generate_series(1, 400) AS g"
    )
    ran = run_at_once(_claimer, PROCESSES, dsn, schema)
    results = ran.reports
    assert not ran.errors, "\n".join(ran.errors)
    assert sum(r["claimed"] for r in results) == 400
    assert db.execute(
        "SELECT count(*) AS n, count(*) FILTER (WHERE status = 'done' AND attempts = 1)"
        " AS once, count(DISTINCT result->>'by') AS by"
        " FROM jobs WHERE queue IN ('side', 'aside')"
    ).fetchone() == {"n": 400, "once": 400, "by": PROCESSES}
    assert db.execute(
        "SELECT count(*) AS n FROM jobs WHERE queue = 'bulk' AND status = 'pending'"
        " AND attempts = 0"
    ).fetchone() == {"n": 2000}
