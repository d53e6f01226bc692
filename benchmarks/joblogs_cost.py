"""What keeping each job's log lines (docs/howto/progress-and-logs.md) costs the drain.

    python -m benchmarks.joblogs_cost [--dsn DSN] [--jobs 5000] [--rounds 5]
        [--concurrency 32] [--cases nothing,off,ten,ten-off]

One real Worker in this process (maintenance off) drains `--jobs` jobs at
`--concurrency`, in a schema of its own, in each case: its handlers log nothing and
the capture is on (the default), the capture is off (WorkerConfig(job_logs=False)),
each handler logs 10 INFO lines with the capture on, and the same with it off. The
jobs are enqueued in one statement once the worker is up; the time runs from there to
the last one done. Rounds alternate the cases; prints each case's median jobs per
second and the worker process's median CPU time a job (steadier on a shared
machine). Run it from an older checkout (PYTHONPATH) to compare with a release without
the capture: the cases it cannot run are skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import statistics
import time

import psycopg

import pgbaton
from pgbaton.worker import Worker, WorkerConfig

CASES = {
    "nothing": ("no handler logs; capture on", 0, True),
    "off": ("no handler logs; capture off", 0, False),
    "ten": ("10 lines a job; capture on", 10, True),
    "ten-off": ("10 lines a job; capture off", 10, False),
}
log = logging.getLogger("bench.joblogs")
log.setLevel(logging.INFO)


def make_app(dsn: str, schema: str) -> pgbaton.App:
    app = pgbaton.App(dsn, schema=schema)

    @app.task
    async def quiet() -> None:
        return None

    @app.task
    async def chatty() -> None:
        for n in range(10):
            log.info("line %d of this job", n)

    return app


async def one_round(app: pgbaton.App, dsn: str, schema: str, case: str, *, jobs: int,
                    concurrency: int) -> tuple[float, float]:
    _, lines, capture = CASES[case]
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s"
            " AND tablename IN ('jobs', 'job_logs')", (schema,))]
        conn.execute(f"TRUNCATE {', '.join(f'{schema}.{t}' for t in tables)}")  # type: ignore[arg-type]
        conn.execute(f"VACUUM ANALYZE {schema}.jobs")  # type: ignore[arg-type]
    options: dict[str, object] = {"concurrency": concurrency, "maintenance": False,
                                  "poll_interval": 0.5}
    if "job_logs" in {f.name for f in dataclasses.fields(WorkerConfig)}:
        options["job_logs"] = capture
    worker = Worker(app, WorkerConfig(**options))  # type: ignore[arg-type]
    started = asyncio.Event()
    app.events.subscribe(lambda e: started.set() if e.name == "worker.started" else None,
                         ["worker.started"])
    running = asyncio.create_task(worker.run())
    probe = pgbaton.AsyncQueue(dsn, schema=schema)
    try:
        deadline = time.monotonic() + 30
        while not worker.stats and time.monotonic() < deadline and not started.is_set():
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # its parts are up and it waits for work
        task = "chatty" if lines else "quiet"
        began, cpu = time.perf_counter(), time.process_time()
        await probe.enqueue_many([{"task": task} for _ in range(jobs)])
        while True:
            stats = await probe.stats()
            if sum(s.done for s in stats) >= jobs:
                break
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - began
        cpu = time.process_time() - cpu
    finally:
        worker.request_stop()
        await running
        await probe.close()
    # The process's CPU time per job (its threads' too, and the probe's few statements):
    # steadier than the rate on a shared machine, whose other work slows the wall clock.
    return jobs / elapsed, cpu / jobs * 1e6


async def run(options: argparse.Namespace) -> None:
    schema = options.schema
    with pgbaton.Queue(options.dsn, schema=schema) as queue:
        queue.migrate()
    app = make_app(options.dsn, schema)
    has_capture = "job_logs" in {f.name for f in dataclasses.fields(WorkerConfig)}
    cases = [c for c in options.cases.split(",") if has_capture or c in ("nothing", "ten")]
    rates: dict[str, list[float]] = {case: [] for case in cases}
    cpus: dict[str, list[float]] = {case: [] for case in cases}
    for round_number in range(options.rounds):
        for case in cases:
            rate, cpu = await one_round(app, options.dsn, schema, case, jobs=options.jobs,
                                        concurrency=options.concurrency)
            rates[case].append(rate)
            cpus[case].append(cpu)
            print(f"round {round_number + 1} {case:8} {rate:8.0f} jobs/s {cpu:6.0f} us CPU/job",
                  flush=True)
    print("load:", os.getloadavg())
    for case in cases:
        label = CASES[case][0] if has_capture else CASES[case][0].split(";")[0] + "; no capture"
        print(f"{case:8} {label:32} median {statistics.median(rates[case]):8.0f} jobs/s"
              f"  (min {min(rates[case]):.0f}, max {max(rates[case]):.0f});"
              f" median {statistics.median(cpus[case]):5.0f} us CPU a job")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("PGBATON_DSN"))
    parser.add_argument("--schema", default="joblogs_bench")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--cases", default="nothing,off,ten,ten-off")
    options = parser.parse_args()
    asyncio.run(run(options))


if __name__ == "__main__":
    main()
