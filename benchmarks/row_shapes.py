"""What the shape of the jobs table costs the server per job, claim and completion alone.

    python -m benchmarks.row_shapes --dsn DSN [--jobs 6400] [--rounds 6]

One connection claims 32 jobs at a time (a worker at concurrency 32 claims about that
many) and completes each claim's jobs in one statement, until the table is empty. Three
arms take turns, each on a table filled afresh, VACUUM ANALYZEd, right after a
CHECKPOINT (so each writes the same full-page images):

- `pgbaton`: pgbaton's schema, its claim (job_claim_many) and completion
  (job_complete_many: the row stays, `done`);
- `pgbaton, completion deletes`: the same claim, the completion a token-fenced DELETE
  (what keeping no finished row would save);
- `graphile-like`: a table shaped like Graphile Worker's jobs table (a generated
  is_available column, one partial index for the claim), claimed by a SKIP LOCKED
  UPDATE and completed by a DELETE.

Server CPU is the claiming backend's (/proc/PID/schedstat: the server must run on this
machine); WAL is the server's (nothing else may write meanwhile). Give it a database of
its own: the schemas `rs_pgbaton` and `rs_graphile` are dropped and made again.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from pathlib import Path
from typing import Any

import psycopg

import pgbaton
from pgbaton import _sql

CLAIM = 32
PGBATON = "rs_pgbaton"
GRAPHILE_LIKE = """
DROP SCHEMA IF EXISTS rs_graphile CASCADE;
CREATE SCHEMA rs_graphile;
CREATE TABLE rs_graphile.jobs (
    id bigserial PRIMARY KEY, queue text NOT NULL DEFAULT 'default', task text NOT NULL,
    args jsonb NOT NULL, priority integer NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now(), attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 5, locked_at timestamptz, locked_by text,
    is_available boolean GENERATED ALWAYS AS
        (locked_at IS NULL AND attempts < max_attempts) STORED);
CREATE INDEX jobs_main ON rs_graphile.jobs (priority, run_at) INCLUDE (id, task)
    WHERE is_available;
"""
GRAPHILE_FILL = ("INSERT INTO rs_graphile.jobs (task, args) SELECT 'noop',"
                 " jsonb_build_object('seq', g) FROM generate_series(1, %(jobs)s) AS g")
GRAPHILE_CLAIM = f"""
WITH j AS (SELECT id FROM rs_graphile.jobs WHERE is_available AND run_at <= now()
           ORDER BY priority, run_at LIMIT {CLAIM} FOR UPDATE SKIP LOCKED)
UPDATE rs_graphile.jobs SET attempts = attempts + 1, locked_by = 'w', locked_at = now()
FROM j WHERE rs_graphile.jobs.id = j.id RETURNING rs_graphile.jobs.*"""
GRAPHILE_COMPLETE = ("DELETE FROM rs_graphile.jobs"
                     " WHERE id = ANY(%(ids)s::bigint[]) AND locked_by = 'w'")
PGBATON_DELETE = f"""
DELETE FROM "{PGBATON}".jobs AS j
USING unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS held(id, token)
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'"""
ARMS = ("pgbaton", "pgbaton, completion deletes", "graphile-like")


async def fill(conn: psycopg.AsyncConnection[Any], queue: pgbaton.AsyncQueue,
               arm: str, jobs: int) -> None:
    if arm == "graphile-like":
        await conn.execute(GRAPHILE_LIKE)
        await conn.execute(GRAPHILE_FILL, {"jobs": jobs})
        await conn.execute("VACUUM ANALYZE rs_graphile.jobs")
    else:
        await conn.execute(f'TRUNCATE "{PGBATON}".jobs CASCADE')
        for start in range(0, jobs, 1000):
            await queue.enqueue_many([{"task": "noop", "args": {"seq": seq}}
                                      for seq in range(start, min(start + 1000, jobs))])
        await conn.execute(f'VACUUM ANALYZE "{PGBATON}".jobs')
    await conn.execute("CHECKPOINT")


async def drain(claimer: psycopg.AsyncConnection[Any], arm: str, jobs: int) -> None:
    statements = _sql.queries(PGBATON)
    done = 0
    while done < jobs:
        if arm == "graphile-like":
            rows = await (await claimer.execute(GRAPHILE_CLAIM, prepare=True)).fetchall()
            await claimer.execute(GRAPHILE_COMPLETE, {"ids": [r[0] for r in rows]},
                                  prepare=True)
        else:
            rows = await (await claimer.execute(statements["job_claim_many"], {
                "queues": None, "tasks": None, "after": None, "limit": CLAIM,
                "lease": 30.0, "worker_id": "w", "starting": CLAIM}, prepare=True)).fetchall()
            ids, tokens = [r[0] for r in rows], [r[1] for r in rows]
            if arm == "pgbaton":
                await claimer.execute(statements["job_complete_many"], {
                    "ids": ids, "tokens": tokens, "results": [None] * len(ids)}, prepare=True)
            else:
                await claimer.execute(PGBATON_DELETE, {"ids": ids, "tokens": tokens},
                                      prepare=True)
        if not rows:
            raise RuntimeError(f"{arm}: claimed nothing with {jobs - done} jobs left")
        done += len(rows)


async def run_arm(dsn: str, conn: psycopg.AsyncConnection[Any], queue: pgbaton.AsyncQueue,
                  arm: str, jobs: int) -> tuple[float, float]:
    """Server CPU µs and WAL bytes per job of one claim-and-complete of `jobs` jobs."""
    await fill(conn, queue, arm, jobs)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as claimer:
        stat = Path(f"/proc/{claimer.info.backend_pid}/schedstat")
        lsn = await (await conn.execute("SELECT pg_current_wal_lsn()")).fetchone()
        cpu_before = int(stat.read_text().split()[0])
        await drain(claimer, arm, jobs)
        cpu_after = int(stat.read_text().split()[0])
    wal = await (await conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)",
                                    lsn)).fetchone()
    assert wal is not None
    return (cpu_after - cpu_before) / 1e3 / jobs, float(wal[0]) / jobs


async def main_async(options: argparse.Namespace) -> None:
    async with await psycopg.AsyncConnection.connect(options.dsn, autocommit=True) as conn:
        await conn.execute(f"DROP SCHEMA IF EXISTS {PGBATON} CASCADE")
        queue = pgbaton.AsyncQueue(options.dsn, schema=PGBATON, pool_size=1)
        await queue.migrate()
        figures: dict[str, list[tuple[float, float]]] = {arm: [] for arm in ARMS}
        try:
            for number in range(options.rounds):
                for arm in ARMS if number % 2 else reversed(ARMS):
                    figures[arm].append(await run_arm(options.dsn, conn, queue, arm,
                                                      options.jobs))
        finally:
            await queue.close()
            await conn.execute(f"DROP SCHEMA IF EXISTS {PGBATON} CASCADE")
            await conn.execute("DROP SCHEMA IF EXISTS rs_graphile CASCADE")
    print(f"\nClaim {CLAIM} and complete, {options.jobs:,} jobs, one connection; median of "
          f"{options.rounds} (range)\n")
    print("| table | server CPU per job (µs) | WAL per job (B) |")
    print("|---|--:|--:|")
    for arm, runs in figures.items():
        cpus, wals = [c for c, _ in runs], [w for _, w in runs]
        print(f"| {arm} | {statistics.median(cpus):.1f} ({min(cpus):.1f} to {max(cpus):.1f})"
              f" | {statistics.median(wals):.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a database of its own")
    parser.add_argument("--jobs", type=int, default=6_400)
    parser.add_argument("--rounds", type=int, default=6)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
