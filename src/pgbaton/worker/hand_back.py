"""Hands back the jobs claimed ahead that waited too long (claim_ahead "auto").

The default claim-ahead sizes each claim so that a job waits in the worker about
TARGET_WAIT_SECONDS (worker/ahead.py). When that estimate proves wrong (handlers that ran
in milliseconds now hang), jobs would wait here while another worker sits idle. A job
still waiting for a slot after HOLD_LIMIT_SECONDS is released with job_release_many,
its attempt and its hold given back, so any worker may claim it again. A job that has
its slot (it is starting) stays.

It runs under the Supervisor like every other part: an error that is not passing is
raised for the supervisor to log and count. A passing one (a dropped connection, a
cancelled statement) is met by sending the release again, with backoff, while the jobs'
leases last: once handed back here, the jobs are no longer this worker's, and a job
left to its lease would come back through the reaper with a hold counted, as if its
worker had died holding it (the holds rule, job_claim_many). The release is fenced by
each claim's token, so a release sent again after a first one whose answer was lost
changes nothing (those jobs are counted as not handed back here). Only when the leases
run out first are the jobs left to the reaper.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

from ..queue_async import AsyncQueue
from .held import HeldJobs, Running
from .supervisor import is_transient

logger = logging.getLogger("pgbaton.worker")

RETRY_FIRST_SECONDS = 0.05
RETRY_MAX_SECONDS = 2.0


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
        released = await self._release(runnings)
        if released is None:
            return
        handed = sum(released)
        self._stats["handed_back"] += handed
        logger.info("handed back %d jobs claimed ahead that waited over %g s for a slot",
                    handed, self.hold_limit)
        for running, ok in zip(runnings, released, strict=True):
            if ok:
                self._notify("job.released", running)

    async def _release(self, runnings: list[Running]) -> list[bool] | None:
        """release_many's answer, the statement sent again after a passing error while
        the latest of the jobs' leases lasts (a job whose lease ran out may be another
        worker's by then: the fence leaves it alone); None when it never got through."""
        deadline = max(running.deadline for running in runnings)
        pause = RETRY_FIRST_SECONDS
        while True:
            try:
                return await self._queue.engine.release_many([r.claim for r in runnings])
            except Exception as error:
                if not is_transient(error):
                    raise
                if self._held.now() + pause >= deadline:
                    logger.warning(
                        "could not hand back %d jobs that waited over %g s in this "
                        "worker (%s) before their leases ran out: the reaper gives their "
                        "attempts back and counts each a hold", len(runnings),
                        self.hold_limit, error)
                    return None
                logger.warning("handing back %d jobs failed (%s); retrying in %.2f s",
                               len(runnings), error, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX_SECONDS)
