"""CPU per job of pgbaton's bulk enqueue and drain, in one quiet process, for finding
where a job's time goes. Prints figures; a profile on request.

    .venv/bin/python -m benchmarks.profile_drain --dsn DSN [--rounds 3] [--profile FILE]

The bench's own cases (case.enqueue_bulk, case.drain) on the bench's pgbaton adapter
(systems/pgbaton_system.py): bulk-enqueue 20,000 no-op jobs, 1,000 per call; then drain
10,000 with the real Worker at concurrency 32 in this process. Each figure is this
process's CPU time (time.process_time: user and system) per job, which other processes
on the machine move far less than the wall-clock rates that `make bench` reports; the
drain's is counted from the first handler start, as the bench counts it. The bulk
enqueue's is the whole case's, its full garbage collection before the timed window
included (some 30 ms here, 1.5 µs a job), and beside it that of the enqueue calls alone
(building each batch's dicts and enqueue_many: the bench's timed window).

Each round drops and migrates the schema `pgbaton` of the database it is given, so give
it a database of its own. To measure pgbaton at another commit, put that commit's src/
first on PYTHONPATH (as benchmarks/base_tree.py does for `--base`); the output names
the pgbaton it imported.

--profile FILE writes a cProfile of the timed parts of every round (FILE.enqueue and
FILE.drain, pstats format: `python -m pstats FILE.drain`); cProfile slows the process
several times, so the figures of a profiled run are not comparable with others.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import statistics
import time
from typing import Any

import psycopg

import pgbaton
from pgbaton.worker import loop

from . import case
from .systems.pgbaton_system import SCHEMA, PgbatonSystem

ENQUEUE_JOBS = 20_000
DRAIN_JOBS = 10_000
BATCH = 1_000
CONCURRENCY = 32


async def fresh(dsn: str, system: PgbatonSystem | None = None) -> PgbatonSystem:
    """The system (pgbaton's bench adapter, or one given) on a schema dropped and
    migrated anew."""
    system = system or PgbatonSystem(dsn)
    system.db = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await system.db.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")  # type: ignore[arg-type]
    await system.install()
    await system.connect()
    return system


def timed_calls(system: PgbatonSystem) -> list[float]:
    """The CPU seconds of the system's enqueue_batch calls alone (the bench's timed
    window: building each batch's dicts and enqueue_many), summed into the list's one
    item as they run. The case's figure also holds its full garbage collection before
    the timed window (some 30 ms on this machine: 1.5 µs a job of 20,000) and its
    server readings."""
    spent = [0.0]
    enqueue_batch = system.enqueue_batch

    async def timed(seqs: Any) -> None:
        before = time.process_time()
        await enqueue_batch(seqs)
        spent[0] += time.process_time() - before

    system.enqueue_batch = timed  # type: ignore[method-assign]
    return spent


async def measure(
    dsn: str, profiles: dict[str, cProfile.Profile] | None
) -> dict[str, float]:
    system = await fresh(dsn)
    try:
        profile = profiles["enqueue"] if profiles else None
        calls = timed_calls(system)
        cpu = time.process_time()
        if profile:
            profile.enable()
        enqueued = await case.enqueue_bulk(system, {"jobs": ENQUEUE_JOBS, "batch": BATCH})
        if profile:
            profile.disable()
        enqueue_us = (time.process_time() - cpu) / ENQUEUE_JOBS * 1e6
        calls_us = calls[0] / ENQUEUE_JOBS * 1e6
    finally:
        await system.close()
    system = await fresh(dsn)
    try:
        profile = profiles["drain"] if profiles else None
        if profile:
            # The drain case measures the CPU from the first handler start; the profile
            # covers the worker's start too (a few milliseconds of 10,000 jobs).
            profile.enable()
        result = await case.drain(system, {
            "jobs": DRAIN_JOBS, "batch": BATCH, "concurrency": CONCURRENCY,
            "time_cap": 120.0, "timeout": 120.0,
        })
        if profile:
            profile.disable()
    finally:
        await system.close()
    if result["info"]["capped"] or result["info"]["ran_twice"]:
        raise RuntimeError(f"the drain did not run every job once: {result['info']}")
    return {"enqueue_us": enqueue_us, "enqueue_calls_us": calls_us,
            "enqueue_jobs_per_s": enqueued["metrics"]["jobs_per_s"],
             "drain_us": result["metrics"]["cpu_us_per_job"],
            "drain_jobs_per_s": result["metrics"]["jobs_per_s"],
            "enqueue_server_us": enqueued["metrics"]["server_cpu_us_per_job"],
            "enqueue_wal_bytes": enqueued["metrics"]["wal_bytes_per_job"],
            "drain_server_us": result["metrics"]["server_cpu_us_per_job"],
            "drain_wal_bytes": result["metrics"]["wal_bytes_per_job"]}


async def main_async(args: argparse.Namespace) -> None:
    print(f"pgbaton from {pgbaton.__file__}")
    profiles = ({"enqueue": cProfile.Profile(time.process_time),
                 "drain": cProfile.Profile(time.process_time)}
                if args.profile else None)
    rounds: list[dict[str, float]] = []
    for number in range(args.rounds):
        figures = await measure(args.dsn, profiles)
        rounds.append(figures)
        print(f"round {number + 1}: bulk enqueue {figures['enqueue_us']:.1f} µs/job CPU "
              f"(the calls alone {figures['enqueue_calls_us']:.2f}; "
              f"server {figures['enqueue_server_us']:.1f}, "
              f"WAL {figures['enqueue_wal_bytes']:.0f} B; "
              f"{figures['enqueue_jobs_per_s']:,.0f} jobs/s), "
              f"drain c{CONCURRENCY} {figures['drain_us']:.1f} µs/job CPU "
              f"(server {figures['drain_server_us']:.1f}, "
              f"WAL {figures['drain_wal_bytes']:.0f} B; "
              f"{figures['drain_jobs_per_s']:,.0f} jobs/s)", flush=True)
    summary: dict[str, Any] = {
        key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print(f"median of {len(rounds)}: bulk enqueue {summary['enqueue_us']:.1f} µs/job "
          f"(the calls alone {summary['enqueue_calls_us']:.2f}; "
          f"server {summary['enqueue_server_us']:.1f}; "
          f"{summary['enqueue_jobs_per_s']:,.0f} jobs/s), drain {summary['drain_us']:.1f} "
          f"µs/job (server {summary['drain_server_us']:.1f}, "
          f"WAL {summary['drain_wal_bytes']:.0f} B)")
    if profiles:
        for name, profile in profiles.items():
            profile.dump_stats(f"{args.profile}.{name}")
            print(f"profile: {args.profile}.{name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True,
                        help="a database of its own: each round drops its schema pgbaton")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", choices=loop.EVENT_LOOPS, default="auto",
                        help="the event loop (as pgbaton worker --loop)")
    parser.add_argument("--profile", metavar="FILE",
                        help="write cProfile stats of the timed parts to FILE.enqueue "
                             "and FILE.drain")
    args = parser.parse_args()
    # As the bench's case processes: warnings only, to standard error.
    logging.basicConfig(level=logging.WARNING)
    # The loop `pgbaton worker` picks (auto), unless told otherwise.
    loop.run(main_async(args), args.loop)


if __name__ == "__main__":
    main()
