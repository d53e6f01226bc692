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

from .. import job_logs
from ..queue_async import AsyncQueue
from .held import HeldJobs, Outcome, Running
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
        freed = [o.claim for o in batch if o.claim.token.int not in taken]
        await self._write_extras(batch)
        await self._write_outcomes(batch)
        # After the slots are free here: other workers of a limited queue may be waiting
        # for the room these jobs made (docs/explanation/flow_control.md). A wake-up
        # that fails is not retried: those workers poll.
        try:
            await self._queue.engine.notify_freed(freed)
        except Exception as error:
            if not is_transient(error):
                raise
            logger.warning("could not wake the workers of limited queues (%s)", error)

    async def _write_extras(self, batch: list[Outcome]) -> None:
        """The lines the batch's attempts logged and the progress they reported since
        the last flush, just before their outcomes, each fenced while its job still
        runs: one statement each, and none when no attempt has any. Best effort: what
        cannot be written is logged and dropped, and the outcomes are written anyway
        (docs/howto/progress-and-logs.md)."""
        with_extras = [o for o in batch if o.logs is not None or o.progress is not None]
        if not with_extras:
            return  # the usual batch: one pass over it
        logged = [o for o in with_extras if o.logs is not None]
        reported = [(o.claim, *o.progress) for o in with_extras if o.progress is not None]
        try:
            if reported:
                await self._queue.engine.write_progress(reported)
            if logged:
                await self._queue.engine.write_logs(
                    [(o.claim, *o.logs) for o in logged if o.logs is not None],
                    ended=[job_logs.ending(ok=o.ok, snoozed=o.snooze is not None,
                                           end=o.end, error=o.error) for o in logged],
                )
        except Exception as error:
            logger.warning(
                "could not keep the log lines or progress of %d jobs (%s: %s); their "
                "outcomes are written without them", len(batch), type(error).__name__, error,
            )
        for outcome in batch:  # a batch put back after a failed write sends them no more
            outcome.logs = outcome.progress = None

    async def _write_outcomes(self, batch: list[Outcome]) -> None:
        delay = RETRY_START_SECONDS
        while batch:
            completes = [o for o in batch if o.ok]
            # The rest, sorted only when there is a rest: what the handler chose
            # (pgbaton.outcomes: a snooze, or an end at once), and the failures.
            others = [o for o in batch if not o.ok] if len(completes) < len(batch) else []
            snoozes = [o for o in others if o.snooze is not None]
            ends = [o for o in others if o.end is not None and o.snooze is None]
            fails = [o for o in others if o.snooze is None and o.end is None]
            try:
                if completes:
                    accepted = await self._queue.engine.complete_many(
                        [(o.claim, o.result) for o in completes]
                    )
                    self._written(completes, accepted)
                    batch = fails + snoozes + ends
                if fails:
                    accepted = await self._queue.engine.fail_many(
                        [(o.claim, o.error or "unknown error", o.retry_in) for o in fails]
                    )
                    self._written(fails, accepted)
                    batch = snoozes + ends
                if snoozes:
                    statuses = await self._queue.engine.snooze_many(
                        [(o.claim, o.snooze, o.max_snoozes) for o in snoozes
                         if o.snooze is not None]
                    )
                    self._written_as(snoozes, statuses)
                    batch = ends
                if ends:
                    statuses = await self._queue.engine.end_many(
                        [(o.claim, o.end, o.error or "unknown error") for o in ends
                         if o.end is not None]
                    )
                    self._written_as(ends, statuses)
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

    def _written_as(self, outcomes: list[Outcome], statuses: list[str | None]) -> None:
        for outcome, status in zip(outcomes, statuses, strict=True):
            outcome.written = status
            self._on_written(outcome, status is not None)


async def write_run_extras(queue: AsyncQueue, runs: list[tuple[Running, str]]) -> None:
    """The lines and the unwritten progress of runs that end with no outcome for the
    completer (a durable sleep or wait, before the job suspends; a release at
    shutdown, before the release), each fenced while its job still runs and labelled
    with how it ended (job_logs.ENDINGS): one statement each, and none when no run has
    any. Best effort, as Completer._write_extras."""
    logged = [(running, ended, taken) for running, ended in runs
              if running.log is not None and (taken := running.log.take()) is not None]
    reported = [(running.claim, *progress) for running, _ in runs
                if (progress := running.context._unwritten_progress()) is not None]
    if not (logged or reported):
        return
    try:
        if reported:
            await queue.engine.write_progress(reported)
        if logged:
            await queue.engine.write_logs(
                [(running.claim, *taken) for running, _, taken in logged],
                ended=[ended for _, ended, _ in logged])
    except Exception as error:
        logger.warning("could not keep the log lines or progress of %d jobs (%s: %s)",
                       len(runs), type(error).__name__, error)
