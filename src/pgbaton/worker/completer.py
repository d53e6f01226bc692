"""Writes outcomes in batches: one statement for many jobs, each row fenced by its token.

Outcomes queue up while a write is in flight, so under load each statement carries
many rows and when idle a single outcome is written at once (no tick to wait for).
A write that fails for a passing reason (the server went away, the statement was
cancelled, a lock was not granted) is retried with backoff until the claim's lease has
run out; after that the job belongs to someone else.

Written completions and failures of limited queues' jobs wake the fleet's workers of
those queues, for the room this worker's own claims have not taken already
(HeldJobs.room_taken).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable

from ..queue_async import AsyncQueue
from .held import HeldJobs, Outcome
from .supervisor import is_transient

logger = logging.getLogger("pgbaton.worker")

MAX_BATCH = 500
RETRY_START_SECONDS = 0.05
RETRY_MAX_SECONDS = 2.0


class Completer:
    def __init__(
        self,
        queue: AsyncQueue,
        held: HeldJobs,
        on_written: Callable[[Outcome, bool], None],
    ) -> None:
        self._queue = queue
        self._held = held
        self._on_written = on_written

    async def run(self) -> None:
        """Write outcomes until cancelled. An error that is not passing is raised with
        the batch put back, for the supervisor to log and start this again."""
        while True:
            await self._held.outcome_ready.wait()
            self._held.outcome_ready.clear()
            while batch := self._held.take_outcomes(MAX_BATCH):
                try:
                    await self._write(batch)
                except BaseException:
                    self._held.put_back(batch)
                    self._held.outcome_ready.set()
                    raise

    async def _write(self, batch: list[Outcome]) -> None:
        # Read before the write forgets them: the finished jobs whose room this
        # worker's claims took already wake no one for it.
        taken = self._held.room_taken
        freed = [o.claim for o in batch if o.claim.token not in taken]
        await self._write_outcomes(batch)
        # After the slots are free here: other workers of a limited queue may be waiting
        # for the room these jobs made (docs/flow_control.md). A wake-up that fails is
        # not retried: those workers poll.
        try:
            await self._queue.notify_freed(freed)
        except Exception as error:
            if not is_transient(error):
                raise
            logger.warning("could not wake the workers of limited queues (%s)", error)

    async def _write_outcomes(self, batch: list[Outcome]) -> None:
        delay = RETRY_START_SECONDS
        while batch:
            completes = [o for o in batch if o.ok]
            fails = [o for o in batch if not o.ok]
            try:
                if completes:
                    accepted = await self._queue.complete_many(
                        [(o.claim, o.result) for o in completes]
                    )
                    self._written(completes, accepted)
                    batch = fails
                if fails:
                    accepted = await self._queue.fail_many(
                        [(o.claim, o.error or "unknown error", o.retry_in) for o in fails]
                    )
                    self._written(fails, accepted)
                return
            except Exception as error:
                if not is_transient(error):
                    raise
                now = dt.datetime.now(dt.UTC)
                for outcome in batch:
                    if outcome.claim.lease_until <= now:
                        logger.warning(
                            "gave up writing job %s: its lease ran out while the write "
                            "kept failing", outcome.claim.id,
                        )
                        self._on_written(outcome, False)
                batch = [o for o in batch if o.claim.lease_until > now]
                logger.warning("writing %d outcomes failed (%s); retrying in %.2f s",
                               len(batch), error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)

    def _written(self, outcomes: list[Outcome], accepted: list[bool]) -> None:
        for outcome, ok in zip(outcomes, accepted, strict=True):
            self._on_written(outcome, ok)
