"""Runs the worker's parts (producer, heartbeat, completer, ...) and restarts any that
raises, with backoff. A part that keeps failing ends the worker: it is better to exit
non-zero and be restarted by the process manager than to look alive and do nothing."""

from __future__ import annotations

import asyncio
import collections
import logging
import random
from collections.abc import Awaitable, Callable

from .._transient import is_transient

__all__ = ["Supervisor", "cancel_all", "is_transient"]

logger = logging.getLogger("pgbaton.worker")

RESTART_START_SECONDS = 0.1
RESTART_MAX_SECONDS = 5.0


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel until every task has ended. Once is not always enough on Python 3.11:
    asyncio.wait_for (used by the pool) can swallow a cancellation that arrives just as
    what it waits for completes."""
    pending: set[asyncio.Task[None]] = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.5)


class Supervisor:
    def __init__(
        self,
        *,
        failure_limit: int,
        failure_window: float,
        on_failure: Callable[[str, Exception], None],
        on_give_up: Callable[[str, Exception], None],
    ) -> None:
        self.failure_limit = failure_limit
        self.failure_window = failure_window
        self._on_failure = on_failure
        self._on_give_up = on_give_up
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, part: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        task = asyncio.create_task(self._keep_running(name, part), name=f"pgbaton-{name}")
        self.tasks[name] = task
        return task

    async def stop(self, *names: str) -> None:
        await cancel_all([t for n, t in self.tasks.items() if not names or n in names])

    async def _keep_running(self, name: str, part: Callable[[], Awaitable[None]]) -> None:
        loop = asyncio.get_running_loop()
        failures: collections.deque[float] = collections.deque()
        delay = RESTART_START_SECONDS
        while True:
            started = loop.time()
            try:
                await part()
                return
            except Exception as error:
                now = loop.time()
                failures.append(now)
                while failures and failures[0] < now - self.failure_window:
                    failures.popleft()
                logger.error(
                    "worker part %r failed (%d time(s) in %g s): %s: %s",
                    name, len(failures), self.failure_window, type(error).__name__, error,
                    exc_info=error,
                )
                self._on_failure(name, error)
                if len(failures) >= self.failure_limit:
                    logger.critical(
                        "worker part %r failed %d times within %g s: giving up; the worker "
                        "releases its jobs and exits with status 1",
                        name, len(failures), self.failure_window,
                    )
                    self._on_give_up(name, error)
                    return
                if now - started > 10 * RESTART_MAX_SECONDS:
                    delay = RESTART_START_SECONDS
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, RESTART_MAX_SECONDS)
