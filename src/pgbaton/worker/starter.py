"""Starts the jobs claimed ahead, when a slot comes free for each.

While the worker hears cancels (its LISTEN session on `<schema>_cancelled` is up, and
has heard back an echo of the worker's lately: HeldJobs.hearing_cancels), a job
claimed ahead starts with no statement of its own: a cancel of a job that waits reaches
the worker by notification, and the job is doubted until a fenced beat sent after the
notification finds it still held (HeldJobs.doubt), so a job cancelled while it waited
never starts. So does a job whose lease may have run out by the worker's own clock (a
stalled loop, failing beats): the reaper may have handed it to another worker, which
nothing announces. Its start is recorded by the next write it needs anyway: its outcome, or
a heartbeat if it runs past one (job_complete_many, job_heartbeat_many). Until then it
has no started_at: a worker that dies before either leaves its attempt to be given back
by the reaper, while the hold its claim counted stays (the holds rule bounds a job that
kills its worker as it starts). docs/explanation/architecture.md, "Claiming ahead".

While it does not hear cancels (no LISTEN session: polling only, or reconnecting; or
no echo of its own heard back lately, worker/echo.py), and for a job a notification
named after the beat that cleared its doubt, the start is written before the handler
runs (job_start_many), in one statement for every
job about to start at that moment, each row fenced by its token: a job cancelled while
it waited, or taken by another worker after its lease, is found out there. Requests
queue up while a statement is in flight, so under load each carries many jobs. A start
that fails for a passing reason is retried with backoff; meanwhile the job keeps its
slot, and the heartbeat's fence stops it if its lease runs out.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

from ..queue_async import AsyncQueue
from .heartbeat import FENCE_MARGIN_FRACTION
from .held import HeldJobs, Running
from .supervisor import is_transient

logger = logging.getLogger("pgbaton.worker")

RETRY_START_SECONDS = 0.05
RETRY_MAX_SECONDS = 2.0


class Starter:
    def __init__(
        self, queue: AsyncQueue, held: HeldJobs, stats: Counter[str] | None = None,
        *, beat_now: Callable[[], None] | None = None,
        want_echo: Callable[[], None] | None = None,
        stopping: asyncio.Event | None = None,
    ) -> None:
        self._queue = queue
        self._held = held
        self._beat_now = beat_now  # Heartbeat.beat_now
        self._want_echo = want_echo  # Echo.want
        self._stopping = stopping  # set once the worker stops claiming
        # started_ahead: jobs claimed ahead that started; starts_written: those whose
        # start was written first (the worker's final statistics).
        self._stats: Counter[str] = stats if stats is not None else Counter()
        self._requests: list[tuple[Running, asyncio.Future[bool]]] = []
        self._ready = asyncio.Event()

    async def start(self, running: Running) -> bool:
        """May this job claimed ahead start now? False: it is no longer this worker's to
        start (cancelled, or taken after its lease). A job found gone by a beat while it
        waits here is stopped by the heartbeat instead (its task cancelled)."""
        if self._stopping is not None and self._stopping.is_set():
            # The worker is stopping: a job not started yet is handed back, not started.
            # Worker._shut_down cancels this wait and releases the job, attempt given
            # back, for another worker to take at once.
            await asyncio.get_running_loop().create_future()
        if self._held.hearing_cancels:
            if self._held.now() >= running.deadline - FENCE_MARGIN_FRACTION * running.lease:
                # Its lease may have run out by this worker's clock (its loop stalled, or
                # beats failed): the reaper may have given the job to another worker,
                # which no notification announces. A beat must find it held first.
                self._held.doubt(running, renew=True)
                if self._beat_now is not None:
                    self._beat_now()
            # A doubt raised again while the task resumed from the last one's answer is
            # answered in turn.
            while running.doubt is not None:
                await running.doubt
            if running.lost:
                return False
            # Still hearing, and no notification named it after the beat that cleared
            # its doubt was sent (a cancel that committed after that beat read the row):
            # it starts. Else its start is written first, one fenced statement.
            if self._held.hearing_cancels and running.named_at <= running.cleared_at:
                self._stats["started_ahead"] += 1
                return True
        elif self._held.listening and self._want_echo is not None:
            self._want_echo()  # listening, but no echo heard lately: ask for one now
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._requests.append((running, future))
        self._ready.set()
        return await future

    async def run(self) -> None:
        """Record starts until cancelled. An error that is not passing is raised with the
        requests put back, for the supervisor to log and start this again."""
        delay = RETRY_START_SECONDS
        while True:
            await self._ready.wait()
            self._ready.clear()
            while batch := self._take():
                try:
                    await self._write(batch)
                except Exception as error:
                    # Put back what is not answered yet (the groups written are).
                    self._requests[:0] = [(r, f) for r, f in batch if not f.done()]
                    self._ready.set()
                    if not is_transient(error):
                        raise
                    logger.warning("recording the start of %d jobs failed (%s); retrying "
                                   "in %.2f s", len(batch), error, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX_SECONDS)
                    continue
                delay = RETRY_START_SECONDS

    def _take(self) -> list[tuple[Running, asyncio.Future[bool]]]:
        # A request whose job was stopped meanwhile (lost, fenced, the worker stopping)
        # has been cancelled: nothing to start.
        batch = [(running, future) for running, future in self._requests if not future.done()]
        self._requests = []
        return batch

    async def _write(self, batch: list[tuple[Running, asyncio.Future[bool]]]) -> None:
        # The start leaves each lease as it is (a HOT update): the heartbeat renews the
        # leases of waiting and started jobs alike, so deadline and needs_extend stand.
        started = await self._queue.engine.start_many([r.claim for r, _ in batch])
        self._stats["started_ahead"] += sum(started)
        self._stats["starts_written"] += sum(started)
        for (_, future), ok in zip(batch, started, strict=True):
            if not future.done():
                future.set_result(ok)
