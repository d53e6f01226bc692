"""Chancy: its Chancy app and Worker, with the AsyncExecutor it documents for async jobs."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from chancy import Chancy, Job, Queue, Worker

from ..common import PROBE
from .base import System

QUEUE = "bench"


async def noop(seq: int) -> None:
    # Module level: chancy stores the function's import path and the worker imports it.
    PROBE.hit(seq)


class ChancySystem(System):
    name = "chancy"
    label = "Chancy"
    distribution = "chancy"
    concurrency_meaning = (
        "Queue(concurrency=N): one Worker in one asyncio loop, at most N jobs of the queue in "
        "flight in its AsyncExecutor; each poll fetches up to the free slots."
    )
    settings = (
        "Chancy and Worker defaults (notifications on, default plugins, outgoing updates "
        "flushed every 1 s) with Queue(executor=AsyncExecutor, eager_polling=True): the "
        "executor chancy documents for async functions, and immediate re-polling when a slot "
        "frees (without it a worker fetches only on NOTIFY or every polling_interval=5 s); "
        "chancy's logger set to WARNING (its default INFO logs a line per job); enqueue "
        "through Chancy.push, bulk through Chancy.push_many."
    )
    unfinished_sql = (
        "SELECT count(*) FROM chancy_jobs WHERE state IN ('pending', 'running', 'retrying')"
    )

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        log = logging.getLogger("chancy.bench")
        log.setLevel(logging.WARNING)
        self.chancy = Chancy(dsn, log=log)
        self.job = Job.from_func(noop, queue=QUEUE)
        self.worker: Worker | None = None
        self.opened = False

    def queue(self, concurrency: int) -> Queue:
        return Queue(
            QUEUE,
            concurrency=concurrency,
            executor="chancy.executors.asyncex.AsyncExecutor",
            eager_polling=True,
        )

    async def install(self) -> None:
        await self.connect()
        await self.chancy.migrate()
        await self.chancy.declare(self.queue(1))

    async def connect(self) -> None:
        if not self.opened:
            await self.chancy.__aenter__()
            self.opened = True

    async def close(self) -> None:
        if self.opened:
            await self.chancy.__aexit__(None, None, None)
        await super().close()

    async def enqueue_one(self, seq: int) -> None:
        await self.chancy.push(self.job.with_kwargs(seq=seq))

    async def enqueue_batch(self, seqs: Sequence[int]) -> None:
        jobs = [self.job.with_kwargs(seq=s) for s in seqs]
        async for _references in self.chancy.push_many(jobs, batch_size=len(jobs)):
            pass

    async def start_worker(self, concurrency: int) -> None:
        await self.chancy.declare(self.queue(concurrency), upsert=True)
        self.worker = Worker(self.chancy, register_signal_handlers=False)
        await self.worker.start()

    def check_worker(self) -> None:
        pass

    async def stop_worker(self) -> None:
        assert self.worker is not None
        await self.worker.stop()
