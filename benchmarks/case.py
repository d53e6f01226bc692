"""One case for one system, in a process of its own and a database of its own.

    python -m benchmarks.case SYSTEM CASE --dsn URL --params JSON
    python -m benchmarks.case SYSTEM --check
    python -m benchmarks.case SYSTEM --prepare --dsn URL

The orchestrator (benchmarks.run) creates the fresh database, starts this process, and
reads the last line it prints: `RESULT {json}`. Keeping every run in its own process
means that the RSS measured is that of one system's worker and nothing else, and that
no state (pools, caches, imported peers) leaks from one run into the next.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from . import held_xmin as xmin
from .common import PROBE, RssSampler, ServerReading, percentile
from .systems import load
from .systems.base import System

MB = 1024 * 1024
STOP_TIMEOUT_SECONDS = 60.0


def chunks(seqs: Sequence[int], size: int) -> Iterator[Sequence[int]]:
    for start in range(0, len(seqs), size):
        yield seqs[start : start + size]


async def wait_until_finished(system: System, timeout: float, interval: float) -> None:
    """Until the database says no job is pending or running."""
    deadline = time.perf_counter() + timeout
    while (left := await system.unfinished()) > 0:
        system.check_worker()
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{left} jobs still unfinished after {timeout:.0f} s")
        await asyncio.sleep(interval)


async def cpu_at_first_start(system: System) -> tuple[float, ServerReading]:
    """The worker's CPU time and the server's reading when its first handler starts
    (within a millisecond), so that the start-up of its processes is not counted."""
    while PROBE.first is None:
        await asyncio.sleep(0.001)
    cpu = system.worker_cpu_seconds()
    return cpu, await ServerReading.take(system.db)


async def stop(system: System) -> None:
    await asyncio.wait_for(system.stop_worker(), STOP_TIMEOUT_SECONDS)


# -- the cases --------------------------------------------------------------------------


async def enqueue_single(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """One enqueue call per job, each its own transaction; a system that is still busy
    when the time cap runs out is measured over the jobs it enqueued by then."""
    jobs, cap = p["jobs"], p["time_cap"]
    fresh_collector()
    started = time.perf_counter()
    done = 0
    for seq in range(jobs):
        await system.enqueue_one(seq)
        done += 1
        if time.perf_counter() - started > cap:
            break
    seconds = time.perf_counter() - started
    stored = await system.stored()
    if stored != done:
        raise RuntimeError(f"enqueued {done} jobs but {stored} are pending")
    return {
        "metrics": {"jobs_per_s": done / seconds},
        "info": {"seconds": seconds, "jobs": done, "capped": done < jobs},
    }


def fresh_collector() -> None:
    """A full garbage collection before a timed part, so every system starts it at the
    same point of the collector's cycle. A full pass costs 10 to 20 ms in a process of
    this size; in a case of a tenth of a second, one that falls inside one system's
    window and not the other's was most of a 0.86x ratio of the bulk enqueue between two
    trees that allocate the same per job (benchmarks/README.md, "Against a base ref")."""
    gc.collect()


async def enqueue_bulk(system: System, p: dict[str, Any]) -> dict[str, Any]:
    jobs, batch = p["jobs"], p["batch"]
    seqs = range(jobs)
    fresh_collector()
    server = await ServerReading.take(system.db)
    started = time.perf_counter()
    for chunk in chunks(seqs, batch):
        await system.enqueue_batch(chunk)
    seconds = time.perf_counter() - started
    server_cpu, wal = (await ServerReading.take(system.db)).since(server)
    stored = await system.stored()
    if stored != jobs:
        raise RuntimeError(f"enqueued {jobs} jobs but {stored} are pending")
    return {"metrics": {"jobs_per_s": jobs / seconds,
                        "server_cpu_us_per_job": server_cpu / jobs * 1e6,
                        "wal_bytes_per_job": wal / jobs},
            "info": {"seconds": seconds}}


async def drain(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """Pre-enqueue the jobs (untimed), start the worker, and time from the first handler
    start to the moment the database shows every job finished. A system that has not
    started every job when the time cap runs out is measured over the jobs started by
    then (the report marks it).

    A worker of several processes is timed from the first job of its last process to
    start, over the jobs started from then on: its processes start tens to hundreds of
    milliseconds apart, and the jobs one process ran alone before the other was up
    would measure the start-up, not the drain with every process."""
    jobs, batch, concurrency = p["jobs"], p["batch"], p["concurrency"]
    cap, timeout = p["time_cap"], p["timeout"]
    for chunk in chunks(range(jobs), batch):
        await system.enqueue_batch(chunk)
    await system.analyze()
    stored = await system.stored()
    if stored != jobs:
        raise RuntimeError(f"pre-enqueued {jobs} jobs but {stored} are pending")
    PROBE.reset()
    capped = False
    fresh_collector()
    with RssSampler(system.worker_rss) as rss:
        launched = time.perf_counter()
        await system.start_worker(concurrency)
        cpu_at_first = asyncio.create_task(cpu_at_first_start(system))
        try:
            await PROBE.wait_started(jobs, cap, alive=system.check_worker)
        except TimeoutError:
            capped = True
        if capped:
            # Measured over the jobs started by the cap: at most N more than those
            # finished, and no count query that a slow system could stretch.
            finished = time.perf_counter()
            done = len(PROBE.started)
        else:
            # Every handler has started; poll the database only now, so that counting
            # does not compete with the workers for the server during the drain.
            await wait_until_finished(system, timeout, 0.005)
            finished = time.perf_counter()
            done = jobs
        if PROBE.first is None:  # no job started: the case fails below
            cpu_at_first.cancel()
            cpu = server_cpu = 0.0
            wal = 0
        else:
            # Read while the worker's connections are still open (a closed backend's
            # CPU can no longer be read).
            worker_at_first, server_at_first = await cpu_at_first
            cpu = system.worker_cpu_seconds() - worker_at_first
            server_cpu, wal = (await ServerReading.take(system.db)).since(server_at_first)
    await stop(system)
    if PROBE.first is None:
        raise RuntimeError(f"no job started within {cap:.0f} s")
    first = PROBE.first
    timed_from = max(PROBE.first_by_process.values(), default=first)
    before = sum(1 for at in PROBE.started.values() if at < timed_from)
    return {
        "metrics": {
            "jobs_per_s": (done - before) / (finished - timed_from),
            "rss_peak_mb": rss.peak / MB,
            # From the first handler start to the end of the drain, all the worker's
            # processes: a figure that a busy machine moves less than the rate.
            "cpu_us_per_job": cpu / done * 1e6,
            # The same span on the server: its backends of this database (PostgreSQL
            # must run on this machine) and the WAL the server wrote.
            "server_cpu_us_per_job": server_cpu / done * 1e6,
            "wal_bytes_per_job": wal / done,
        },
        "info": {
            "seconds": finished - timed_from,
            "jobs": done,
            "capped": capped,
            "startup_seconds": first - launched,
            "executions": PROBE.hits,
            "ran_twice": PROBE.duplicates,
            # Several processes: when each started its first job, after the first one,
            # and the jobs started before the last of them, which the rate leaves out.
            "first_start_by_process_ms": sorted(
                round((at - first) * 1000, 1) for at in PROBE.first_by_process.values()
            ),
            "jobs_before_every_process_started": before,
        },
    }


async def latency(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """Single jobs arriving at an idle worker: each one is enqueued only after the
    previous one is finished in the database and a random pause has passed.

    Latency = perf_counter() at the first line of the handler minus perf_counter() just
    before the enqueue call; it includes the enqueue's own round trip and commit, the
    wake-up (NOTIFY or poll), the claim and the dispatch to the handler. Latency from
    the acknowledged enqueue is the same start minus perf_counter() just after the
    enqueue call returned: what a producer that waits for its enqueue sees. One
    monotonic clock serves producer and worker (CLOCK_MONOTONIC, system-wide, for a
    worker in processes of its own), so no clock skew enters.
    """
    jobs, concurrency = p["jobs"], p["concurrency"]
    gap_min, gap_max, warmup = p["gap_min"], p["gap_max"], p["warmup"]
    PROBE.reset()
    await system.start_worker(concurrency)
    rng = random.Random(7)
    # Warm-up jobs load whatever each system imports lazily on its first job.
    for n in range(warmup):
        await system.enqueue_one(-1 - n)
        await PROBE.wait_started(n + 1, 30, alive=system.check_worker)
        await wait_until_finished(system, 30, 0.005)
    await asyncio.sleep(1.0)
    rss_idle = system.worker_rss()
    latencies: list[float] = []
    from_ack: list[float] = []
    enqueue_calls: list[float] = []
    for seq in range(jobs):
        await asyncio.sleep(rng.uniform(gap_min, gap_max))
        before = time.perf_counter()
        await system.enqueue_one(seq)
        acknowledged = time.perf_counter()
        enqueue_calls.append(acknowledged - before)
        await PROBE.wait_started(warmup + seq + 1, 30, alive=system.check_worker)
        latencies.append(PROBE.started[seq] - before)
        # Below zero when the handler started before the call returned to the producer.
        from_ack.append(PROBE.started[seq] - acknowledged)
        await wait_until_finished(system, 30, 0.005)
    await stop(system)
    ms = [x * 1000 for x in latencies]
    ack_ms = [x * 1000 for x in from_ack]
    return {
        "metrics": {
            "p50_ms": percentile(ms, 0.50),
            "p99_ms": percentile(ms, 0.99),
            "ack_p50_ms": percentile(ack_ms, 0.50),
            "ack_p99_ms": percentile(ack_ms, 0.99),
            "rss_idle_mb": rss_idle / MB,
        },
        "info": {
            "mean_ms": sum(ms) / len(ms),
            "max_ms": max(ms),
            "enqueue_call_p50_ms": percentile([x * 1000 for x in enqueue_calls], 0.50),
            "samples_ms": [round(x, 3) for x in ms],
            "ack_samples_ms": [round(x, 3) for x in ack_ms],
        },
    }


async def claim_time(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """Claim latency (one LIMIT 1 claim per round trip, sequential) with `rows` finished
    jobs in the table. The table is filled once; each round then adds fresh pending jobs
    and times `claims` claims, so a round is one repeat."""
    rows, pending, claims, rounds = p["rows"], p["pending"], p["claims"], p["rounds"]
    started = time.perf_counter()
    await system.fill_done(rows)
    filled = time.perf_counter() - started
    assert system.db is not None
    await system.db.execute("VACUUM ANALYZE")
    table_mb = await system.table_bytes() / MB
    p50, p99 = await timed_claim_rounds(system, rows, pending, claims, rounds)
    return {
        "metrics": {"claim_p50_ms": p50, "claim_p99_ms": p99},
        "info": {"fill_seconds": filled, "table_mb": table_mb, "done_rows": rows},
    }


async def timed_claim_rounds(
    system: System, first_seq: int, pending: int, claims: int, rounds: int
) -> tuple[list[float], list[float]]:
    """Each round adds `pending` claimable jobs, ANALYZEs, makes 10 untimed claims, then
    times `claims` sequential LIMIT 1 claims; the p50 and p99 of each round, in ms."""
    p50: list[float] = []
    p99: list[float] = []
    for round_ in range(rounds):
        base = first_seq + round_ * pending
        for chunk in chunks(range(base, base + pending), 1000):
            await system.enqueue_batch(chunk)
        # Statistics that include the new pending rows, as autovacuum would soon give them:
        # right after a bulk insert into a fresh table the planner still sees it empty.
        await system.analyze()
        for _ in range(10):
            await system.claim_one()
        times: list[float] = []
        for _ in range(claims):
            before = time.perf_counter()
            got = await system.claim_one()
            times.append((time.perf_counter() - before) * 1000)
            if got != 1:
                raise RuntimeError(f"a claim returned {got} jobs with claimable jobs present")
        p50.append(percentile(times, 0.50))
        p99.append(percentile(times, 0.99))
    return p50, p99


async def claim_blocked(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """Claim latency (one LIMIT 1 claim per round trip) with `blocked` pending jobs of a
    paused queue ahead of every claimable one: a claim that walked them would grow with
    their number. `blocked` = 0 is the baseline the issue compares with (within 2x)."""
    blocked, pending, claims, rounds = p["blocked"], p["pending"], p["claims"], p["rounds"]
    await system.fill_blocked(blocked)
    p50, p99 = await timed_claim_rounds(system, 0, pending, claims, rounds)
    return {
        "metrics": {"claim_p50_ms": p50, "claim_p99_ms": p99},
        "info": {"blocked_rows": blocked},
    }


async def held_xmin(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """Issue 27's cell (benchmarks/held_xmin.py): a paced producer, a worker process at
    concurrency 32, and after a warm-up a session that holds the xmin horizon back for
    `hold` seconds (`readers` > 0: that many REPEATABLE READ sessions scanning the jobs
    table instead, with `reader_parallel` as their max_parallel_workers_per_gather when
    given; `queue_limit`: a concurrency limit on the cell's queue, so the worker claims
    through the flow claim); every `window` seconds the jobs table says how many
    finished, how many were offered and how long they waited for their claim. At the
    end every job must be done, once."""
    readers = p.get("readers", 0)
    assert system.db is not None
    PROBE.reset()
    if p.get("queue_limit"):
        await system.limit_queue(p["queue_limit"])
    await system.start_worker_process(p["concurrency"])
    producer = xmin.PacedProducer(system.enqueue_batch, p["rate"], p.get("tick", xmin.TICK_S))
    producing = asyncio.create_task(producer.run(), name="producer")

    def alive() -> None:
        system.check_worker()
        if producing.done():
            producing.result()  # raises the producer's error

    sampler = xmin.Sampler(system.db, system.jobs_table, p["window"], alive)
    holding = (xmin.scanning_readers(system.dsn, system.jobs_table, readers,
                                     p.get("reader_parallel")) if readers
               else xmin.idle_holder(system.dsn))
    try:
        await sampler.phase("warmup", p["warmup"])
        async with holding:
            since = (await sampler.fetch(xmin.NOW_SQL))["now"]
            await sampler.phase("hold", p["hold"])
            until = (await sampler.fetch(xmin.NOW_SQL))["now"]
            # While the horizon is still held: what it has cost the table.
            end_of_hold = await sampler.fetch(xmin.TABLE_SQL, {"jobs": system.jobs_table})
        await sampler.sample("after")
    finally:
        producer.stop()
        await producing
    span = await sampler.fetch(xmin.SPAN_SQL, {"since": since, "until": until})
    released = time.perf_counter()
    await wait_until_finished(system, p.get("drain_timeout", 300.0), 0.2)
    caught_up = time.perf_counter() - released
    once = await sampler.fetch(xmin.ONCE_SQL)
    await system.stop_worker_process()
    if once["jobs"] != producer.sent:
        raise RuntimeError(f"enqueued {producer.sent} jobs but the table holds {once['jobs']}")
    hold_seconds = (until - since).total_seconds()
    verdict = xmin.judge(sampler.windows)
    return {
        "metrics": xmin.metrics(span, end_of_hold, sampler.windows, hold_seconds),
        "info": {
            "rate": p["rate"], "hold_seconds": hold_seconds, "readers": readers,
            "reader_parallel": p.get("reader_parallel"),
            "queue_limit": p.get("queue_limit"), "concurrency": p["concurrency"],
            "window_seconds": p["window"],
            "done_met": verdict["done_met"], "wait_met": verdict["wait_met"],
            "sent": producer.sent, "producer_most_behind": producer.most_behind,
            "caught_up_seconds": caught_up, "ran_twice": PROBE.duplicates,
            "not_run_once": once["not_once"], "live_tuples_end": end_of_hold["live"],
            "windows": xmin.windows_info(sampler.windows),
        },
    }


# The cases that time the client alone (run.py --loop default runs them on asyncio's
# loop for every system).
CLIENT_CASES = frozenset({"enqueue_single", "enqueue_bulk"})

CASES: dict[str, Callable[[System, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "enqueue_single": enqueue_single,
    "enqueue_bulk": enqueue_bulk,
    "drain": drain,
    "latency": latency,
    "claim_time": claim_time,
    "claim_blocked": claim_blocked,
    "held_xmin": held_xmin,
}


async def run(system_name: str, case: str, dsn: str, params: dict[str, Any]) -> dict[str, Any]:
    system = load(system_name)(dsn)
    source = system.source()  # a base system raises here if it imports the checkout's
    await system.open()
    try:
        result = await CASES[case](system, params)
    finally:
        await system.close()
    return {**result, "source": source} if source else result


async def prepare(system_name: str, dsn: str) -> dict[str, Any]:
    """Install the system's schema in the template database that runs are copied from."""
    system = load(system_name)(dsn)
    started = time.perf_counter()
    await system.open(install=True)
    await system.close()
    return {"install_seconds": time.perf_counter() - started}


def check(system_name: str) -> dict[str, Any]:
    """Import the system and report its version, without touching a database."""
    system = load(system_name)
    version = system.installed_version()
    return {
        "name": system.name,
        "label": system.label,
        "role": system.role,
        "python": system.python,
        "max_concurrency": system.max_concurrency,
        "version": version,
        "cases": sorted(system.cases),
        "concurrency_meaning": system.concurrency_meaning,
        "settings": system.settings,
        "base_of": system.base_of,
        "source": system.source(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("system")
    parser.add_argument("case", nargs="?")
    parser.add_argument("--dsn")
    parser.add_argument("--params", default="{}")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--prepare", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if args.check:
        result = check(args.system)
    elif args.prepare:
        result = asyncio.run(prepare(args.system, args.dsn))
    else:
        main = run(args.system, args.case, args.dsn, json.loads(args.params))
        chosen = os.environ.get("PGBATON_BENCH_LOOP", "default")  # run.py --loop
        if chosen == "uvloop":
            import uvloop

            result = uvloop.run(main)
        elif chosen == "asyncio":
            result = asyncio.run(main)
        elif args.case in CLIENT_CASES:
            # An enqueue runs on the application's loop, whatever its queue's worker
            # picks: asyncio's own for every system.
            result = asyncio.run(main)
        else:  # each system on the loop its own worker command picks
            result = load(args.system).run_on_own_loop(main)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
