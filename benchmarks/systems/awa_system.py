"""awa (PyPI awa-pg): a Rust engine with Python handlers, through its AsyncClient."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import awa

from ..common import PROBE
from .base import System

QUEUE = "bench"

COMPLETED = """
SELECT (SELECT count(*) FROM awa.done_entries
        WHERE queue = %(queue)s AND state = 'completed')
     + (SELECT coalesce(sum(completed_count), 0) FROM awa.receipt_completion_batches
        WHERE queue = %(queue)s)
     - (SELECT count(*) FROM awa.receipt_completion_tombstones WHERE queue = %(queue)s)
     + (SELECT coalesce(sum(pruned_completed_count), 0) FROM awa.queue_terminal_rollups
        WHERE queue = %(queue)s)
"""


@dataclass
class Noop:
    seq: int


class AwaSystem(System):
    name = "awa"
    label = "awa"
    distribution = "awa-pg"
    concurrency_meaning = (
        "AsyncClient.start([(queue, N)]): one process, at most N handlers of the queue in "
        "flight (N hard-reserved worker permits); claiming and completion run in awa's Rust "
        "runtime, the async handlers on this asyncio loop."
    )
    settings = (
        "AsyncClient defaults (max_connections 10, poll_interval_ms 200, queue-storage "
        "engine, installed with install_queue_storage() so that enqueues before the first "
        "worker already use it) apart from the queue's N; enqueue through "
        "AsyncClient.insert, bulk through enqueue_many_copy (COPY into queue storage, the "
        "path its README gives for high-volume producers)."
    )

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.client = awa.AsyncClient(dsn)
        self.enqueued = 0

        @self.client.task(Noop, queue=QUEUE)
        async def noop(job: Any) -> None:
            PROBE.hit(job.args.seq)

    async def install(self) -> None:
        await self.client.migrate()
        await self.client.install_queue_storage()

    async def connect(self) -> None:
        pass  # the client connects on first use

    async def close(self) -> None:
        await self.client.close()
        await super().close()

    async def enqueue_one(self, seq: int) -> None:
        await self.client.insert(Noop(seq=seq), queue=QUEUE)
        self.enqueued += 1

    async def enqueue_batch(self, seqs: Sequence[int]) -> None:
        await self.client.enqueue_many_copy([Noop(seq=s) for s in seqs], queue=QUEUE)
        self.enqueued += len(seqs)

    async def start_worker(self, concurrency: int) -> None:
        await self.client.start([(QUEUE, concurrency)])

    async def stop_worker(self) -> None:
        await self.client.shutdown()

    async def unfinished(self) -> int:
        # awa spreads a job over several tables: the ready entry it was enqueued as, then
        # batched completion receipts, some moved to done_entries (a tombstone marks a
        # receipt that moved), and when a ring slot is recycled, a per-queue count of the
        # pruned ones. Its own queue_stats() is exact but its query slows down badly as
        # receipts pile up (over two minutes after a 20,000-job drain here), so the
        # harness adds up completions itself: every job here succeeds on its first
        # attempt, and this process enqueued all of them.
        assert self.db is not None
        cursor = await self.db.execute(COMPLETED, {"queue": QUEUE})
        row = await cursor.fetchone()
        assert row is not None
        return self.enqueued - int(row[0])

    async def stored(self) -> int:
        assert self.db is not None
        cursor = await self.db.execute(
            "SELECT count(*) FROM awa.ready_entries WHERE queue = %s", (QUEUE,)
        )
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])
