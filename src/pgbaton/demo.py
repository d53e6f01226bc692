"""`make demo`: the seed's story on a real PostgreSQL, with the proof computed in SQL.

Uses PGBATON_DSN or DATABASE_URL when set, else the embedded PostgreSQL 18 server.
Exits non-zero if any invariant failed.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import sys
import time
import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row
from rich.console import Console
from rich.table import Table

from . import embedded
from ._base import DSN_VARIABLES
from .queue import Queue

WORKERS = 8
JOBS = 4000
console = Console()


def _drain(dsn: str, schema: str, worker_id: str, start: Any) -> None:
    """One worker process: claim a batch, commit, work, complete; until the queue is empty."""
    with Queue(dsn, schema=schema, pool_size=1) as queue:
        queue.open()
        start.wait()
        while claims := queue.claim(worker_id, limit=random.randint(1, 10), lease=30):
            queue.complete_many([(claim, {"by": worker_id}) for claim in claims])


def _timeline(queue: Queue, dsn: str) -> bool:
    console.rule("[bold]1. The seed's timeline: a stalled worker is fenced out")
    ids = queue.enqueue_many([{"task": "send_email", "args": {"to": n}} for n in (1, 2, 3)])
    [a] = queue.claim("A", lease=0.3)
    console.print(f"A claims      -> job {a.id}, attempt {a.attempts}")
    [b] = queue.claim("B", lease=30)
    console.print(f"B claims      -> job {b.id}, attempt {b.attempts}")
    console.print("A stalls past its 0.3 s lease ...")
    time.sleep(0.4)
    console.print(f"reaper        -> {queue.reap()} expired lease(s) back to pending")
    [c] = queue.claim("C", lease=30)
    console.print(f"C claims      -> job {c.id}, attempt {c.attempts}")
    late = queue.complete(a)
    console.print(f"A completes   -> accepted: {late}  (its token is stale: it lost the job)")
    ok = queue.complete(c)
    console.print(f"C completes   -> accepted: {ok}")
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            f'SELECT id, status, attempts, claim_token IS NOT NULL FROM "{queue.schema}".jobs'
            " WHERE id = ANY(%s) ORDER BY id",
            (ids,),
        ).fetchall()
    console.print(f"table         -> {rows}")
    return (not late) and ok and [r[:3] for r in rows] == [
        (ids[0], "done", 2), (ids[1], "running", 1), (ids[2], "pending", 0)
    ]


def _hammer(queue: Queue, dsn: str) -> tuple[bool, float]:
    console.rule(f"[bold]2. {WORKERS} worker processes drain {JOBS} jobs with SKIP LOCKED")
    queue.enqueue_many([{"task": "noop", "args": {"n": n}} for n in range(JOBS)])
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(WORKERS + 1)
    workers = [
        context.Process(target=_drain, args=(dsn, queue.schema, f"w{n}", start))
        for n in range(WORKERS)
    ]
    for worker in workers:
        worker.start()
    start.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        row = conn.execute(
            f'SELECT count(*) AS jobs, count(*) FILTER (WHERE status = \'done\') AS done,'
            " count(*) FILTER (WHERE attempts <> 1) AS reclaimed,"
            " count(DISTINCT result->>'by') AS workers"
            f' FROM "{queue.schema}".jobs WHERE task = \'noop\''
        ).fetchone()
    assert row is not None
    table = Table("jobs", "done exactly once", "claimed more than once", "workers used", "jobs/s")
    table.add_row(
        str(row["jobs"]), str(row["done"]), str(row["reclaimed"]), str(row["workers"]),
        f"{JOBS / elapsed:,.0f}",
    )
    console.print(table)
    return row["done"] == JOBS and row["reclaimed"] == 0, JOBS / elapsed


def main() -> int:
    dsn = next((os.environ[v] for v in DSN_VARIABLES if os.environ.get(v)), None)
    if dsn is None:
        console.print("[dim]no PGBATON_DSN or DATABASE_URL: using the embedded PostgreSQL 18[/]")
        dsn = embedded.dsn(embedded.start())
    schema = f"demo_{uuid.uuid4().hex[:8]}"
    with Queue(dsn, schema=schema) as queue:
        queue.migrate()
        try:
            results = {
                "timeline": _timeline(queue, dsn),
                "no double hand-out": _hammer(queue, dsn)[0],
            }
        finally:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    console.rule("[bold]Report (from SQL)")
    for name, passed in results.items():
        console.print(f"{'[green]PASS' if passed else '[red]FAIL'}[/] {name}")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
