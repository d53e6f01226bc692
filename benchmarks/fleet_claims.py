"""What the claim costs as a fleet grows: P worker processes drain one queue together,
each claiming a batch of B jobs and completing it at once (no handler), for several P.

    python -m benchmarks.fleet_claims [--dsn DSN] [--jobs 20000] [--batch 10]
                                      [--processes 1,2,4,8,16]

Per P: jobs/s over the drain, the claim statement's p50 and p99 (each process times its
own calls), the server connections the schema's clients held at the peak, and, in SQL
afterwards, jobs claimed more than once (must be 0). It runs in a schema of its own,
dropped at the end. docs/explanation/scaling.md quotes a run, with the machine's load at
the time.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
import uuid
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import pgbaton

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
APPLICATION_NAME = "pgbaton bench fleet"


def _drain(dsn: str, schema: str, batch: int, start: Any, results: Any) -> None:
    queue = pgbaton.Queue(make_conninfo(dsn, application_name=APPLICATION_NAME),
                          schema=schema, pool_size=1)
    queue.open()
    worker = f"bench-{os.getpid()}"
    timings: list[float] = []
    start.wait()
    while True:
        began = time.perf_counter()
        claims = queue.claim(worker, limit=batch, lease=60)
        timings.append(time.perf_counter() - began)
        if not claims:
            break
        queue.complete_many([(claim, None) for claim in claims])
    queue.close()
    results.put(timings)


def _peak_connections(dsn: str, schema: str, stop: Any, out: Any) -> None:
    peak = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute("SELECT count(*) FROM pg_stat_activity"
                               " WHERE application_name = %s", (APPLICATION_NAME,)).fetchone()
            peak = max(peak, int(row[0]) if row else 0)
            time.sleep(0.05)
    out.put(peak)


def measure(dsn: str, schema: str, jobs: int, batch: int, processes: int) -> dict[str, Any]:
    with pgbaton.Queue(dsn, schema=schema) as queue:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'TRUNCATE "{schema}".jobs')  # type: ignore[arg-type]
        queue.enqueue_many([{"task": "t", "args": {"n": n}} for n in range(jobs)])
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'ANALYZE "{schema}".jobs')  # type: ignore[arg-type]
    context = multiprocessing.get_context("spawn")
    start, stop = context.Event(), context.Event()
    results, peak = context.Queue(), context.Queue()
    workers = [context.Process(target=_drain, args=(dsn, schema, batch, start, results))
               for _ in range(processes)]
    watcher = context.Process(target=_peak_connections, args=(dsn, schema, stop, peak))
    for process in [*workers, watcher]:
        process.start()
    time.sleep(1.0 + 0.1 * processes)  # every process connected and waiting
    began = time.perf_counter()
    start.set()
    timings = [t for _ in workers for t in results.get()]
    elapsed = time.perf_counter() - began
    stop.set()
    for process in [*workers, watcher]:
        process.join()
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE attempts > 1)"
            f' FROM "{schema}".jobs').fetchone()  # type: ignore[arg-type]
    assert row is not None
    timings.sort()
    return {
        "processes": processes, "jobs done": row[0], "claimed twice": row[1],
        "jobs/s": round(jobs / elapsed), "claim p50 (ms)": round(
            1000 * statistics.median(timings), 2),
        "claim p99 (ms)": round(1000 * timings[int(0.99 * (len(timings) - 1))], 2),
        "peak connections": peak.get(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("PGBATON_BENCH_DSN", DEFAULT_DSN))
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--processes", default="1,2,4,8,16")
    options = parser.parse_args()
    schema = f"bench_fleet_{uuid.uuid4().hex[:8]}"
    with pgbaton.Queue(options.dsn, schema=schema) as queue:
        queue.migrate()
    print(f"load average at start: {os.getloadavg()}; cores: {os.cpu_count()}; "
          f"jobs {options.jobs}, batch {options.batch}")
    try:
        rows = [measure(options.dsn, schema, options.jobs, options.batch, int(p))
                for p in options.processes.split(",")]
    finally:
        with psycopg.connect(options.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')  # type: ignore[arg-type]
    names = list(rows[0])
    print("| " + " | ".join(names) + " |")
    print("|" + "---|" * len(names))
    for row in rows:
        print("| " + " | ".join(str(row[name]) for name in names) + " |")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
