"""The claim is served by the partial index jobs_claimable, however many jobs are done.

One table is filled per module (a million done rows, a thousand pending ones) because the
fill dominates the runtime; every test leaves it as it found it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import DictRow, dict_row

import pgbaton
from pgbaton import _sql

DONE_ROWS = 1_000_000
PENDING_ROWS = 1_000


@pytest.fixture(scope="module")
def big(server_dsn: str) -> Iterator[tuple[str, psycopg.Connection[DictRow]]]:
    """A migrated schema whose jobs table holds a million done rows and a thousand pending."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    queue = pgbaton.Queue(server_dsn, schema=schema)
    queue.migrate()
    queue.close()
    with psycopg.connect(server_dsn, autocommit=True, row_factory=dict_row) as conn:
        try:
            conn.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
            # The done rows are older than every pending row and share its priority, so
            # an index that kept them would have to step over all of them before the
            # first claimable row: the worst case the partial index exists to avoid.
            conn.execute(
                """
                INSERT INTO jobs (id, task, status, run_at, created_at, attempts, finished_at)
                SELECT g, 'old_report', 'done',
                       now() - interval '1 year' + g * interval '30 seconds',
                       now() - interval '1 year' + g * interval '30 seconds',
                       1, now() - interval '1 day'
                FROM generate_series(1, %s) AS g
                """,
                (DONE_ROWS,),
            )
            conn.execute(
                "SELECT setval(pg_get_serial_sequence('jobs', 'id'), %s)", (DONE_ROWS,)
            )
            conn.execute(
                "INSERT INTO jobs (task, args) SELECT 'send_email', jsonb_build_object('n', g)"
                " FROM generate_series(1, %s) AS g",
                (PENDING_ROWS,),
            )
            conn.execute("ANALYZE jobs")
            counts = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'done') AS done,"
                " count(*) FILTER (WHERE status = 'pending') AS pending FROM jobs"
            ).fetchone()
            assert counts == {"done": DONE_ROWS, "pending": PENDING_ROWS}
            yield schema, conn
        finally:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]


def _claim_params(
    limit: int, queues: list[str] | None, tasks: list[str] | None = None
) -> dict[str, Any]:
    """The parameters AsyncQueue.claim binds, with the types it binds them as."""
    return {
        "worker_id": "explainer", "limit": limit, "lease": 30.0, "queues": queues,
        "tasks": tasks, "starting": limit, "after": None,
    }


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _candidate_scan(
    plan: dict[str, Any], index: str = "jobs_claimable"
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The node that reads jobs for the candidates through `index`, and every node from
    the LIMIT of the claim's arm that reads it down (the arm gathers the picked ids into
    one array above it; jobs_claimable: all queues, jobs_queue_claimable: the queues
    given, whose heads are merged under a LIMIT of their own)."""
    [cte] = [n for n in _nodes(plan) if n.get("Subplan Name") == "CTE candidate"]
    limits = [n for n in _nodes(cte) if n["Node Type"] == "Limit"
              and any(m.get("Index Name") == index for m in _nodes(n))]
    # The innermost such LIMIT: the one right above the scan.
    limit = limits[-1]
    # Left out: the InitPlan that reads the small queues table once per claim (the
    # paused and limited queues the plain claim leaves to job_claim_flow).
    cte_nodes = [
        n for n in _nodes({**limit, "Plans": [
            c for c in limit.get("Plans", []) if c.get("Parent Relationship") != "InitPlan"
        ]})
    ]
    node = limit
    # Limit -> LockRows -> the scan: each has one input below it until the scan.
    while "Relation Name" not in node:
        inputs = [c for c in node.get("Plans", []) if c.get("Parent Relationship") == "Outer"]
        assert len(inputs) == 1, f"unexpected shape under {node['Node Type']}: {cte}"
        node = inputs[0]
    return node, cte_nodes


def _assert_served_by_jobs_claimable(
    plan: dict[str, Any], index: str = "jobs_claimable"
) -> dict[str, Any]:
    scan, cte_nodes = _candidate_scan(plan, index)
    assert scan["Relation Name"] == "jobs"
    assert scan["Node Type"] == "Index Scan", scan
    assert scan["Index Name"] == index, scan
    assert scan["Scan Direction"] == "Forward"
    # The index hands rows over in claim order, so nothing above the scan sorts them.
    assert [n["Node Type"] for n in cte_nodes][:2] == ["Limit", "LockRows"]
    assert not [n for n in cte_nodes if n["Node Type"] in ("Sort", "Incremental Sort")]
    whole_table_reads = [
        n for n in _nodes(plan)
        if n.get("Relation Name") == "jobs"
        and n["Node Type"] in ("Seq Scan", "Bitmap Heap Scan", "Tid Range Scan")
    ]
    assert whole_table_reads == []
    return scan


@pytest.mark.parametrize(
    ("limit", "queues", "tasks"),
    [
        (1, None, None),
        (10, None, None),
        (10, None, ["send_email", "resize_image"]),
    ],
)
def test_claim_plan_reads_the_head_of_jobs_claimable(big, limit, queues, tasks):
    """The planned claim reads jobs through jobs_claimable in claim order, with no table
    scan and no sort, even with a million done rows in the table."""
    schema, conn = big
    query = _sql.queries(schema)["job_claim_many"]
    # An unnamed statement is planned with these values, as the library's first
    # executions on a connection are.
    [row] = conn.execute(
        "EXPLAIN (FORMAT JSON) " + query,  # type: ignore[operator]
        _claim_params(limit, queues, tasks),
        prepare=False,
    ).fetchall()
    _assert_served_by_jobs_claimable(row["QUERY PLAN"][0]["Plan"])


def test_claim_plan_of_named_queues_reads_the_head_of_jobs_queue_claimable(big):
    """With queues given, each named queue's head is read from jobs_queue_claimable, in
    claim order, with no table scan and no sort below the merge
    (tests/engine/test_claim_named_queues.py: also under the generic plan)."""
    schema, conn = big
    query = _sql.queries(schema)["job_claim_queues"]
    [row] = conn.execute(
        "EXPLAIN (FORMAT JSON) " + query,  # type: ignore[operator]
        _claim_params(10, ["default", "mail"]),
        prepare=False,
    ).fetchall()
    _assert_served_by_jobs_claimable(row["QUERY PLAN"][0]["Plan"], "jobs_queue_claimable")


def test_generic_plan_of_the_prepared_claim_also_reads_jobs_claimable(big, server_dsn):
    """The generic plan, which a long-lived worker gets once psycopg prepares the claim,
    also reads jobs through jobs_claimable without a sort."""
    schema, _ = big
    query = _sql.queries(schema)["job_claim_many"]
    names: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", placeholder, query)
    params = _claim_params(10, None)
    execute = sql.SQL("EXECUTE claim ({})").format(
        sql.SQL(", ").join(sql.Literal(params[name]) for name in names)
    )
    with psycopg.connect(server_dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute("PREPARE claim AS " + prepared)  # type: ignore[operator]
        [row] = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) ") + execute).fetchall()
    _assert_served_by_jobs_claimable(row["QUERY PLAN"][0]["Plan"])


def test_claim_touches_a_handful_of_pages_not_the_table(big):
    """Executed, a claim of 10 reads exactly 10 index entries and a few dozen pages,
    against the tens of thousands of pages the done rows fill."""
    schema, conn = big
    query = _sql.queries(schema)["job_claim_many"]
    table_pages = conn.execute(
        "SELECT pg_relation_size('jobs') / current_setting('block_size')::int AS pages"
    ).fetchone()["pages"]  # type: ignore[index]
    assert table_pages > 10_000

    # EXPLAIN ANALYZE runs the claim; the rollback gives the ten jobs back.
    with conn.transaction(force_rollback=True):
        [row] = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query,  # type: ignore[operator]
            _claim_params(10, None),
            prepare=False,
        ).fetchall()
    plan = row["QUERY PLAN"][0]["Plan"]
    scan = _assert_served_by_jobs_claimable(plan)

    assert plan["Actual Rows"] == 10  # ten jobs were claimed
    assert scan["Actual Rows"] == 10
    assert scan.get("Rows Removed by Filter", 0) == 0
    scan_pages = scan["Shared Hit Blocks"] + scan["Shared Read Blocks"]
    statement_pages = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert scan_pages <= 20, scan
    # The whole statement includes writing ten new row versions and their index entries.
    assert statement_pages < table_pages / 50, (statement_pages, table_pages)

    pending = conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'pending'").fetchone()
    assert pending == {"n": PENDING_ROWS}


def test_a_backlog_of_other_tasks_at_the_head_is_stepped_over_in_the_index(big):
    """A worker that knows only `resize_image`, behind a thousand `send_email` jobs at the
    head of the queue, claims its jobs through jobs_claimable: it steps over one index
    entry per job of the other task, and still reads nothing like the table."""
    schema, conn = big
    query = _sql.queries(schema)["job_claim_many"]
    table_pages = conn.execute(
        "SELECT pg_relation_size('jobs') / current_setting('block_size')::int AS pages"
    ).fetchone()["pages"]  # type: ignore[index]
    with conn.transaction(force_rollback=True):
        conn.execute(
            "INSERT INTO jobs (task) SELECT 'resize_image' FROM generate_series(1, 10)"
        )
        [row] = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query,  # type: ignore[operator]
            _claim_params(10, None, ["resize_image"]),
            prepare=False,
        ).fetchall()
        plan = row["QUERY PLAN"][0]["Plan"]
        scan = _assert_served_by_jobs_claimable(plan)
        assert plan["Actual Rows"] == 10
        assert scan["Rows Removed by Filter"] == PENDING_ROWS, scan
        statement_pages = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
        assert statement_pages < table_pages / 20, (statement_pages, table_pages)
        claimed = conn.execute(
            "SELECT count(*) FILTER (WHERE task = 'resize_image') AS mine,"
            " count(*) FILTER (WHERE task = 'send_email') AS other"
            " FROM jobs WHERE status = 'running'"
        ).fetchone()
        assert claimed == {"mine": 10, "other": 0}
