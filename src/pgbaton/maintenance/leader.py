"""Leader election over a PostgreSQL advisory lock, and the loop that runs the services.

The lock is session-level on a connection the leader keeps open. When the leader's
process dies or its connection drops, PostgreSQL releases the lock and the next worker
to ask becomes leader. That connection must be a server session of its own, never one
from a transaction pool (PgBouncer), where every client of the server connection would
hold the lock too: the worker passes `connect` for it (worker/sessions.py). The
services are safe to run twice (every statement guards its own state), so a brief
overlap during a network split costs nothing but work.

A service that raises is logged with its traceback and run again at its next interval;
it never stops the other services (the reaper above all) or the leadership.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence

import psycopg

from .._transient import is_transient
from ..errors import ConnectionFailed
from ..pooling import SessionConnect
from ..queue_async import AsyncQueue
from .services import Service

logger = logging.getLogger("pgbaton.maintenance")


def _ignore(*_: object, **__: object) -> None:
    pass


class Leader:
    def __init__(
        self,
        queue: AsyncQueue,
        services: Sequence[Service],
        *,
        elect_interval: float = 2.0,
        tick: float = 0.1,
        notify: Callable[..., None] = _ignore,
        connect: SessionConnect | None = None,
    ) -> None:
        self.queue = queue
        self._connect = connect or (lambda: queue.connect(autocommit=True))
        self.services = list(services)
        self.elect_interval = elect_interval
        self.tick = tick
        self.is_leader = False
        self.runs: dict[str, int] = {service.name: 0 for service in self.services}
        self.failures: dict[str, int] = {service.name: 0 for service in self.services}
        self._notify = notify

    async def run(self) -> None:
        """Campaign, lead while the lock is held, campaign again; until cancelled."""
        while True:
            try:
                conn = await self._connect()
                async with conn:
                    while True:
                        if await self.queue.engine.leader_try_acquire(conn):
                            logger.info("this worker is now the maintenance leader")
                            self.is_leader = True
                            self._notify("leader.elected", None)
                            await self._lead(conn)
                        await asyncio.sleep(self.elect_interval)
            except (ConnectionFailed, psycopg.OperationalError) as error:
                if self.is_leader:
                    logger.warning("lost the maintenance leadership: %s", error)
                    self._notify("leader.lost", None, error=error)
                self.is_leader = False
            await asyncio.sleep(self.elect_interval)

    async def _lead(self, conn: psycopg.AsyncConnection[object]) -> None:
        loop = asyncio.get_running_loop()
        due = {service.name: 0.0 for service in self.services}
        for service in self.services:
            service.on_elected()
        try:
            while True:
                for service in self.services:
                    if loop.time() >= due[service.name]:
                        await self._run_service(service)
                        due[service.name] = loop.time() + service.interval
                # Proves the session that holds the lock is still alive; raises if not.
                await self.queue.engine.ping(conn)
                await asyncio.sleep(max(self.tick, min(due.values()) - loop.time()))
        finally:
            # Lost the lock, or stopping: what a service left running must not outlive
            # the term (another worker leads now, or the pool closes).
            for service in self.services:
                service.on_deposed()

    async def _run_service(self, service: Service) -> None:
        try:
            count = await service.run_once()
        except Exception as error:
            self.failures[service.name] += 1
            if is_transient(error):
                logger.warning("maintenance service %r failed (%s); it runs again in "
                               "%g s", service.name, error, service.interval)
            else:
                logger.error("maintenance service %r failed: %s: %s", service.name,
                             type(error).__name__, error, exc_info=error)
            self._notify("worker.part_failed", None, error=error,
                         detail={"part": f"leader.{service.name}"})
            return
        self.runs[service.name] += 1
        counts = count if isinstance(count, Mapping) else {service.event: count}
        for event, done in counts.items():
            if done and event:
                self._notify(event, None, detail={"count": done})
