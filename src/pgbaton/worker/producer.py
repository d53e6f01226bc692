"""Claims as many jobs as there are free slots, in one SKIP LOCKED statement; sleeps
until a slot frees, a NOTIFY arrives (a new job, or a finished job of a limited queue),
a rate-limited queue's next start is due, or the poll interval passes.

When limited queues are served, the completer also claims, in the transaction that
writes its completions (claim_after_completing); the two take turns on one lock, so the
free slots are never counted twice."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Sequence
from typing import Any

from ..models import Claim
from ..queue_async import AsyncQueue
from .held import HeldJobs
from .supervisor import is_transient

logger = logging.getLogger("pgbaton.worker")

RETRY_START_SECONDS = 0.1
RETRY_MAX_SECONDS = 5.0


class Producer:
    def __init__(
        self,
        queue: AsyncQueue,
        held: HeldJobs,
        *,
        worker_id: str,
        lease: float,
        queues: list[str] | None,
        tasks: list[str] | None,
        poll_interval: float,
        start: Callable[[list[Claim], float], None],
        stopping: asyncio.Event,
    ) -> None:
        self.queue = queue
        self.held = held
        self.worker_id = worker_id
        self.lease = lease
        self.queues = queues
        self.tasks = tasks
        self.poll_interval = poll_interval
        self._start = start
        self._stopping = stopping
        self.wakeup = asyncio.Event()
        self._claiming = asyncio.Lock()

    def wake(self) -> None:
        self.wakeup.set()

    async def run(self) -> None:
        """Claim until the worker stops."""
        delay = RETRY_START_SECONDS
        while not self._stopping.is_set():
            if not self.held.heartbeat_ok.is_set():
                # The database may not see our heartbeats: claim nothing we may not keep.
                await self._until(self.held.heartbeat_ok, self.poll_interval)
                continue
            free = self.held.free_slots()
            if free <= 0:
                self.held.slot_free.clear()
                await self._until(self.held.slot_free)
                continue
            # Cleared before the claim: a NOTIFY that lands during it wakes the next wait.
            self.wakeup.clear()
            if self.held.unwritten and self._serves_limited():
                # Finished jobs still count against their queue's limit until their
                # completions commit, which is when the completer claims for the room
                # they make (claim_after_completing); a claim now would find none.
                # The write wakes this loop, whatever it managed.
                await self._until(self.wakeup, self.poll_interval)
                continue
            try:
                async with self._claiming:
                    free = self.held.free_slots()  # the completer may have claimed
                    if free <= 0:
                        continue
                    sent = self.held.now()
                    batch = await self.queue.claim_batch(
                        self.worker_id, limit=free, lease=self.lease, queues=self.queues,
                        tasks=self.tasks,
                    )
            except Exception as error:
                if not is_transient(error):
                    raise
                logger.warning("claim failed (%s); retrying in %.1f s", error, delay)
                await self._until(self._stopping, delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)
                continue
            delay = RETRY_START_SECONDS
            claims = batch.claims
            if claims:
                self._start(claims, sent)
            if len(claims) < free:
                poll = self.poll_interval * random.uniform(0.8, 1.0)
                if batch.next_slot_in is not None:
                    # A rate-limited queue is full: sleep until its next start is due.
                    poll = min(poll, batch.next_slot_in)
                await self._until(self.wakeup, poll)

    def _serves_limited(self) -> bool:
        limited = self.queue.limited_queues
        return bool(limited) and (self.queues is None or not limited.isdisjoint(self.queues))

    async def claim_after_completing(
        self, outcomes: Sequence[tuple[Claim, Any]]
    ) -> list[bool] | None:
        """Complete these jobs and claim for the free slots in one transaction, when
        that saves a turn: this worker serves a limited queue, whose room these
        completions make. None when it does not run (no limited queue, no free slot, the
        producer claiming now, the worker stopping); the caller then writes alone.
        Raises what the write raises, with nothing written. Then wakes the fleet for
        room the claim left; a wake-up that fails is logged, never raised."""
        if (self._stopping.is_set() or self._claiming.locked()
                or not self.held.heartbeat_ok.is_set()
                or self.queue.limited_queues.isdisjoint(c.queue for c, _ in outcomes)):
            return None
        async with self._claiming:
            free = self.held.free_slots()
            if free <= 0:
                return None
            sent = self.held.now()
            accepted, batch = await self.queue.complete_and_claim(
                outcomes, self.worker_id, limit=free, lease=self.lease,
                queues=self.queues, tasks=self.tasks,
            )
        if batch.claims:
            self._start(batch.claims, sent)
        finished = [claim for (claim, _), done in zip(outcomes, accepted, strict=True) if done]
        try:
            # Written and claimed: a wake-up that fails is not retried (those workers
            # poll), and must not make the caller write these completions again.
            await self.queue.notify_freed(finished, taken=batch.claims)
        except Exception as error:
            if is_transient(error):
                logger.warning("could not wake the workers of limited queues (%s)", error)
            else:
                logger.exception("could not wake the workers of limited queues")
        return accepted

    async def _until(self, event: asyncio.Event, timeout: float | None = None) -> None:
        """Wait for event or timeout. Stopping sets every event the producer waits on
        (Worker.request_stop), so no wait outlasts it by more than the poll interval."""
        if self._stopping.is_set():
            return
        if timeout is None:
            await event.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
