"""What one job costs the server, and what each index and trigger of the jobs table adds.

    python -m benchmarks.job_cost --dsn DSN [--jobs 20000] [--rounds 3]

A job's life on the server with no worker around it (the data plane's own calls, as the
raw ceiling of `make bench` runs them): bulk enqueue, 1,000 jobs a call; claims of 100
(the claim statement of the default worker, job_claim_many); each claim's jobs completed
in one batched statement (job_complete_many). Its cost: the CPU of the database's
backends per job (from /proc: the server must run on this machine) and the WAL written per job
(each arm right after a CHECKPOINT). The WAL is the whole server's: nothing else may
write to it meanwhile, and the CPU figures want a quiet machine.

Arms, each in a schema of its own migrated afresh, taking turns within a round in a
random order: `all` (pgbaton's schema), and one arm per index or trigger of the jobs
table with that one dropped. What an arm saves is `all` minus it. An index that the
claim or the completion reads cannot be judged this way (dropping it changes the plan,
and the arm costs more, not less): the table says "read by the path". Give it a
database of its own: each arm's schema is dropped and created again.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
from pathlib import Path
from typing import Any

import psycopg

import pgbaton

BATCH = 1_000
CLAIM = 100
SCHEMA_PREFIX = "jc_"


async def objects(conn: psycopg.AsyncConnection[Any], schema: str) -> list[tuple[str, str]]:
    """The jobs table's indexes (but its primary key) and triggers: (kind, name)."""
    cursor = await conn.execute(
        """
        SELECT 'index', indexname FROM pg_indexes
        WHERE schemaname = %(schema)s AND tablename = 'jobs' AND indexname <> 'jobs_pkey'
        UNION ALL
        SELECT 'trigger', t.tgname FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND c.relname = 'jobs' AND NOT t.tgisinternal
        ORDER BY 1, 2
        """, {"schema": schema})
    return [(kind, name) for kind, name in await cursor.fetchall()]


async def prepare(dsn: str, conn: psycopg.AsyncConnection[Any], arm: str,
                  dropped: tuple[str, str] | None) -> pgbaton.AsyncQueue:
    schema = f"{SCHEMA_PREFIX}{abs(hash(arm)) % 10**8}"
    await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    queue = pgbaton.AsyncQueue(dsn, schema=schema, pool_size=1)
    await queue.migrate()
    if dropped is not None:
        kind, name = dropped
        statement = (f"DROP INDEX {schema}.{name}" if kind == "index"
                     else f"ALTER TABLE {schema}.jobs DISABLE TRIGGER {name}")
        await conn.execute(statement)
    return queue


async def reading(reader: psycopg.AsyncConnection[Any]) -> tuple[float, int]:
    """The CPU seconds of the database's other backends (/proc/PID/schedstat: in
    nanoseconds, where /proc/PID/stat counts 10 ms ticks) and the server's WAL position."""
    cursor = await reader.execute(
        "SELECT pid, pg_current_wal_lsn() - '0/0'::pg_lsn FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()")
    rows = await cursor.fetchall()
    cpu = 0.0
    for pid, _ in rows:
        try:
            cpu += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
        except OSError:
            continue
    return cpu, int(rows[0][1])


async def run_arm(queue: pgbaton.AsyncQueue, reader: psycopg.AsyncConnection[Any],
                  jobs: int) -> tuple[float, float]:
    """Server CPU µs and WAL bytes per job of one life of `jobs` jobs."""
    await queue.ping()  # the pool's one connection, open before the first reading
    # Each arm starts just after a checkpoint, so each writes the same full-page images.
    await reader.execute("CHECKPOINT")
    cpu_before, wal_before = await reading(reader)
    for start in range(0, jobs, BATCH):
        await queue.enqueue_many([{"task": "noop", "args": {"seq": seq}}
                                  for seq in range(start, min(start + BATCH, jobs))])
    done = 0
    while done < jobs:
        claims = (await queue.claim_batch("job-cost", limit=CLAIM)).claims
        if not claims:
            raise RuntimeError(f"claimed nothing with {jobs - done} jobs left")
        await queue.complete_many([(claim, None) for claim in claims])
        done += len(claims)
    cpu_after, wal_after = await reading(reader)
    return (cpu_after - cpu_before) / jobs * 1e6, (wal_after - wal_before) / jobs


async def main_async(options: argparse.Namespace) -> None:
    async with await psycopg.AsyncConnection.connect(options.dsn, autocommit=True) as conn:
        probe = await prepare(options.dsn, conn, "probe", None)
        arms: dict[str, tuple[str, str] | None] = {"all": None}
        for kind, name in await objects(conn, probe.schema):
            arms[f"{kind} {name}"] = (kind, name)
        await conn.execute(f"DROP SCHEMA {probe.schema} CASCADE")
        figures: dict[str, list[tuple[float, float]]] = {arm: [] for arm in arms}
        for number in range(options.rounds):
            order = list(arms)
            random.shuffle(order)
            for arm in order:
                queue = await prepare(options.dsn, conn, arm, arms[arm])
                try:
                    figures[arm].append(await run_arm(queue, conn, options.jobs))
                finally:
                    await queue.close()
                    await conn.execute(
                        f"DROP SCHEMA {queue.schema} CASCADE")
            print(f"round {number + 1} of {options.rounds} done", flush=True)
    cpu_all = statistics.median(c for c, _ in figures["all"])
    wal_all = statistics.median(w for _, w in figures["all"])
    print(f"\nA job's life on the server ({options.jobs:,} jobs; enqueue {BATCH:,} a call, "
          f"claim {CLAIM}, one completion a claim; median of {options.rounds}): "
          f"{cpu_all:.1f} µs of server CPU, {wal_all:.0f} B of WAL\n")
    print("| without | server CPU per job (µs) | saves | WAL per job (B) | saves |")
    print("|---|--:|--:|--:|--:|")
    for arm in sorted(figures, key=lambda a: statistics.median(w for _, w in figures[a])):
        cpu = statistics.median(c for c, _ in figures[arm])
        wal = statistics.median(w for _, w in figures[arm])
        saves = ("read by the path" if cpu > cpu_all * 1.5
                 else f"{cpu_all - cpu:+.1f}")
        print(f"| {arm} | {cpu:.1f} | {saves} | {wal:.0f} | {wal_all - wal:+.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a database of its own")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
