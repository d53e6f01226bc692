"""What the dashboard's indexes cost the data plane: enqueue, claim and complete, in two
schemas of one database that differ only by those indexes, taking turns.

    python -m benchmarks.dashboard_index_cost [--dsn DSN] [--rounds 30] [--jobs 500]

Schema `index_cost_without` is pgbaton's schema without the first three of
dashboard_paging.PROPOSED_INDEXES (jobs_task_id, jobs_failed, jobs_pending_by_queue);
`index_cost_with` has them (or those named by --indexes). Each round runs, in both
schemas in a random order: `jobs` single enqueues, one enqueue_many of 10 x `jobs`,
then claims of 100 and fenced completions until both are drained (the data plane's own
calls, no worker: fewer moving parts to blur the difference). Time per job is the
median over the rounds; WAL bytes per job (read from pg_current_wal_lsn around each
step) count the writes themselves, which a busy machine does not blur, as long as
nothing else writes to the server: use a server of your own (--dsn to an embedded one).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import psycopg

import pgbaton

from .dashboard_paging import PROPOSED_INDEXES, SCHEMA

ARMS = {"without": "index_cost_without", "with": "index_cost_with"}
STEPS = ("enqueue", "enqueue_many", "claim+complete")


def wal_lsn(conn: psycopg.Connection[tuple[int]]) -> int:
    row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None
    return int(row[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--indexes", default="jobs_task_id,jobs_failed,jobs_pending_by_queue",
                        metavar="NAME,...", help="The indexes of the `with` schema.")
    options = parser.parse_args()
    wanted = set(options.indexes.split(","))
    with psycopg.connect(options.dsn, autocommit=True) as conn:
        queues = {}
        for arm, schema in ARMS.items():
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # type: ignore[arg-type]
            queue = pgbaton.Queue(options.dsn, schema=schema)
            queue.migrate()
            for statement in PROPOSED_INDEXES[:3]:
                name = statement.split(" ON ")[0].split()[-1]
                conn.execute(f"DROP INDEX IF EXISTS {schema}.{name}")  # type: ignore[arg-type]
                if arm == "with" and name in wanted:
                    conn.execute(statement.replace(f"{SCHEMA}.", f"{schema}."))  # type: ignore[arg-type]
            queues[arm] = queue
        seconds: dict[tuple[str, str], list[float]] = {}
        wal: dict[tuple[str, str], list[float]] = {}
        try:
            for _ in range(options.rounds):
                for arm in random.sample(list(ARMS), len(ARMS)):
                    queue = queues[arm]
                    steps: dict[str, tuple[Callable[[], object], int]] = {
                        "enqueue": (lambda q=queue: [q.enqueue(f"t{n % 49}", {"n": n},
                                                               queue=f"q{n % 5}")
                                                     for n in range(options.jobs)],
                                    options.jobs),
                        "enqueue_many": (lambda q=queue: q.enqueue_many(
                            [{"task": f"t{n % 49}", "args": {"n": n}, "queue": f"q{n % 5}"}
                             for n in range(10 * options.jobs)]), 10 * options.jobs),
                        "claim+complete": (lambda q=queue: drain(q), 11 * options.jobs),
                    }
                    for step, (run, jobs) in steps.items():
                        lsn, started = wal_lsn(conn), time.perf_counter()
                        run()
                        elapsed = time.perf_counter() - started
                        seconds.setdefault((arm, step), []).append(elapsed / jobs)
                        wal.setdefault((arm, step), []).append((wal_lsn(conn) - lsn) / jobs)
        finally:
            for arm, schema in ARMS.items():
                queues[arm].close()
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # type: ignore[arg-type]
    print(f"| step (per job, median of {options.rounds} rounds) | without: us | with: us "
          "| ratio | without: WAL bytes | with: WAL bytes |")
    print("|---|--:|--:|--:|--:|--:|")
    for step in STEPS:
        a = statistics.median(seconds["without", step]) * 1e6
        b = statistics.median(seconds["with", step]) * 1e6
        wa = statistics.median(wal["without", step])
        wb = statistics.median(wal["with", step])
        print(f"| {step} | {a:.0f} | {b:.0f} | {b / a:.2f}x | {wa:.0f} | {wb:.0f} |")


def drain(queue: pgbaton.Queue) -> None:
    while claims := queue.claim("index-cost", limit=100):
        queue.complete_many([(claim, None) for claim in claims])


if __name__ == "__main__":
    main()
