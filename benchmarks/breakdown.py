"""Where the time goes in the two cases where pgbaton misses its target: the single
enqueue and the enqueue-to-start latency. Prints figures; run it alone on a quiet machine.

    .venv-bench/bin/python -m benchmarks.breakdown [--dsn DSN] [--calls 1000] [--jobs 60]

1. One round trip (SELECT 1) back to back, and after an idle pause like the latency
   case's: what waking up costs this machine before any queue does anything.
2. One enqueue, peeled layer by layer, the layers taking turns call by call so that a
   noisy second does not land on one of them: the raw-SQL loop's insert into the minimal jobs table;
   a plain insert into pgbaton's table (its columns, checks, indexes and NOTIFY
   trigger); pgbaton's job_insert statement on a bare connection; AsyncQueue.enqueue
   (checks and the connection pool); Task.enqueue_async (the App).
3. The same insert on one connection reused call after call, and on four connections
   used in turn (each backend then sleeps for three calls): what a sleeping backend
   costs to wake.
4. One job at an idle worker, the real Worker timed at each hand-off: the enqueue call,
   the NOTIFY reaching the worker, the claim, the handler's first line.
5. The step that section 4 finds the largest, the claim after an idle pause, three ways
   taking turns job by job, each timed from the enqueue's return to the claim's rows:
   pgbaton's claim on a connection of its own (as the worker's pool runs it), the same
   claim on the LISTEN connection whose backend has just delivered the NOTIFY (awake, if
   waking is the cost), and a read-only SELECT of the job's columns (what the write
   adds).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row

import pgbaton
from pgbaton._checks import job_params
from pgbaton._engine_base import claim_params
from pgbaton.worker import Worker, WorkerConfig

from .common import find_server, fresh_database, percentile
from .systems.raw_system import INSERT_ONE, SCHEMA_SQL

SCHEMA = "pgbaton"
IDLE_SECONDS = (0.05, 0.15)  # the latency case's pause between jobs

app = pgbaton.App(schema=SCHEMA)
started: dict[int, float] = {}


@app.task(name="noop")
async def noop(seq: int) -> None:
    started[seq] = time.perf_counter()


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


async def round_trips(dsn: str, samples: int) -> None:
    print("1. One round trip, SELECT 1 on one connection")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        rng = random.Random(1)
        for label, pause in (("back to back", False), ("after an idle pause", True)):
            times = []
            for _ in range(samples):
                if pause:
                    await asyncio.sleep(rng.uniform(*IDLE_SECONDS))
                before = time.perf_counter()
                await conn.execute("SELECT 1")
                times.append(time.perf_counter() - before)
            print(f"   {label:24s} p50 {ms(statistics.median(times))}")


async def enqueue_layers(dsn: str, calls: int) -> None:
    print(f"2. One enqueue, layer by layer ({calls} calls each, the layers taking turns)")
    raw = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    bare = await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, row_factory=dict_row,
        options="-c plan_cache_mode=force_generic_plan",
    )
    await raw.execute(SCHEMA_SQL)  # type: ignore[arg-type]
    queue = app.async_queue
    statement = queue._sql["job_insert"]
    params = {**job_params("noop", {"seq": 1}), "meta": None}
    args = '{"seq": 1}'

    async def job_insert_on_a_bare_connection() -> None:
        cursor = await bare.execute(statement, params)
        await cursor.fetchall()

    layers: dict[str, Callable[[], Awaitable[Any]]] = {
        "raw SQL: minimal table, one index": lambda: raw.execute(INSERT_ONE, (args,)),
        "plain INSERT, pgbaton's table": lambda: raw.execute(
            f"INSERT INTO {SCHEMA}.jobs (task, args) VALUES ('noop', %s::jsonb)",  # type: ignore[arg-type]
            (args,),
        ),
        "job_insert, bare connection": job_insert_on_a_bare_connection,
        "AsyncQueue.enqueue": lambda: queue.enqueue("noop", {"seq": 1}),
        "Task.enqueue_async": lambda: noop.enqueue_async({"seq": 1}),
    }
    times: dict[str, list[float]] = {name: [] for name in layers}
    names = list(layers)
    for turn in range(calls):
        # One call of each layer per turn, in a rotating order: a slow moment or a
        # drifting machine then touches every layer alike.
        for name in names[turn % len(names):] + names[: turn % len(names)]:
            before = time.perf_counter()
            await layers[name]()
            times[name].append(time.perf_counter() - before)
    base = statistics.median(times["raw SQL: minimal table, one index"])
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"   {name:32s} p50 {ms(median)}  {median / base:.2f}x the raw insert's time"
              f"  ({1 / median:,.0f} calls/s)")
    await raw.close()
    await bare.close()


async def backend_wakeups(dsn: str, calls: int) -> None:
    print("3. pgbaton's job_insert on one connection reused, and on four used in turn")
    statement = app.async_queue._sql["job_insert"]
    params = {**job_params("noop", {"seq": 1}), "meta": None}
    conns = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(5)]
    one, four = conns[0], conns[1:]
    times: dict[str, list[float]] = {"one connection": [], "four in turn": []}
    for turn in range(calls):
        for label, conn in (("one connection", one), ("four in turn", four[turn % 4])):
            before = time.perf_counter()
            cursor = await conn.execute(statement, params)
            await cursor.fetchall()
            times[label].append(time.perf_counter() - before)
    for label, samples in times.items():
        print(f"   {label:24s} p50 {ms(statistics.median(samples))}")
    for conn in conns:
        await conn.close()


async def latency_timeline(dsn: str, jobs: int) -> None:
    print(f"4. One job at an idle worker (concurrency 8), {jobs} jobs: the hand-offs")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f"TRUNCATE {SCHEMA}.jobs")  # type: ignore[arg-type]
    worker = Worker(app, WorkerConfig(concurrency=8, dsn=dsn))
    marks: dict[str, float] = {}
    engine = worker.queue.engine  # the producer claims through the queue's engine
    wake, claim_batch = worker._wake, engine.claim_batch

    def timed_wake(reason: str) -> None:
        marks.setdefault("notified", time.perf_counter())
        wake(reason)

    async def timed_claim(*args: Any, **kwargs: Any) -> Any:
        before = time.perf_counter()
        batch = await claim_batch(*args, **kwargs)
        if batch.claims:
            marks["claim_sent"], marks["claimed"] = before, time.perf_counter()
        return batch

    worker._wake = timed_wake  # type: ignore[method-assign]
    engine.claim_batch = timed_claim  # type: ignore[method-assign]
    running = asyncio.create_task(worker.run())
    rng = random.Random(7)
    steps: dict[str, list[float]] = {
        "enqueue call (round trip, durable commit)": [],
        "enqueue call returned -> NOTIFY at worker": [],
        "NOTIFY -> claim sent": [],
        "claim (round trip)": [],
        "claim returned -> handler's first line": [],
        "total: before enqueue -> handler": [],
    }
    for seq in range(-5, jobs):  # five warm-up jobs, not counted
        await asyncio.sleep(rng.uniform(*IDLE_SECONDS))
        marks.clear()
        before = time.perf_counter()
        await noop.enqueue_async({"seq": seq})
        returned = time.perf_counter()
        while seq not in started:
            await asyncio.sleep(0.0002)
        if seq < 0:
            continue
        for name, value in zip(steps, (
            returned - before,
            marks["notified"] - returned,
            marks["claim_sent"] - marks["notified"],
            marks["claimed"] - marks["claim_sent"],
            started[seq] - marks["claimed"],
            started[seq] - before,
        ), strict=True):
            steps[name].append(value)
    worker.request_stop()
    await running
    for name, values in steps.items():
        print(f"   {name:44s} p50 {ms(statistics.median(values))}"
              f"  p99 {ms(percentile(values, 0.99))}")
    print("   (a negative hand-off: the NOTIFY reached the worker before the enqueue call"
          " had returned to the producer, which shares the process)")


async def claim_after_idle(dsn: str, jobs: int) -> None:
    print(f"5. The claim after an idle pause, three ways in turn, {jobs} jobs each:"
          " enqueue returned -> rows back")
    queue = app.async_queue
    options = "-c plan_cache_mode=force_generic_plan"  # as the worker's pool connections
    enqueuer, own, listener = [
        await psycopg.AsyncConnection.connect(dsn, autocommit=True, options=options,
                                              prepare_threshold=0)
        for _ in range(3)
    ]
    await listener.execute(f'LISTEN "{queue.channel}"')  # type: ignore[arg-type]
    claim = queue._sql["job_claim_many"]
    params = claim_params("breakdown", 8, 30.0, None, None, finished=None)
    read_only = (f"SELECT id, claim_token, attempts, max_attempts, task, args, key, queue,"
                 f" priority, run_at, lease_until, idempotency_key, created_at, meta"
                 f" FROM {SCHEMA}.jobs WHERE status = 'pending' LIMIT 8")
    insert = queue._sql["job_insert"]
    insert_params = {**job_params("noop", {"seq": 1}), "meta": None}
    finish = f"DELETE FROM {SCHEMA}.jobs"
    ways: dict[str, tuple[psycopg.AsyncConnection[Any], str, Any]] = {
        "claim, a connection of its own": (own, claim, params),
        "claim, the LISTEN connection": (listener, claim, params),
        "read-only SELECT, its own": (own, read_only, None),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    rng = random.Random(5)
    await enqueuer.execute(finish)  # type: ignore[arg-type]
    for turn in range(-3, jobs * len(names)):  # three warm-up turns, not counted
        name = names[turn % len(names)]
        conn, statement, statement_params = ways[name]
        await asyncio.sleep(rng.uniform(*IDLE_SECONDS))
        await (await enqueuer.execute(insert, insert_params)).fetchall()
        returned = time.perf_counter()
        async for _ in listener.notifies(timeout=5, stop_after=1):
            pass
        rows = await (await conn.execute(statement, statement_params,  # type: ignore[arg-type]
                                         binary=True)).fetchall()
        took = time.perf_counter() - returned
        if len(rows) != 1:
            raise SystemExit(f"{name}: {len(rows)} rows, expected the one job")
        await enqueuer.execute(finish)  # type: ignore[arg-type]
        if turn >= 0:
            times[name].append(took)
    for name, samples in times.items():
        print(f"   {name:32s} p50 {ms(statistics.median(samples))}"
              f"  p90 {ms(percentile(samples, 0.90))}")
    for conn in (enqueuer, own, listener):
        await conn.close()


async def main(args: argparse.Namespace) -> None:
    server_dsn, server, chosen = find_server(args.dsn)
    print(f"server: {chosen}")
    try:
        with fresh_database(server_dsn, "breakdown") as dsn:
            await pgbaton.AsyncQueue(dsn, schema=SCHEMA).migrate()
            app.configure(dsn=dsn, schema=SCHEMA)
            await app.async_queue.open()
            try:
                await round_trips(dsn, 200)
                await enqueue_layers(dsn, args.calls)
                await backend_wakeups(dsn, args.calls)
                await latency_timeline(dsn, args.jobs)
                await claim_after_idle(dsn, args.jobs)
            finally:
                await app.async_queue.close()
    finally:
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", help="server (default as for benchmarks.run)")
    parser.add_argument("--calls", type=int, default=1000, help="enqueue calls per layer")
    parser.add_argument("--jobs", type=int, default=60, help="jobs in the latency timeline")
    asyncio.run(main(parser.parse_args()))
