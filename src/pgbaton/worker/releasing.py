"""Jobs this worker lets go of (job_release_many), sent again after a passing error.

A release gives a job's attempt and hold back and frees it for any worker at once. Cut by
a passing error (a dropped connection, a cancelled statement: `_transient.py`), it is
sent again with backoff while the latest of the jobs' leases lasts, or until a deadline
of the caller's: left to their leases, the jobs would come back through the reaper with a
hold counted (and, for a job that started, an attempt spent), as if their worker had died
holding them. The release is fenced by each claim's token, so one sent again after a
first whose answer was lost changes nothing (those jobs are counted as not released).
Used by the hand-back (hand_back.py) and by a stopping worker (runner.py).
"""

from __future__ import annotations

import asyncio
import logging

from ..queue_async import AsyncQueue
from .held import HeldJobs, Running
from .supervisor import is_transient

logger = logging.getLogger("pgbaton.worker")

RETRY_FIRST_SECONDS = 0.05
RETRY_MAX_SECONDS = 2.0


async def release_through_passing_errors(
    queue: AsyncQueue, held: HeldJobs, runnings: list[Running], *, what: str,
    until: float | None = None,
) -> list[bool] | None:
    """release_many's answer for the runnings; None when a passing error outlasted the
    leases (or `until`, on held.now()'s clock). An error that is not passing is raised."""
    deadline = max(running.deadline for running in runnings)
    if until is not None:
        deadline = min(deadline, until)
    pause = RETRY_FIRST_SECONDS
    while True:
        try:
            return await queue.engine.release_many([r.claim for r in runnings])
        except Exception as error:
            if not is_transient(error):
                raise
            if held.now() + pause >= deadline:
                logger.warning(
                    "could not %s %d jobs (%s) in time: their leases will run out, and "
                    "the reaper gives their attempts back (not those of jobs that "
                    "started) and counts each a hold", what, len(runnings), error)
                return None
            logger.warning("%s of %d jobs failed (%s); retrying in %.2f s",
                           what, len(runnings), error, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_MAX_SECONDS)
