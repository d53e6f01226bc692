"""Claims as many jobs as there are free slots, in one SKIP LOCKED statement; sleeps
until a slot frees, a NOTIFY arrives (a new job, or a finished job of a limited queue),
a rate-limited queue's next start is due, or the poll interval passes.

A limited queue's jobs count against its limit in the database until their
completions commit; the claim passes the tokens of this worker's jobs whose handlers
have ended and whose outcomes wait to be written, so it takes the room they made at
once, while the completer writes beside it (docs/explanation/flow_control.md, "The
worker's own room")."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import random
import uuid
from collections import Counter
from collections.abc import Callable

from ..models import Claim
from ..queue_async import AsyncQueue
from .ahead import AheadSizer
from .held import HeldJobs
from .supervisor import is_transient

logger = logging.getLogger("pgbaton.worker")

RETRY_START_SECONDS = 0.1
RETRY_MAX_SECONDS = 5.0


# Due times of handed-back jobs a producer keeps a wake-up for (wake_in): a snooze storm
# beyond it falls back to the poll rather than growing the heap.
MAX_DUE_WAKEUPS = 1024
# Due times further off than this wait for the poll: they would fill the heap for little.
MAX_DUE_WAKE_SECONDS = 60.0


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
        stats: Counter[str] | None = None,
        sizer: AheadSizer | None = None,
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
        # When jobs this worker handed back become due (loop time, a heap), and the
        # timer that wakes the claim for the earliest (wake_in).
        self._due: list[float] = []
        # The timer and the time it is armed for: a handle cannot be asked (uvloop's
        # call_at for a time already past returns a plain Handle, with no when()).
        self._due_timer: asyncio.Handle | None = None
        self._due_timer_at = 0.0
        # Sizes the claims ahead before each claim (claim_ahead "auto"); None: the
        # held jobs' fixed claim_ahead.
        self.sizer = sizer
        # claimed_for_finished: claims that took the room of this worker's finished,
        # not yet written jobs (the worker's final statistics).
        self.stats: Counter[str] = stats if stats is not None else Counter()

    def wake(self) -> None:
        self.wakeup.set()

    def wake_in(self, seconds: float) -> None:
        """A job this worker handed back (a snooze, a retry after its backoff, a durable
        sleep) is due in `seconds`: claim then, not at the next poll, since a job that
        becomes due sends no NOTIFY. One timer, at the earliest of these times; past
        MAX_DUE_WAKEUPS of them the rest wait for the poll. A stopping producer sets
        none."""
        if (self._stopping.is_set() or len(self._due) >= MAX_DUE_WAKEUPS
                or not 0 <= seconds <= MAX_DUE_WAKE_SECONDS):
            return  # the poll finds it (a wake that far off saves little)
        loop = asyncio.get_running_loop()
        heapq.heappush(self._due, loop.time() + seconds)
        if self._due_timer is None or self._due[0] < self._due_timer_at:
            self._arm(loop)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._due_timer is not None:
            self._due_timer.cancel()
        self._due_timer = loop.call_at(self._due[0], self._due_now, loop) if self._due \
            else None
        self._due_timer_at = self._due[0] if self._due else 0.0

    def _due_now(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        while self._due and self._due[0] <= now:
            heapq.heappop(self._due)
        self._due_timer = None
        self.wakeup.set()
        if self._due:
            self._arm(loop)

    async def run(self) -> None:
        """Claim until the worker stops."""
        try:
            await self._claim_until_stopped()
        finally:
            if self._due_timer is not None:  # a stopped producer keeps no timer
                self._due_timer.cancel()
                self._due_timer = None

    async def _claim_until_stopped(self) -> None:
        delay = RETRY_START_SECONDS
        while not self._stopping.is_set():
            if not self.held.heartbeat_ok.is_set():
                # The database may not see our heartbeats: claim nothing we may not keep.
                await self._until(self.held.heartbeat_ok, self.poll_interval)
                continue
            if self.sizer is not None:
                self.held.claim_ahead = self._ahead()
            free = self.held.free_slots()
            if self.held.claim_ahead and await self._serves_a_rate():
                free = min(free, self.held.starting_now())
            if free <= 0 or self._enough_waiting():
                self.held.slot_free.clear()
                await self._until(self.held.slot_free)
                continue
            # Cleared before the claim: a NOTIFY that lands during it wakes the next wait.
            self.wakeup.clear()
            try:
                sent = self.held.now()
                finished = self._finished()
                # Only the jobs that start at once get their start recorded by the
                # claim; those claimed ahead are started by the Starter when their turn
                # comes, so a worker that dies leaves them never started.
                batch = await self.queue.engine.claim_batch(
                    self.worker_id, limit=free, lease=self.lease, queues=self.queues,
                    tasks=self.tasks, finished=finished,
                    starting=self.held.starting_now(),
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
            if self.sizer is not None:
                self.sizer.claimed(asked=free, got=len(claims),
                                   round_trip=self.held.now() - sent)
            if finished and claims:
                self.stats["claimed_for_finished"] += self.held.room_taken_by(claims, finished)
            if claims:
                self._start(claims, sent)
            if len(claims) < free:
                poll = self.poll_interval * random.uniform(0.8, 1.0)
                if batch.next_slot_in is not None:
                    # A rate-limited queue is full: sleep until its next start is due.
                    poll = min(poll, batch.next_slot_in)
                await self._until(self.wakeup, poll)

    def _enough_waiting(self) -> bool:
        """Whether jobs claimed ahead still wait for every slot that frees, and enough
        of them that the next claim can wait until half are gone: topped up one freed
        slot at a time, a drain makes a claim per job or two (profiled: 9 jobs a claim
        at concurrency 32, twice the worker's CPU per job of not claiming ahead). Never
        while a slot is idle."""
        ahead = self.held.claim_ahead
        return (ahead > 0 and self.held.starting_now() == 0
                and self.held.waiting > ahead // 2)

    def _ahead(self) -> int:
        """The default claim-ahead: none for a worker that may claim jobs of a limited
        or rate-limited queue (held jobs would count against its limit, or start in a
        burst past its rate); else the sizer's estimate."""
        assert self.sizer is not None
        ahead = self.sizer.ahead(now=self.held.now(), handlers_ended=self.held.handlers_ended,
                                 executing=self.held.executing)
        return 0 if ahead and self._serves_limited() else ahead

    async def _serves_a_rate(self) -> bool:
        """Whether a rate-limited queue is among this worker's: its jobs are claimed
        only into free slots, never ahead. A failed read claims as if it were (the
        claim's own error handling then takes over)."""
        try:
            return await self.queue.engine.serves_a_rate(self.queues)
        except Exception as error:
            if not is_transient(error):
                raise
            return True

    def _finished(self) -> list[uuid.UUID] | None:
        """The tokens of jobs whose handlers ended and whose outcomes are not written
        yet, for a claim of limited queues: the database still counts them as held
        until their completions commit, but they run no longer, so the claim takes the
        room they made now instead of after that commit."""
        if not self.held.unwritten or not self._serves_limited():
            return None
        return self.held.awaiting_write()

    def _serves_limited(self) -> bool:
        limited = self.queue.engine.limited_queues
        return bool(limited) and (self.queues is None or not limited.isdisjoint(self.queues))

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
