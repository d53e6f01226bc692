"""The soak's child processes: a paced producer, a real pgbaton Worker, and the short
drain that measures the maximum rate. Each serves one schema (a lane of the soak: the
comparison of retention modes runs one lane per mode, side by side). Each reports to the
soak on a multiprocessing queue about once a second; each stops when its stop event is
set.

The worker's claims are timed from the worker's side: the Worker's own
AsyncQueue.claim_batch, which its producer loop calls, is wrapped (on that instance, in
this process only) so that each claim statement's round trip, as the producer loop
awaits it, is recorded. Nothing else in the Worker changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as StopEvent
from typing import Any

import pgbaton
from pgbaton.worker import Worker, WorkerConfig

SCHEMA = "pgbaton"
REPORT_INTERVAL = 1.0
# The producer's enqueue calls in flight at most, each on a connection of its own.
IN_FLIGHT = 4

# The WorkerConfig fields of the retention modes (issue 16, item 6); a pgbaton without
# them has only the DELETE-based pruner.
HISTORY_OPTIONS = ("retention_mode", "history_after", "history_partition")

app = pgbaton.App(schema=SCHEMA)


@app.task(name="noop")
async def noop() -> None:
    """The soak's job: nothing, so that what drifts is pgbaton and PostgreSQL."""


def _timed_claims(worker: Worker) -> list[float]:
    """Record the seconds each of the worker's claims takes; returns the list it fills.
    The producer loop claims with claim_batch (claim() is a wrapper of it that the
    Worker does not call)."""
    durations: list[float] = []
    claim = worker.queue.claim_batch

    async def timed_claim(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await claim(*args, **kwargs)
        finally:
            durations.append(time.perf_counter() - started)

    worker.queue.claim_batch = timed_claim  # type: ignore[method-assign]
    return durations


def has_retention_modes() -> bool:
    """Whether the installed pgbaton's WorkerConfig has the retention modes."""
    names = {f.name for f in dataclasses.fields(WorkerConfig)}
    return all(name in names for name in HISTORY_OPTIONS)


def worker_options(concurrency: int, retention: float, prune_interval: float, *,
                   mode: str | None = None, history_after: float | None = None,
                   history_partition: float | None = None) -> dict[str, Any]:
    """WorkerConfig's fields for a lane. mode None: the pgbaton default, no
    retention_mode passed (what a pgbaton without the modes needs). "delete" is passed
    as such when the installed pgbaton knows the modes; "history" needs them, and fails
    with a clear message when they are missing."""
    options: dict[str, Any] = {"concurrency": concurrency, "retention": retention,
                               "prune_interval": prune_interval}
    if mode is None:
        return options
    if mode not in ("delete", "history"):
        raise ValueError(f"unknown retention mode {mode!r}: delete or history")
    if not has_retention_modes():
        if mode == "delete":
            return options
        raise SystemExit(
            f"the installed pgbaton ({pgbaton.__file__}) has no WorkerConfig.retention_mode "
            f"(fields {', '.join(HISTORY_OPTIONS)}): the history mode is not there yet. "
            f"Run the lanes in delete mode (--modes delete,delete) or install a pgbaton "
            f"with it (the history feature, branch wt-history)")
    options["retention_mode"] = mode
    if mode == "history":
        options["history_after"] = history_after
        options["history_partition"] = history_partition
    return options


def _worker_config(dsn: str, options: dict[str, Any]) -> WorkerConfig:
    return WorkerConfig(dsn=dsn, **options)


def worker_main(dsn: str, schema: str, options: dict[str, Any], reports: Queue[Any],
                stop: StopEvent) -> None:
    """Run a Worker on schema until stop is set; every second report the claims'
    durations and the worker's counters: ("worker", wall time, [seconds], {stat: count})."""
    logging.basicConfig(level=logging.WARNING,
                        format=f"worker {schema}: %(levelname)s %(message)s")
    app.configure(dsn=dsn, schema=schema)

    async def main() -> int:
        worker = Worker(app, _worker_config(dsn, options))
        durations = _timed_claims(worker)
        running = asyncio.create_task(worker.run())
        stopping = False
        while not running.done():
            await asyncio.wait({running}, timeout=REPORT_INTERVAL)
            batch, durations[:] = durations[:], []
            reports.put(("worker", time.time(), batch, dict(worker.stats)))
            if stop.is_set() and not stopping:
                stopping = True
                worker.request_stop()
        return running.result()

    raise SystemExit(asyncio.run(main()))


def producer_main(
    dsn: str, schema: str, reports: Queue[Any], stop: StopEvent, *, rate: float, tick: float
) -> None:
    """Enqueue `rate` jobs a second: one enqueue_many call of round(rate * tick) jobs
    every batch/rate seconds on a fixed schedule, each call started on time whether or
    not the previous one has returned (open loop, as requests arrive at an application;
    a closed loop would slow down with the server and hide its stalls), at most
    IN_FLIGHT at once. Reports ("producer", wall time, [seconds per call], enqueued,
    lag), lag being how many jobs the schedule is ahead of what was enqueued."""
    logging.basicConfig(level=logging.WARNING,
                        format=f"producer {schema}: %(levelname)s %(message)s")
    batch = max(1, round(rate * tick))
    interval = batch / rate
    jobs = [{"task": "noop", "args": {}}] * batch

    async def main() -> None:
        queue = pgbaton.AsyncQueue(dsn, schema=schema, pool_size=IN_FLIGHT)
        await queue.open()
        durations: list[float] = []
        enqueued = 0
        slots = asyncio.Semaphore(IN_FLIGHT)
        errors: list[Exception] = []

        async def enqueue(due: float) -> None:
            nonlocal enqueued
            try:
                await queue.enqueue_many(jobs)
                # From the moment the call was due: waiting for a free slot is part of
                # what a caller would see.
                durations.append(time.perf_counter() - due)
                enqueued += batch
            except Exception as error:  # ends the producer, and so the soak
                errors.append(error)
            finally:
                slots.release()

        calls: set[asyncio.Task[None]] = set()
        started = time.perf_counter()
        next_report = started + REPORT_INTERVAL
        count = 0
        try:
            while not stop.is_set():
                if errors:
                    raise errors[0]
                due = started + count * interval
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                await slots.acquire()
                call = asyncio.create_task(enqueue(due))
                calls.add(call)
                call.add_done_callback(calls.discard)
                count += 1
                now = time.perf_counter()
                if now >= next_report:
                    scheduled = int((now - started) / interval + 1) * batch
                    reports.put(("producer", time.time(), durations, enqueued,
                                 max(0, scheduled - enqueued)))
                    durations = []
                    next_report += REPORT_INTERVAL
        finally:
            await asyncio.gather(*calls, return_exceptions=True)
            await queue.close()

    asyncio.run(main())


def drain_main(dsn: str, options: dict[str, Any], jobs: int, reports: Queue[Any]) -> None:
    """Work `jobs` pending jobs with a Worker; report ("drain", jobs, seconds) timed from
    the first claim that returned jobs to the last completion."""
    logging.basicConfig(level=logging.WARNING, format="drain: %(levelname)s %(message)s")
    app.configure(dsn=dsn, schema=SCHEMA)

    async def main() -> None:
        worker = Worker(app, _worker_config(dsn, options))
        first: list[float] = []
        started: Callable[..., None] = worker.producer._start

        def note_first(claims: Any, sent: float) -> None:
            if not first and claims:
                first.append(time.perf_counter())
            started(claims, sent)

        worker.producer._start = note_first
        running = asyncio.create_task(worker.run())
        while worker.stats["completed"] < jobs and not running.done():
            await asyncio.sleep(0.005)
        finished = time.perf_counter()
        worker.request_stop()
        with contextlib.suppress(Exception):
            await running
        if worker.stats["completed"] < jobs:
            raise SystemExit(f"the drain's worker stopped after {worker.stats['completed']} "
                             f"of {jobs} jobs")
        reports.put(("drain", jobs, finished - first[0]))

    asyncio.run(main())
