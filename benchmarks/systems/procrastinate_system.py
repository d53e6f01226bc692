"""Procrastinate: its App with the psycopg connector, its worker via run_worker_async."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import procrastinate

from ..common import PROBE
from .base import System, cancel_quietly

QUEUE = "bench"


async def noop(seq: int) -> None:
    PROBE.hit(seq)


class ProcrastinateSystem(System):
    name = "procrastinate"
    label = "Procrastinate"
    distribution = "procrastinate"
    concurrency_meaning = (
        "run_worker_async(concurrency=N): one worker, one asyncio loop, at most N jobs in "
        "flight; it fetches one job per query (procrastinate_fetch_job_v2) for each free slot."
    )
    settings = (
        "worker defaults (listen_notify=True, fetch_job_polling_interval 5 s, "
        "delete_jobs='never', the connector's default psycopg pool of 4 connections) apart "
        "from concurrency and install_signal_handlers=False; enqueue through "
        "Task.defer_async, bulk through Task.batch_defer_async (one INSERT for the batch)."
    )
    unfinished_sql = (
        "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
    )

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.app: procrastinate.App | None = None
        self.task: Any = None

    async def install(self) -> None:
        await self.connect()
        assert self.app is not None
        await self.app.schema_manager.apply_schema_async()

    async def connect(self) -> None:
        if self.app is not None:
            return
        self.app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=self.dsn))
        self.task = self.app.task(name="noop", queue=QUEUE)(noop)
        await self.app.open_async()

    async def close(self) -> None:
        if self.app is not None:
            await self.app.close_async()
        await super().close()

    async def enqueue_one(self, seq: int) -> None:
        await self.task.defer_async(seq=seq)

    async def enqueue_batch(self, seqs: Sequence[int]) -> None:
        await self.task.batch_defer_async(*({"seq": s} for s in seqs))

    async def start_worker(self, concurrency: int) -> None:
        assert self.app is not None
        self.worker_task = asyncio.create_task(
            self.app.run_worker_async(
                queues=[QUEUE], concurrency=concurrency, install_signal_handlers=False
            ),
            name="procrastinate worker",
        )

    async def stop_worker(self) -> None:
        # Cancelling run_worker_async is procrastinate's documented graceful stop when the
        # worker runs inside a larger asyncio program.
        await cancel_quietly(self.worker_task)
