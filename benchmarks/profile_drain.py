"""CPU per job of pgbaton's bulk enqueue and drain, in one quiet process, for finding
where a job's time goes. Prints figures; a profile on request.

    .venv/bin/python -m benchmarks.profile_drain --dsn DSN [--rounds 3] [--profile FILE]

The bench's own cases (case.enqueue_bulk, case.drain) on the bench's pgbaton adapter
(systems/pgbaton_system.py): bulk-enqueue 20,000 no-op jobs, 1,000 per call; then drain
10,000 with the real Worker at concurrency 32 in this process. Each figure is this
process's CPU time (time.process_time: user and system) per job, which other processes
on the machine move far less than the wall-clock rates that `make bench` reports; the
drain's is counted from the first handler start, as the bench counts it.

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
import asyncio
import cProfile
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

import pgbaton

from . import case
from .systems.pgbaton_system import SCHEMA, PgbatonSystem

ENQUEUE_JOBS = 20_000
DRAIN_JOBS = 10_000
BATCH = 1_000
CONCURRENCY = 32


TICKS = os.sysconf("SC_CLK_TCK")


async def server_cpu(db: psycopg.AsyncConnection[Any]) -> dict[int, float]:
    """CPU seconds (user and system) of each backend of this database so far, from
    /proc: the server must run on this machine (else {}, and no server figures)."""
    cursor = await db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
    used: dict[int, float] = {}
    for (pid,) in await cursor.fetchall():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used[pid] = (int(fields[11]) + int(fields[12])) / TICKS
    return used


async def wal_lsn(db: psycopg.AsyncConnection[Any]) -> int:
    """The server's WAL position in bytes (every database's: keep the server quiet)."""
    cursor = await db.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


def spent(before: dict[int, float], after: dict[int, float]) -> float:
    """The backends' CPU between two readings (a backend opened in between: all of its)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


class Measured(PgbatonSystem):
    """The bench's adapter, reading the backends' CPU as the worker starts and when the
    database first shows the drain finished (the worker's connections still open)."""

    server_at_start: dict[int, float] | None = None
    server_at_end: dict[int, float] | None = None

    async def start_worker(self, concurrency: int) -> None:
        assert self.db is not None
        self.server_at_start = await server_cpu(self.db)
        await super().start_worker(concurrency)

    async def unfinished(self) -> int:
        left = await super().unfinished()
        if left == 0 and self.server_at_start is not None and self.server_at_end is None:
            assert self.db is not None
            self.server_at_end = await server_cpu(self.db)
        return left


async def fresh(dsn: str) -> Measured:
    system = Measured(dsn)
    system.db = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await system.db.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")  # type: ignore[arg-type]
    await system.install()
    await system.connect()
    return system


async def measure(
    dsn: str, profiles: dict[str, cProfile.Profile] | None
) -> dict[str, float]:
    system = await fresh(dsn)
    try:
        profile = profiles["enqueue"] if profiles else None
        assert system.db is not None
        server = await server_cpu(system.db)
        wal = await wal_lsn(system.db)
        cpu = time.process_time()
        if profile:
            profile.enable()
        enqueued = await case.enqueue_bulk(system, {"jobs": ENQUEUE_JOBS, "batch": BATCH})
        if profile:
            profile.disable()
        enqueue_us = (time.process_time() - cpu) / ENQUEUE_JOBS * 1e6
        enqueue_wal = (await wal_lsn(system.db) - wal) / ENQUEUE_JOBS
        enqueue_server_us = spent(server, await server_cpu(system.db)) / ENQUEUE_JOBS * 1e6
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
    return {"enqueue_us": enqueue_us, "enqueue_jobs_per_s": enqueued["metrics"]["jobs_per_s"],
             "drain_us": result["metrics"]["cpu_us_per_job"],
            "drain_jobs_per_s": result["metrics"]["jobs_per_s"],
            "enqueue_server_us": enqueue_server_us, "enqueue_wal_bytes": enqueue_wal,
            "drain_server_us": spent(system.server_at_start or {}, system.server_at_end or {})
            / DRAIN_JOBS * 1e6}


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
              f"(server {figures['enqueue_server_us']:.1f}, "
              f"WAL {figures['enqueue_wal_bytes']:.0f} B; "
              f"{figures['enqueue_jobs_per_s']:,.0f} jobs/s), "
              f"drain c{CONCURRENCY} {figures['drain_us']:.1f} µs/job CPU "
              f"(server {figures['drain_server_us']:.1f}; "
              f"{figures['drain_jobs_per_s']:,.0f} jobs/s)", flush=True)
    summary: dict[str, Any] = {
        key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print(f"median of {len(rounds)}: bulk enqueue {summary['enqueue_us']:.1f} µs/job "
          f"(server {summary['enqueue_server_us']:.1f}), drain {summary['drain_us']:.1f} "
          f"µs/job (server {summary['drain_server_us']:.1f})")
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
    parser.add_argument("--profile", metavar="FILE",
                        help="write cProfile stats of the timed parts to FILE.enqueue "
                             "and FILE.drain")
    args = parser.parse_args()
    # As the bench's case processes: warnings only, to standard error.
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
