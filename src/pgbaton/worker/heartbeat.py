"""Keeps held leases alive, and fences the worker when it cannot.

The heartbeat extends every held lease in one statement per distinct lease, as often as
the shortest lease held needs (a third of it: two beats may fail before it runs out),
and at once for a claim whose task's lease differs from the one it was claimed with.

Self-fencing: a beat that cannot reach the database leaves the server's lease running
out. Once it has, by this worker's own clock (counted from when the last successful
beat was *sent*, so never later than the server's), another worker may have the job:
its handler is told to stop and the producer claims nothing until a beat gets through.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..context import JobContext
from ..queue_async import AsyncQueue
from .held import UNANSWERED, HeldJobs, Running, loss_of
from .supervisor import is_transient

logger = logging.getLogger("pgbaton.worker")

# A handler is told to stop this share of its lease *before* the lease runs out by this
# worker's clock, so that it has stopped by the time another worker may start the job.
FENCE_MARGIN_FRACTION = 0.2
FENCE_IDLE_SECONDS = 1.0
PROBE_SECONDS = 1.0  # how often an unreachable database is asked again
# Beats made early by cancel notifications (beat_now) come at most this often.
EARLY_BEAT_GAP_SECONDS = 0.25
# The progress handlers report (ctx.progress) is written at most this often, in one
# statement for every running job that reported since (docs/howto/progress-and-logs.md).
PROGRESS_FLUSH_SECONDS = 1.0
# A job started from the jobs ahead that runs this long has its start recorded by an
# early beat (flush_progress), not left to its outcome or the next heartbeat.
START_RECORD_SECONDS = 1.0


class Heartbeat:
    def __init__(
        self,
        queue: AsyncQueue,
        held: HeldJobs,
        *,
        default_lease: float,
        notify: Callable[..., None],
    ) -> None:
        self.queue = queue
        self.held = held
        self.default_lease = default_lease
        self._notify = notify
        self._due = 0.0  # monotonic time of the next beat
        self._early_at = -EARLY_BEAT_GAP_SECONDS  # when the last early beat was due

    async def run(self) -> None:
        """Beat until cancelled; raises what is not a lost connection (the supervisor
        logs it and starts this again)."""
        while True:
            interval = self.held.shortest_lease(self.default_lease) / 3
            if not self.held.heartbeat_ok.is_set():
                interval = min(interval, PROBE_SECONDS)
            self._due = min(self._due, self.held.now() + interval) if self._due else (
                self.held.now() + interval
            )
            # Only a job still running: a beat for none would await nothing, and this
            # loop would then spin on the event loop's thread, freezing the worker. And
            # only while beats get through: after a failed one the flag is still set,
            # and the retry waits for the probe interval like any other beat.
            if self.held.heartbeat_ok.is_set() and any(
                r.needs_extend and not (r.finished or r.lost) for r in self.held
            ):
                self._due = self.held.now()
            wait = self._due - self.held.now()
            if wait > 0:
                self.held.changed.clear()
                try:
                    await asyncio.wait_for(self.held.changed.wait(), wait)
                    continue  # a new claim: its lease may need a sooner beat
                except TimeoutError:
                    pass
            self._due = 0.0
            targets = [r for r in self.held if not r.finished]
            if targets:
                await self.extend(targets)
            elif not self.held.heartbeat_ok.is_set():
                await self._probe()  # nothing to extend: ask the database itself

    async def _probe(self) -> None:
        try:
            await asyncio.wait_for(self.queue.engine.ping(), timeout=self.default_lease)
        except Exception as error:
            if not is_transient(error):
                raise
            return
        self._reached()

    def _reached(self) -> None:
        if not self.held.heartbeat_ok.is_set():
            self.held.heartbeat_ok.set()
            logger.info("heartbeat reached the database again; claiming resumes")
            self._notify("connection.restored", None)

    def beat_now(self) -> None:
        """Beat soon: a job this worker holds may have been cancelled (a NOTIFY on
        `<schema>_cancelled`). The beat is fenced by each claim's token, so a claim
        found gone stops its handler (_lose) and one still held only has its lease
        extended early: a notification decides nothing by itself. Anyone who can log in
        can NOTIFY, so such beats come at most every EARLY_BEAT_GAP_SECONDS, and none
        while beats do not get through (the probe's pace stands)."""
        if not self.held.heartbeat_ok.is_set():
            return
        due = max(self.held.now(), self._early_at + EARLY_BEAT_GAP_SECONDS)
        if self._due and self._due <= due:
            return  # a beat is due by then already
        self._due = self._early_at = due
        self.held.changed.set()

    async def extend_one(self, context: JobContext) -> bool:
        """JobContext.heartbeat(): extend this job's lease now."""
        running = self.held.get(context.token)
        if running is None or running.lost:
            return False
        await self.extend([running])
        return not running.lost

    async def extend(self, runnings: list[Running]) -> None:
        by_lease: dict[float, list[Running]] = {}
        for running in runnings:
            if not running.lost:
                by_lease.setdefault(running.lease, []).append(running)
        for lease, group in by_lease.items():
            sent = self.held.now()
            try:
                # Bounded by the lease: past it the answer is of no use (fence() has told
                # the handlers to stop by then), and a connection that hangs (a network
                # cut off, not closed) must not keep the next beat from being tried.
                held = await asyncio.wait_for(
                    self.queue.engine.heartbeat([r.claim for r in group], lease=lease),
                    timeout=lease,
                )
            except Exception as error:
                if not is_transient(error):
                    raise
                if self.held.heartbeat_ok.is_set():
                    self.held.heartbeat_ok.clear()
                    logger.warning(
                        "heartbeat failed (%s); no new claims until the database answers",
                        error or "timed out",
                    )
                    self._notify("connection.lost", None, error=error or "timed out")
                continue
            self._reached()
            self._notify("heartbeats", None)
            gone = []
            for running, still_held in zip(group, held, strict=True):
                if still_held:
                    running.deadline = sent + lease
                    running.needs_extend = False
                    self.held.confirmed(running, sent)
                # A finished handler's outcome may have been written while this beat was
                # in flight; the completer's own fenced write tells the truth for it.
                elif not (running.lost or running.finished):
                    gone.append(running)
            if gone:
                await self._lose(gone, lease)

    async def _lose(self, gone: list[Running], lease: float) -> None:
        """Stop the handlers of claims the heartbeat found gone, saying why each was
        lost: one read, bounded like the beat; without an answer, the reason is unknown."""
        try:
            found = await asyncio.wait_for(
                self.queue.engine.claims_lost([r.claim for r in gone]), timeout=lease)
        except Exception as error:
            if not is_transient(error):
                raise
            found = [(UNANSWERED, None)] * len(gone)
        for running, (status, holder) in zip(gone, found, strict=True):
            reason, why = loss_of(status, holder)
            running.lost_detail = why
            if self.held.lose(running, reason):
                logger.warning(
                    "lost the claim on job %s (%s): stopping its handler; its result "
                    "will not be written", running.claim.id, why,
                )
                self._notify("job.lost", running)

    async def flush_progress(self) -> None:
        """Write the latest progress of each running job whose handler reported since
        the last flush, every PROGRESS_FLUSH_SECONDS, in one statement fenced by the
        claims' tokens; a worker whose handlers never report sends nothing. What a
        handler reports after its last flush rides with its outcome (Completer).
        On the same pace, beat early for the jobs started from the jobs ahead that have
        run past START_RECORD_SECONDS with their start not recorded: a short job's
        outcome records its start, a long one's is recorded within about two seconds
        instead of at the next heartbeat (job_heartbeat_many)."""
        while True:
            await asyncio.sleep(PROGRESS_FLUSH_SECONDS)
            now = self.held.now()
            unrecorded = [r for r in self.held
                          if r.started is not None and not r.claim.started
                          and now - r.started >= START_RECORD_SECONDS
                          and not (r.finished or r.lost)]
            if unrecorded and self.held.heartbeat_ok.is_set():
                await self.extend(unrecorded)
            reports = []
            for running in self.held:
                if running.finished or running.lost:
                    continue
                pending = running.context._unwritten_progress()
                if pending is not None:
                    reports.append((running, pending))
            if reports:
                await self._write_progress(reports)

    async def _write_progress(
        self, reports: list[tuple[Running, tuple[float | None, str | None]]]
    ) -> None:
        try:
            written = await asyncio.wait_for(
                self.queue.engine.write_progress([(r.claim, *p) for r, p in reports]),
                timeout=self.default_lease,
            )
        except Exception as error:
            if not is_transient(error):
                raise
            for running, _ in reports:  # the next flush writes their latest again
                running.context._progress_written = None
            logger.warning("could not write the progress of %d jobs (%s); trying again "
                           "at the next flush", len(reports), error or "timed out")
            return
        for (running, (fraction, note)), ok in zip(reports, written, strict=True):
            if ok:
                self._notify("job.progress", running,
                             detail={"fraction": fraction, "note": note})

    async def fence(self) -> None:
        """Tell handlers whose lease is about to run out by this worker's clock to stop."""
        while True:
            now = self.held.now()
            next_check = now + min(FENCE_IDLE_SECONDS,
                                   0.1 * self.held.shortest_lease(self.default_lease))
            for running in self.held:
                if running.finished or running.lost:
                    continue
                fence_at = running.deadline - FENCE_MARGIN_FRACTION * running.lease
                if now < fence_at:
                    next_check = min(next_check, fence_at)
                elif self.held.lose(running, "fenced"):
                    self.held.heartbeat_ok.clear()  # no claims until a beat gets through
                    logger.warning(
                        "job %s: its lease is running out and the heartbeat cannot reach "
                        "the database; another worker may take the job, so its handler is "
                        "told to stop", running.claim.id,
                    )
                    self._notify("worker.fenced", running)
            await asyncio.sleep(max(0.01, next_check - now))
