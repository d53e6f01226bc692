"""Presence: the worker's row of the workers table, so that an idle worker is seen.

Every PRESENCE_SECONDS the worker writes who it is (id, host, pid, version), what it
serves (queues, concurrency) and how many jobs it holds; on a clean stop it deletes
its row. A worker that dies leaves a row whose last beat grows old: the dashboard's
/workers page shows it as not seen since then (docs/howto/dashboard-metrics-traces.md,
"Workers"). Apart from the lease heartbeat on purpose: that one beats only while jobs
are held.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import os
import socket
from typing import Any

from ..queue_async import AsyncQueue
from .held import HeldJobs
from .supervisor import is_transient

logger = logging.getLogger("pgbaton.worker")

PRESENCE_SECONDS = 5.0
# A row not refreshed for this long is a worker that is gone (three beats missed).
STALE_SECONDS = 3 * PRESENCE_SECONDS


def _version() -> str:
    try:
        return importlib.metadata.version("pgbaton")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source tree
        return "unknown"


class Presence:
    def __init__(self, queue: AsyncQueue, held: HeldJobs, *, worker_id: str,
                 queues: list[str] | None, concurrency: int,
                 interval: float = PRESENCE_SECONDS) -> None:
        self.queue = queue
        self.held = held
        self.interval = interval
        self._row: dict[str, Any] = {
            "worker_id": worker_id, "host": socket.gethostname(), "pid": os.getpid(),
            "version": _version(), "queues": queues, "concurrency": concurrency,
        }

    def row(self) -> dict[str, Any]:
        return {**self._row, "held": len(self.held)}

    async def run(self) -> None:
        """Beat until cancelled. A beat the database does not answer is skipped: the
        lease heartbeat, not this, decides whether the worker may go on."""
        while True:
            try:
                await self.queue.engine.worker_beat(self.row())
            except Exception as error:
                if not is_transient(error):
                    raise
                logger.debug("presence beat not written: %s", error)
            await asyncio.sleep(self.interval)

    async def leave(self) -> None:
        """Delete this worker's row; a stop that cannot reach the database leaves it to
        grow old."""
        try:
            await asyncio.wait_for(self.queue.engine.worker_leave(self._row), timeout=2.0)
        except Exception as error:  # the stop goes on whatever happens here
            logger.debug("presence row not deleted: %s", error)
