"""What the dependency and batch trigger costs the drain (docs/explanation/dependencies.md).

    python -m benchmarks.dependency_trigger [--dsn DSN] [--jobs 10000] [--rounds 5]

One process drains jobs with the data plane's own claim and completion (claim 50,
complete_many), in a schema of its own (dependency_bench), in these cases:

- plain, trigger on:   ordinary jobs, as migrated (the trigger's WHEN clause is false)
- plain, trigger off:  the same with jobs_status_changed disabled (no trigger at all)
- with dependents:     every job has a dependent, so the trigger runs for each one
- in batches of 100:   every job belongs to a batch with an on_finish callback

Rounds alternate the cases, so a noisy minute does not land on one; prints each case's
median jobs per second and every round's. Load on the machine is printed first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import psycopg

import pgbaton

SCHEMA = "dependency_bench"
CLAIM = 50


def _reset(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def _fill(queue: pgbaton.Queue, dsn: str, case: str, jobs: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {SCHEMA}.jobs, {SCHEMA}.job_dependencies, {SCHEMA}.batches")
        enabled = "DISABLE" if case == "plain, trigger off" else "ENABLE"
        conn.execute(f"ALTER TABLE {SCHEMA}.jobs {enabled} TRIGGER jobs_status_changed")  # type: ignore[arg-type]
    if case == "in batches of 100":
        batch = pgbaton.Batch(on_finish=pgbaton.Callback("finished"))
        for _ in range(jobs // 100):
            queue.enqueue_many([{"task": "t"} for _ in range(100)], batch=batch)
    else:
        queue.enqueue_many([{"task": "t"} for _ in range(jobs)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        if case == "with dependents":
            # A far-future child per job: each completion releases one waiting job.
            conn.execute(f"UPDATE {SCHEMA}.jobs SET has_dependents = true")
            conn.execute(
                f"INSERT INTO {SCHEMA}.jobs (task, status, waiting_for)"
                f" SELECT 'child', 'waiting', 1 FROM generate_series(1, %s)", (jobs,)
            )
            conn.execute(
                f"INSERT INTO {SCHEMA}.job_dependencies (parent_id, child_id)"
                f" SELECT p.id, c.id FROM"
                f" (SELECT id, row_number() OVER (ORDER BY id) AS n FROM {SCHEMA}.jobs"
                f"  WHERE task = 't') AS p JOIN"
                f" (SELECT id, row_number() OVER (ORDER BY id) AS n FROM {SCHEMA}.jobs"
                f"  WHERE task = 'child') AS c USING (n)"
            )
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.jobs")


def _drain(queue: pgbaton.Queue, jobs: int) -> float:
    """Seconds to claim and complete `jobs` jobs of task t."""
    began = time.perf_counter()
    left = jobs
    while left:
        claims = queue.claim("bench", limit=CLAIM, tasks=["t"])
        if not claims:
            raise RuntimeError(f"{left} jobs were not claimable")
        queue.complete_many([(claim, None) for claim in claims])
        left -= len(claims)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get(
        "PGBATON_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    cases = ["plain, trigger on", "plain, trigger off", "with dependents", "in batches of 100"]
    print(f"load average at start: {os.getloadavg()}; {options.jobs} jobs per drain, "
          f"claims of {CLAIM}, one process")
    _reset(options.dsn)
    rates: dict[str, list[float]] = {case: [] for case in cases}
    with pgbaton.Queue(options.dsn, schema=SCHEMA) as queue:
        queue.migrate()
        for round_number in range(options.rounds):
            order = cases[round_number % len(cases):] + cases[:round_number % len(cases)]
            for case in order:
                _fill(queue, options.dsn, case, options.jobs)
                rates[case].append(options.jobs / _drain(queue, options.jobs))
    _reset(options.dsn)
    for case in cases:
        shown = ", ".join(f"{rate:,.0f}" for rate in rates[case])
        print(f"{case:20}  median {statistics.median(rates[case]):8,.0f} jobs/s  ({shown})")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
