"""PgQueuer: the PgQueuer app on an asyncpg connection, as its README sets it up."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any

import asyncpg
from pgqueuer import PgQueuer, Queries
from pgqueuer.db import AsyncpgDriver

from ..common import PROBE
from .base import System, T

ENTRYPOINT = "noop"


class PgqueuerSystem(System):
    name = "pgqueuer"
    label = "PgQueuer"
    distribution = "pgqueuer"
    concurrency_meaning = (
        "entrypoint(concurrency_limit=N): one PgQueuer in one asyncio loop, at most N jobs "
        "of the entrypoint in flight; it dequeues batches of up to batch_size=10 (default)."
    )
    settings = (
        "PgQueuer.run() defaults (batch_size 10, dequeue_timeout 30 s, LISTEN/NOTIFY, "
        "buffered status log) on one asyncpg connection for the worker and another for the "
        "producer; enqueue through Queries.enqueue, bulk through Queries.enqueue with lists."
    )
    # Finished jobs leave the queue table (they are logged in pgqueuer_log).
    unfinished_sql = "SELECT count(*) FROM pgqueuer"

    @classmethod
    def run_on_own_loop(cls, main: Coroutine[Any, Any, T]) -> T:
        """PgQueuer's `pgq run` runs on uvloop when it is installed (its CLI's asyncio_run),
        as it is here: PgQueuer[asyncpg] depends on it."""
        try:
            import uvloop
        except ImportError:
            return super().run_on_own_loop(main)
        return uvloop.run(main)

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.producer: Any = None
        self.queries: Queries | None = None
        self.worker_conn: Any = None
        self.pgq: PgQueuer | None = None

    async def install(self) -> None:
        await self.connect()
        assert self.queries is not None
        await self.queries.install()

    async def connect(self) -> None:
        if self.producer is not None:
            return
        self.producer = await asyncpg.connect(self.dsn)
        self.queries = Queries(AsyncpgDriver(self.producer))

    async def close(self) -> None:
        for conn in (self.producer, self.worker_conn):
            if conn is not None:
                await conn.close()
        await super().close()

    async def enqueue_one(self, seq: int) -> None:
        assert self.queries is not None
        await self.queries.enqueue(ENTRYPOINT, str(seq).encode(), 0)

    async def enqueue_batch(self, seqs: Sequence[int]) -> None:
        assert self.queries is not None
        await self.queries.enqueue(
            [ENTRYPOINT] * len(seqs), [str(s).encode() for s in seqs], [0] * len(seqs)
        )

    async def start_worker(self, concurrency: int) -> None:
        self.worker_conn = await asyncpg.connect(self.dsn)
        self.pgq = PgQueuer(AsyncpgDriver(self.worker_conn))

        @self.pgq.entrypoint(ENTRYPOINT, concurrency_limit=concurrency)
        async def noop(job: Any) -> None:
            PROBE.hit(int(job.payload))

        self.worker_task = asyncio.create_task(self.pgq.run(), name="pgqueuer worker")

    async def stop_worker(self) -> None:
        assert self.pgq is not None and self.worker_task is not None
        self.pgq.shutdown.set()
        await self.worker_task
