"""Leader election over a PostgreSQL advisory lock, and the loop that runs the services.

The lock is session-level on a connection the leader keeps open. When the leader's
process dies or its connection drops, PostgreSQL releases the lock and the next worker
to ask becomes leader. The services are safe to run twice (every statement guards
its own state), so a brief overlap during a network split costs nothing but work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import psycopg

from ..errors import ConnectionFailed
from ..queue_async import AsyncQueue
from .services import Service

logger = logging.getLogger("pgbaton.maintenance")


class Leader:
    def __init__(
        self,
        queue: AsyncQueue,
        services: Sequence[Service],
        *,
        elect_interval: float = 2.0,
        tick: float = 0.1,
    ) -> None:
        self.queue = queue
        self.services = list(services)
        self.elect_interval = elect_interval
        self.tick = tick
        self.is_leader = False
        self.runs: dict[str, int] = {service.name: 0 for service in self.services}

    async def run(self) -> None:
        """Campaign, lead while the lock is held, campaign again; until cancelled."""
        while True:
            try:
                conn = await self.queue.connect(autocommit=True)
                async with conn:
                    while True:
                        if await self.queue.leader_try_acquire(conn):
                            logger.info("this worker is now the maintenance leader")
                            self.is_leader = True
                            await self._lead(conn)
                        await asyncio.sleep(self.elect_interval)
            except (ConnectionFailed, psycopg.OperationalError) as error:
                if self.is_leader:
                    logger.warning("lost the maintenance leadership: %s", error)
                self.is_leader = False
            await asyncio.sleep(self.elect_interval)

    async def _lead(self, conn: psycopg.AsyncConnection[object]) -> None:
        loop = asyncio.get_running_loop()
        due = {service.name: 0.0 for service in self.services}
        for service in self.services:
            service.on_elected()
        while True:
            for service in self.services:
                if loop.time() >= due[service.name]:
                    try:
                        await service.run_once()
                        self.runs[service.name] += 1
                    except ConnectionFailed as error:
                        logger.warning("%s failed: %s", service.name, error)
                    due[service.name] = loop.time() + service.interval
            # Proves the session that holds the lock is still alive; raises if it is not.
            await conn.execute("SELECT 1")
            await asyncio.sleep(max(self.tick, min(due.values()) - loop.time()))
