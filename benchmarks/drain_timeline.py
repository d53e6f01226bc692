"""Where a drain waits: the worker's statements on a timeline, and the machine's idle
share, for each claim-ahead setting. Prints figures; run it alone on a quiet machine.

    .venv/bin/python -m benchmarks.drain_timeline --dsn DSN [--claim-ahead 0,auto,500]
        [--concurrency 32] [--jobs 10000] [--rounds 3]

Each round drops and migrates the schema `pgbaton` of the database it is given (give it
one of its own), enqueues the jobs in bulk, and drains them with the real Worker in this
process at each setting in turn (the settings take turns round by round, so that a
noisy second does not land on one of them), as `make bench`'s drain case does. For each
drain it reports:

- the rate, and the worker's and the server's CPU and WAL per job (the bench's own
  readings);
- the machine's idle share over the drain (/proc/stat: idle and iowait of every core):
  what neither the worker nor the server used;
- for each statement of the worker's hot path (the claim, the start of jobs claimed
  ahead, the completion): its calls, its rows per call, its mean round trip as the
  worker sees it (from the call to its answer, the pool's wait included), and the share
  of the drain during which at least one was in flight.

Then, once, the shortest chain there is: one connection that claims `concurrency` jobs
and completes them, call after call, with nothing else running; its round trips, and
the worker process's CPU in each call (parameters, sending, reading the rows).

A drain that runs one claim at a time and spends a third of the machine idle is bound by
its chain of round trips, not by a core: docs/explanation/performance.md, "Where a drain
at the defaults waits".

The statements are timed by wrapping AsyncEngine's methods for the length of a drain
(the tool's own instrumentation; nothing in the worker changes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pgbaton.engine_async import AsyncEngine
from pgbaton.worker import Worker, WorkerConfig, loop

from . import case
from .profile_drain import fresh
from .systems import pgbaton_system
from .systems.pgbaton_system import PgbatonSystem

# The worker's hot path: what a drain of no-op jobs sends.
STATEMENTS = ("claim_batch", "start_many", "complete_many")


@dataclass
class Call:
    name: str
    sent: float
    answered: float
    rows: int


@dataclass
class Timeline:
    calls: list[Call] = field(default_factory=list)

    def record(self, name: str, sent: float, rows: int) -> None:
        self.calls.append(Call(name, sent, time.perf_counter(), rows))

    def in_flight(self, name: str, start: float, end: float) -> float:
        """The seconds of [start, end] during which at least one `name` was in flight."""
        spans = sorted((max(c.sent, start), min(c.answered, end))
                       for c in self.calls if c.name == name)
        total, current = 0.0, None
        for begin, finish in spans:
            if finish <= begin:
                continue
            if current is None or begin > current[1]:
                if current is not None:
                    total += current[1] - current[0]
                current = [begin, finish]
            else:
                current[1] = max(current[1], finish)
        if current is not None:
            total += current[1] - current[0]
        return total


def _rows(name: str, result: Any) -> int:
    if name == "claim_batch":
        return len(result.claims)
    return len(result)


@contextlib.contextmanager
def timed_statements(timeline: Timeline) -> Iterator[None]:
    """Wrap AsyncEngine's hot-path methods to record each call on the timeline."""
    originals = {name: getattr(AsyncEngine, name) for name in STATEMENTS}

    def wrapped(name: str, original: Any) -> Any:
        async def call(self: AsyncEngine, *args: Any, **kwargs: Any) -> Any:
            sent = time.perf_counter()
            result = await original(self, *args, **kwargs)
            timeline.record(name, sent, _rows(name, result))
            return result
        return call

    for name, original in originals.items():
        setattr(AsyncEngine, name, wrapped(name, original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(AsyncEngine, name, original)


def machine_times() -> tuple[int, int]:
    """All the cores' jiffies, and those idle or waiting for I/O (/proc/stat)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]


class TimedSystem(PgbatonSystem):
    """pgbaton's bench adapter with a claim-ahead setting, reading the machine's CPU
    from the worker's start to its stop."""

    def __init__(self, dsn: str, claim_ahead: int | str) -> None:
        super().__init__(dsn)
        self.claim_ahead = claim_ahead
        self.machine_at_start = self.machine_at_stop = (0, 0)

    async def start_worker(self, concurrency: int) -> None:
        self.machine_at_start = machine_times()
        self.worker = Worker(pgbaton_system.app, WorkerConfig(
            concurrency=concurrency, claim_ahead=self.claim_ahead, dsn=self.dsn))
        self.worker_task = asyncio.create_task(self.worker.run(), name="pgbaton worker")

    async def stop_worker(self) -> None:
        self.machine_at_stop = machine_times()
        await super().stop_worker()

    def idle_share(self) -> float:
        (all_0, idle_0), (all_1, idle_1) = self.machine_at_start, self.machine_at_stop
        return (idle_1 - idle_0) / max(all_1 - all_0, 1)


async def drain(dsn: str, claim_ahead: int | str, jobs: int, concurrency: int
                ) -> dict[str, Any]:
    system = await fresh(dsn, TimedSystem(dsn, claim_ahead))
    timeline = Timeline()
    try:
        with timed_statements(timeline):
            result = await case.drain(system, {
                "jobs": jobs, "batch": 1_000, "concurrency": concurrency,
                "time_cap": 120.0, "timeout": 120.0,
            })
    finally:
        await system.close()
    if result["info"]["capped"] or result["info"]["ran_twice"]:
        raise RuntimeError(f"the drain did not run every job once: {result['info']}")
    claims = [c for c in timeline.calls if c.name == "claim_batch" and c.rows]
    ends = [c for c in timeline.calls if c.name == "complete_many"]
    start, end = claims[0].sent, max(c.answered for c in ends)
    span = end - start
    statements = {}
    for name in STATEMENTS:
        calls = [c for c in timeline.calls if c.name == name and c.sent >= start]
        if calls:
            statements[name] = {
                "calls": len(calls),
                "rows_per_call": sum(c.rows for c in calls) / len(calls),
                "round_trip_ms": statistics.fmean(c.answered - c.sent for c in calls) * 1e3,
                "in_flight": timeline.in_flight(name, start, end) / span,
            }
    metrics = result["metrics"]
    return {
        "jobs_per_s": metrics["jobs_per_s"], "worker_us": metrics["cpu_us_per_job"],
        "server_us": metrics["server_cpu_us_per_job"], "wal_bytes": metrics["wal_bytes_per_job"],
        "idle": system.idle_share(), "statements": statements,
    }


async def serial_chain(dsn: str, jobs: int, concurrency: int) -> dict[str, float]:
    """Claim `concurrency` jobs and complete them, call after call on one engine, until
    none is left: the round trips with nothing beside them."""
    system = await fresh(dsn)
    try:
        for chunk in case.chunks(range(jobs), 1_000):
            await system.enqueue_batch(chunk)
        await system.analyze()
        engine = pgbaton_system.app.async_queue.engine
        claim_trips, complete_trips, claim_cpu, complete_cpu = [], [], [], []
        while True:
            sent, cpu = time.perf_counter(), time.process_time()
            batch = await engine.claim_batch("serial-chain", limit=concurrency, lease=30.0)
            claimed, claimed_cpu = time.perf_counter(), time.process_time()
            if not batch.claims:
                break
            await engine.complete_many([(claim, None) for claim in batch.claims])
            claim_trips.append(claimed - sent)
            claim_cpu.append(claimed_cpu - cpu)
            complete_trips.append(time.perf_counter() - claimed)
            complete_cpu.append(time.process_time() - claimed_cpu)
    finally:
        await system.close()
    done = len(claim_trips) * concurrency
    return {
        "jobs_per_s": done / (sum(claim_trips) + sum(complete_trips)),
        "claim_ms": statistics.median(claim_trips) * 1e3,
        "complete_ms": statistics.median(complete_trips) * 1e3,
        "claim_cpu_ms": statistics.fmean(claim_cpu) * 1e3,
        "complete_cpu_ms": statistics.fmean(complete_cpu) * 1e3,
    }


def setting(text: str) -> int | str:
    return text if text == "auto" else int(text)


async def main_async(args: argparse.Namespace) -> None:
    settings = [setting(s) for s in args.claim_ahead.split(",")]
    runs: dict[int | str, list[dict[str, Any]]] = {s: [] for s in settings}
    for number in range(args.rounds):
        for claim_ahead in settings:
            run = await drain(args.dsn, claim_ahead, args.jobs, args.concurrency)
            runs[claim_ahead].append(run)
            print(f"round {number + 1}, claim_ahead={claim_ahead}: "
                  f"{run['jobs_per_s']:,.0f} jobs/s, idle {run['idle']:.0%}", flush=True)
    print(f"\nDrain of {args.jobs:,} no-op jobs at concurrency {args.concurrency}, "
          f"median of {args.rounds} rounds:\n")
    print("| claim_ahead | jobs/s | worker CPU µs/job | server CPU µs/job | WAL B/job "
          "| machine idle | statement: calls, rows/call, round trip, in flight |")
    print("|---|--:|--:|--:|--:|--:|---|")
    for claim_ahead, rounds in runs.items():
        def median(key: str, rounds: list[dict[str, Any]] = rounds) -> float:
            return statistics.median(r[key] for r in rounds)
        parts = []
        for name in STATEMENTS:
            seen = [r["statements"][name] for r in rounds if name in r["statements"]]
            if seen:
                parts.append(
                    f"{name} {statistics.median(s['calls'] for s in seen):.0f}, "
                    f"{statistics.median(s['rows_per_call'] for s in seen):.1f}, "
                    f"{statistics.median(s['round_trip_ms'] for s in seen):.2f} ms, "
                    f"{statistics.median(s['in_flight'] for s in seen):.0%}")
        print(f"| {claim_ahead} | {median('jobs_per_s'):,.0f} | {median('worker_us'):.1f} "
              f"| {median('server_us'):.1f} | {median('wal_bytes'):.0f} "
              f"| {median('idle'):.0%} | {'; '.join(parts)} |")
    chain = await serial_chain(args.dsn, args.jobs, args.concurrency)
    print(f"\nThe shortest chain (one connection: claim {args.concurrency}, complete them, "
          f"again): {chain['jobs_per_s']:,.0f} jobs/s; claim round trip "
          f"{chain['claim_ms']:.2f} ms (the worker's CPU in it {chain['claim_cpu_ms']:.2f} ms), "
          f"completion {chain['complete_ms']:.2f} ms ({chain['complete_cpu_ms']:.2f} ms).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True,
                        help="a database of its own: each round drops its schema pgbaton")
    parser.add_argument("--claim-ahead", default="0,auto",
                        help="comma-separated settings to compare (N or auto)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    loop.run(main_async(args), "auto")


if __name__ == "__main__":
    main()
