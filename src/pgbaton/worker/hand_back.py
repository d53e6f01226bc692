"""Hands back the jobs claimed ahead that waited too long (claim_ahead "auto").

The default claim-ahead sizes each claim so that a job waits in the worker about
TARGET_WAIT_SECONDS (worker/ahead.py). When that estimate proves wrong (handlers that ran
in milliseconds now hang), jobs would wait here while another worker sits idle. A job
still waiting for a slot after HOLD_LIMIT_SECONDS is released with job_release_many,
its attempt and its hold given back, so any worker may claim it again. A job that has
its slot (it is starting) stays.

It runs under the Supervisor like every other part: an error that is not passing is
raised for the supervisor to log and count. A passing one (a dropped connection, a
cancelled statement) is met by sending the release again while the jobs' leases last
(releasing.py): once handed back here, the jobs are no longer this worker's.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

from ..queue_async import AsyncQueue
from .held import HeldJobs, Running
from .releasing import release_through_passing_errors

logger = logging.getLogger("pgbaton.worker")


class HandBack:
    def __init__(
        self,
        queue: AsyncQueue,
        held: HeldJobs,
        *,
        hold_limit: float,
        stopping: asyncio.Event,
        stats: Counter[str],
        notify: Callable[..., None],
    ) -> None:
        self._queue = queue
        self._held = held
        self.hold_limit = hold_limit
        self._stopping = stopping
        self._stats = stats
        self._notify = notify

    async def run(self) -> None:
        """Look four times per hold limit until cancelled; a stopping worker hands back
        every waiting job itself (Worker._shut_down)."""
        while True:
            await asyncio.sleep(self.hold_limit / 4)
            if self._stopping.is_set():
                continue
            overdue = self.overdue(self._held.now())
            if overdue:
                await self.hand_back(overdue)

    def overdue(self, now: float) -> list[Running]:
        """The jobs waiting for a slot (no handler started, none stopped) for longer
        than the hold limit."""
        return [
            running for running in self._held
            if running.started is None and not running.has_slot and not running.finished
            and not running.stopped and now - running.held_since > self.hold_limit
        ]

    async def hand_back(self, runnings: list[Running]) -> None:
        for running in runnings:
            running.released = True
            if running.handler is not None:
                running.handler.cancel()
        # Each handler task ends at once (it waited for a slot) and forgets its claim.
        await asyncio.gather(*(r.handler for r in runnings if r.handler),
                             return_exceptions=True)
        released = await release_through_passing_errors(
            self._queue, self._held, runnings, what="hand back")
        if released is None:
            return
        handed = sum(released)
        self._stats["handed_back"] += handed
        logger.info("handed back %d jobs claimed ahead that waited over %g s for a slot",
                    handed, self.hold_limit)
        for running, ok in zip(runnings, released, strict=True):
            if ok:
                self._notify("job.released", running)
