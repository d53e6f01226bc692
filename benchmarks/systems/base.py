"""What the harness asks of each system under test.

A system is driven in one process: its own client enqueues, its own worker (started
in-process, the way each project documents running it from asyncio) runs a no-op async
handler that reports to benchmarks.common.PROBE, and a plain psycopg connection of the
harness's own counts the jobs that are not finished yet, in SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import time
from collections.abc import Coroutine, Sequence
from typing import Any, ClassVar, TypeVar

import psycopg

from ..common import rss_bytes

T = TypeVar("T")

ALL_CASES = frozenset({"enqueue_single", "enqueue_bulk", "drain", "latency", "claim_time"})
# Cases of flow control (pgbaton's paused and limited queues), which the peers lack.
FLOW_CASES = frozenset({"claim_blocked"})
# Issue 27's cell (benchmarks/held_xmin.py): a worker process under a paced producer
# while a session holds the xmin horizon back; it reads the jobs table's timestamps.
HELD_XMIN_CASES = frozenset({"held_xmin"})


class System:
    name: ClassVar[str]
    label: ClassVar[str]
    #: The PyPI distribution whose version the report shows (None: none, e.g. raw SQL).
    distribution: ClassVar[str | None] = None
    #: "subject" (pgbaton at its defaults), "option" (pgbaton with a worker option a user
    #: would pick for throughput: the targets take pgbaton's best of these), "variant"
    #: (pgbaton with a feature on, to show its cost), "peer", "ceiling" (raw SQL) or
    #: "base" (pgbaton at the --base ref: the report compares it with `base_of`).
    role: ClassVar[str] = "peer"
    #: For a base system: the checkout's system it is the base of ("pgbaton").
    base_of: ClassVar[str | None] = None
    #: Whether the system is a Python library (the report's "best Python peer").
    python: ClassVar[bool] = True
    #: The highest drain concurrency the system can be run at here, None for any.
    max_concurrency: ClassVar[int | None] = None
    #: What WorkerConfig-style "concurrency N" means for this system, in one sentence.
    concurrency_meaning: ClassVar[str]
    #: The settings used, and why they are the system's recommended ones.
    settings: ClassVar[str]
    cases: ClassVar[frozenset[str]] = ALL_CASES - {"claim_time"}
    #: SQL that counts the jobs not finished yet (pending or running).
    unfinished_sql: ClassVar[str] = ""
    #: The jobs table, schema-qualified (the held-xmin case reads its timestamps).
    jobs_table: ClassVar[str] = ""

    @classmethod
    def run_on_own_loop(cls, main: Coroutine[Any, Any, T]) -> T:
        """Run a case on the event loop the system's own worker command picks at its
        defaults (run.py --loop default): asyncio's, unless a system says otherwise."""
        return asyncio.run(main)

    @classmethod
    def installed_version(cls) -> str | None:
        """The version the report shows: the PyPI distribution's, by default."""
        return importlib.metadata.version(cls.distribution) if cls.distribution else None

    @classmethod
    def source(cls) -> dict[str, str]:
        """Where the system's code was imported from, for the JSON (pgbaton: its
        `__file__`, and a base system's commit); raises if it is not where it must be."""
        return {}

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.db: psycopg.AsyncConnection[Any] | None = None
        self.worker_task: asyncio.Task[Any] | None = None

    # -- lifecycle -------------------------------------------------------------------

    async def open(self, install: bool = False) -> None:
        self.db = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        if install:
            await self.install()
        await self.connect()

    async def install(self) -> None:
        """Install the system's schema (the harness does it once, in a template database
        that each run's fresh database is then copied from)."""
        raise NotImplementedError

    async def connect(self) -> None:
        """Open the system's client on a database where its schema is installed."""

    async def close(self) -> None:
        if self.db is not None:
            await self.db.close()

    # -- producing -------------------------------------------------------------------

    async def enqueue_one(self, seq: int) -> None:
        raise NotImplementedError

    async def enqueue_batch(self, seqs: Sequence[int]) -> None:
        """The system's documented bulk path, one call for the whole batch."""
        raise NotImplementedError

    # -- consuming -------------------------------------------------------------------

    async def start_worker(self, concurrency: int) -> None:
        """Start the system's own worker in this process and return."""
        raise NotImplementedError

    async def stop_worker(self) -> None:
        raise NotImplementedError

    async def start_worker_process(self, concurrency: int) -> None:
        """Start the system's worker as its command runs it, in a process of its own
        whose handler starts feed PROBE (the held-xmin case: the producer and the
        sampling in this process do not share the worker's event loop)."""
        raise NotImplementedError

    async def stop_worker_process(self) -> None:
        raise NotImplementedError

    def worker_cpu_seconds(self) -> float:
        """CPU time (user and system) the worker has used so far: this process's for a
        worker started in-process (the harness's own share of it is small while the
        worker drains)."""
        return time.process_time()

    def worker_rss(self) -> int:
        """The worker's resident memory in bytes: this process's for a worker started
        in-process; a worker in processes of its own overrides it."""
        return rss_bytes()

    def check_worker(self) -> None:
        """Raise if the worker has died, so that a case fails fast instead of timing out."""
        task = self.worker_task
        if task is not None and task.done():
            error = None if task.cancelled() else task.exception()
            raise RuntimeError(f"{self.name} worker stopped unexpectedly: {error!r}")

    async def unfinished(self) -> int:
        assert self.db is not None
        cursor = await self.db.execute(self.unfinished_sql)  # type: ignore[arg-type]
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])

    async def stored(self) -> int:
        """How many jobs the database holds that are not finished: what an enqueue case
        checks against the number it enqueued."""
        return await self.unfinished()

    async def analyze(self) -> None:
        """Fresh statistics after a bulk load, as autovacuum would soon give them."""
        assert self.db is not None
        await self.db.execute("ANALYZE")

    # -- the claim-time case (pgbaton and raw SQL) -----------------------------------

    async def fill_done(self, rows: int) -> None:
        """Insert `rows` finished jobs with generate_series."""
        raise NotImplementedError

    async def fill_blocked(self, rows: int) -> None:
        """Insert `rows` pending jobs that no claim may take (a paused queue), ahead of
        every other job in claim order. Only systems with flow control have the case."""
        raise NotImplementedError

    async def limit_queue(self, concurrency: int) -> None:
        """A fleet-wide concurrency limit on the queue the cases enqueue to (the held-xmin
        cell's --xmin-queue-limit). Only systems with flow control have it."""
        raise NotImplementedError

    async def claim_one(self) -> int:
        """One claim of LIMIT 1 through the system's own claim path; returns rows claimed."""
        raise NotImplementedError

    async def table_bytes(self) -> int:
        raise NotImplementedError


async def cancel_quietly(task: asyncio.Task[Any] | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
