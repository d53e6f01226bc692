"""The worker: wires its parts around the claims it holds, and starts and stops them.

    Worker (this module)
      -> Producer    claims for free slots (producer.py)
      -> Executor    runs handlers (executor.py)
      -> Starter     starts jobs claimed ahead, fenced by notification or statement
                     (starter.py)
      -> Cancels     what the worker hears of cancels, and the doubts (cancels.py)
      -> Echo        shows the LISTEN session still hears cancels (echo.py)
      -> HandBack    releases jobs claimed ahead that waited too long (hand_back.py)
      -> Heartbeat   extends leases, fences itself when it cannot, writes progress
                     (heartbeat.py)
      -> Completer   writes outcomes in batches, each attempt's log lines first
                     (completer.py)
      -> Presence    its row of the workers table, idle or not (presence.py)
      -> listen()    LISTEN wake-ups (listener.py)
      -> Leader      maintenance, on one worker of the fleet (maintenance/)
      all of them -> HeldJobs (held.py), the claims held, which they share

Every part runs under the Supervisor (supervisor.py), which restarts it when it raises
and ends the worker when it keeps failing. No transaction is open while a handler runs.
The connections it starts with (a direct one for LISTEN and the leader behind
PgBouncer) are chosen by sessions.py.

Over 400 lines: besides the wiring, the worker is where every part's outcome meets the
App (counting, logging, events, letting go of claims at shutdown); split further, each
piece would need the whole Worker anyway.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time
import types
from collections import Counter
from typing import Any

import psycopg

from .. import job_logs
from ..app import App
from ..dsn import with_application_name
from ..events import EVENTS, Event
from ..maintenance import Ager, Leader, Pruner, Reaper, Scheduler, Vacuumer
from ..models import Claim
from ..outcomes import Cancel, Discard, SnoozeLimit
from ..pooling import SessionConnect
from ..queue_async import AsyncQueue
from ..schedules import CODE_SCHEDULE_GRACE, code_definitions
from .ahead import HOLD_LIMIT_SECONDS, AheadSizer
from .cancels import Cancels
from .completer import Completer, write_run_extras
from .config import WorkerConfig, default_worker_id
from .echo import Echo
from .executor import Executor
from .hand_back import HandBack
from .heartbeat import Heartbeat
from .held import HeldJobs, Outcome, Running
from .listener import ListenSession, listen
from .presence import Presence
from .producer import Producer
from .releasing import release_through_passing_errors
from .sessions import open_when_reachable
from .starter import Starter
from .supervisor import Supervisor
from .watchdog import LoopWatchdog

logger = logging.getLogger("pgbaton.worker")
jobs_logger = logging.getLogger("pgbaton.jobs")

SYNC_STOP_GRACE_SECONDS = 2.0
FORCED_STOP_SECONDS = 1.0
# How long a stopping worker sends its release again through passing errors before it
# leaves the jobs to their leases (and exits).
STOP_RELEASE_SECONDS = 10.0


class Worker:
    """Runs an App's jobs in this process until stopped. `stats` counts what it did."""

    def __init__(self, app: App, config: WorkerConfig | None = None) -> None:
        self.app = app
        self.config = config or WorkerConfig()
        self.worker_id = self.config.worker_id or default_worker_id()
        # A worker works one database: its queues' route (refused if they span two), or
        # the App's own; config.dsn (--dsn) wins over both.
        self.route = app.database_of(self.config.queues)
        self.queue = AsyncQueue(
            with_application_name(self.config.dsn or self.route or app.dsn,
                                  f"pgbaton worker {self.worker_id}"),
            schema=app.schema, pool_size=4, events=app.events,
        )
        # A connection gone silent must not stall the claim or the outcomes for the
        # hours TCP takes to say so: past the lease, the answer is no use anyway (the
        # jobs may be reaped), and the statement goes again on another connection.
        self.queue.engine.bound_hot_path(self.config.lease)
        self.events = app.events
        self.stats: Counter[str] = Counter()
        self.exit_status = 0
        # claim_ahead "auto": the producer sizes each claim's jobs ahead, and jobs held
        # past the hold limit are handed back (docs/explanation/architecture.md, "Claiming
        # ahead sized by the worker"); a number: always that many.
        auto_ahead = self.config.claim_ahead == "auto"
        self.held = HeldJobs(self.config.concurrency,
                             0 if auto_ahead else int(self.config.claim_ahead))
        self._stopping = asyncio.Event()
        self._forced = asyncio.Event()
        self.heartbeat = Heartbeat(
            self.queue, self.held, default_lease=self.config.lease, notify=self._notify
        )
        self.listen_session = ListenSession()
        self.echo = Echo(self.queue, self.held, self.worker_id,
                         cut_session=self.listen_session.cut_off, stats=self.stats)
        self.starter = Starter(self.queue, self.held, self.stats,
                               beat_now=self.heartbeat.beat_now, want_echo=self.echo.want,
                               stopping=self._stopping)
        self.cancels = Cancels(self.held, self.echo, self.heartbeat.beat_now, self.stats)
        self.presence = Presence(self.queue, self.held, worker_id=self.worker_id,
                                 queues=self.config.queues,
                                 concurrency=self.config.concurrency)
        self.executor = Executor(
            held=self.held, tasks=app.tasks, middlewares=app.middlewares,
            worker_id=self.worker_id, claim_lease=self.config.lease,
            extend_one=self.heartbeat.extend_one, start_ahead=self.starter.start,
            notify=self._notify, on_dropped=self._let_go, queue=self.queue,
            claims_ahead=auto_ahead or int(self.config.claim_ahead) > 0,
            job_log_level=int(self.config.job_log_level) if self.config.job_logs else None,
            wake_in=self._wake_in,
        )
        self.producer = Producer(
            self.queue, self.held, worker_id=self.worker_id, lease=self.config.lease,
            queues=self.config.queues,
            tasks=None if self.config.claim_unknown_tasks else sorted(app.tasks),
            poll_interval=self.config.poll_interval,
            start=self._started, stopping=self._stopping, stats=self.stats,
            sizer=AheadSizer(self.config.concurrency, now=self.held.now())
            if auto_ahead else None,
        )
        self.hand_back = HandBack(
            self.queue, self.held, hold_limit=HOLD_LIMIT_SECONDS, stopping=self._stopping,
            stats=self.stats, notify=self._notify,
        ) if auto_ahead else None
        self.completer = Completer(self.queue, self.held, self._written)
        self.supervisor = Supervisor(
            failure_limit=self.config.part_failure_limit,
            failure_window=self.config.part_failure_window,
            on_failure=self._part_failed, on_give_up=self._give_up,
        )
        self.leader: Leader | None = None
        self._letting_go: set[asyncio.Task[None]] = set()

    # -- lifecycle ------------------------------------------------------------------

    def request_stop(self) -> None:
        """First call: stop claiming and finish gracefully. Second call: stop at once."""
        if self._stopping.is_set():
            logger.warning("second stop request: releasing running jobs now")
            self._forced.set()
        else:
            logger.info(
                "stopping: no new claims; running jobs get %g s to finish",
                self.config.shutdown_grace,
            )
            self._notify("worker.stopping", None, detail={"reason": "stop requested"})
            self._stopping.set()
        self.producer.wake()
        self.held.slot_free.set()

    async def run(self) -> int:
        """Run until stopped; returns the exit status (1 when a part kept failing)."""
        sessions = await open_when_reachable(self.config, self.queue)
        await self.queue.apply_limits(self.app.queue_limits)  # code wins at start
        try:
            await self._sync_schedules(None)
        except psycopg.Error as error:  # a deadlock with a leader, say: not worth a stop
            logger.warning("could not write the code's schedules as the worker started "
                           "(%s); the leader writes them at its next election", error)
        loop = asyncio.get_running_loop()
        watchdog = LoopWatchdog(
            loop,
            threshold=lambda: self.config.loop_block_fraction
            * self.held.shortest_lease(self.config.lease),
            name_blocker=self._blocker,
            on_blocked=lambda seconds, task, job_id: loop.call_soon_threadsafe(
                self._loop_blocked, seconds, task, job_id
            ),
        )
        watchdog.start()
        if self.config.job_logs:
            job_logs.install()
        logger.info(
            "worker %s started: queues=%s concurrency=%d lease=%.3gs loop=%s",
            self.worker_id, self.config.queues or "all", self.config.concurrency,
            self.config.lease, type(loop).__module__.partition(".")[0],
        )
        self._notify("worker.started", None)
        start = self.supervisor.start
        start("completer", self.completer.run)
        start("starter", self.starter.run)
        start("heartbeat", self.heartbeat.run)
        start("fence", self.heartbeat.fence)
        start("progress", self.heartbeat.flush_progress)
        start("presence", self.presence.run)
        if self.hand_back is not None:
            start("hand_back", self.hand_back.run)
        session_connect = sessions.connector(self.queue, f"pgbaton worker {self.worker_id}")
        if session_connect is not None:  # else polling only (plan_sessions warned)
            start("listener", lambda: listen(
                self.queue, self.config.queues, self._wake, connect=session_connect,
                cancelled=self.cancels.heard, deaf=self.cancels.deaf,
                echo_channel=self.echo.channel, session=self.listen_session))
            start("echo", self.echo.run)
            if self.config.maintenance:
                self.leader = self._make_leader(session_connect)
                start("leader", self.leader.run)
        producer = start("producer", self.producer.run)
        try:
            await producer
            await self._shut_down()
        finally:
            watchdog.stop()
            if self.config.job_logs:
                job_logs.uninstall()
            await self.supervisor.stop()
            await self.presence.leave()
            self.executor.shutdown()
            await self.queue.close()
            self._notify("worker.stopped", None, detail=dict(self.stats))
            self.events.flush(timeout=2.0)
            if self.config.stats_path:
                self._write_stats(self.config.stats_path)
            logger.info("worker %s stopped: %s", self.worker_id, json.dumps(dict(self.stats)))
        return self.exit_status

    def _write_stats(self, path: str) -> None:
        try:
            with open(path, "w", encoding="utf-8") as file:
                json.dump({"worker_id": self.worker_id, "exit_status": self.exit_status,
                           "stats": dict(self.stats)}, file)
        except OSError as error:
            logger.error("could not write the worker's statistics to %s: %s", path, error)

    def _make_leader(self, connect: SessionConnect) -> Leader:
        services: list[Any] = [
            Reaper(self.queue, self.config.reap_interval),
            Pruner(self.queue, self.config.prune_interval, self.config.retention,
                   mode=self.config.retention_mode,
                   history_after=self.config.history_after,
                   history_partition=self.config.history_partition),
            Ager(self.queue, self.config.reap_interval),  # each queue's `every` decides
        ]
        if self.config.vacuum_dead_tuples is not None:
            services.append(Vacuumer(self.queue, self.config.vacuum_interval,
                                     self.config.vacuum_dead_tuples))
        # This database's leader enqueues the ticks of the schedules stored here.
        services.append(Scheduler(
            self.queue, self.app.tasks, self.config.periodic_interval,
            catch_up=self._handover_window, sync=self._sync_schedules,
            worker_id=self.worker_id,
        ))
        return Leader(self.queue, services, elect_interval=self.config.elect_interval,
                      notify=self._notify, connect=connect)

    @property
    def _handover_window(self) -> float:
        """The ticks of these last seconds are on time for a new leader."""
        return 2 * self.config.elect_interval + 5

    async def _sync_schedules(self, now: dt.datetime | None) -> None:
        """Write the App's @app.periodic schedules whose queue lives in this database
        (docs/explanation/schedules.md, "Code and database"): as the worker starts, and
        as it becomes leader."""
        now = now or dt.datetime.now(dt.UTC)
        periodics = [p for p in self.app.periodics
                     if self.app.route_of(p.task.queue) == self.route]
        taken, missing = await self.queue.sync_code_schedules(
            code_definitions(periodics, now, self._handover_window), now=now,
            by=f"worker {self.worker_id}",
        )
        for name in taken:
            logger.warning("schedule %r of the code is not written: a schedule added at "
                           "run time has that name; rename one of them", name)
        for name in missing:
            logger.warning("schedule %r is no longer in this worker's code: it enqueues "
                           "nothing from now and is deleted after %s unless a worker "
                           "whose code has it starts", name, CODE_SCHEDULE_GRACE)

    def _part_failed(self, name: str, error: Exception) -> None:
        self._notify("worker.part_failed", None, error=error, detail={"part": name})

    def _give_up(self, name: str, error: Exception) -> None:
        self.exit_status = 1
        self._notify("worker.stopping", None, error=error,
                     detail={"reason": f"part {name!r} kept failing"})
        self._stopping.set()
        self._forced.set()  # release what is held now: this worker cannot be trusted
        self.producer.wake()
        self.held.slot_free.set()

    # -- wiring between the parts ---------------------------------------------------

    def _wake(self, reason: str) -> None:
        self.stats[f"wakeups_{reason}"] += 1
        self.producer.wake()

    def _started(self, claims: list[Claim], sent_at: float) -> None:
        self.stats["claimed"] += len(claims)
        self.stats["claims"] += 1  # that brought jobs: claimed / claims, their size
        self.executor.start(claims, sent_at)
        self.cancels.claimed(claims, sent_at)
        if self.events.active:
            at, worker_id = time.time(), self.worker_id
            # Positional: a keyword call of Event costs twice as much
            # (docs/reference/events.md).
            self.events.emit_many(
                Event("job.claimed", at, worker_id, c.id, c.task, c.queue, c.attempts)
                for c in claims
            )

    def _written(self, outcome: Outcome, accepted: bool) -> None:
        running = self.held.get(outcome.claim.token)
        if running is not None:
            self.held.forget(running)
        # A finished job can make others claimable (the next job of its key), and a
        # short claim may have left work behind: claim again rather than wait for a poll.
        self.producer.wake()
        if not accepted:
            self.stats["outcomes_refused"] += 1
            if running is not None:
                self._let_go(running)
            self._notify("job.lost", running, outcome=outcome)
            why = running.lost_detail if running is not None else None
            logger.warning(
                "job %s: %s refused: this worker lost the claim (%s); nothing was changed",
                outcome.claim.id, "completion" if outcome.ok else (
                    "snooze" if outcome.snooze is not None else "failure"),
                why or "its lease expired and another worker took the job, or it was "
                "cancelled",
            )
            return
        if outcome.ok:
            self.stats["completed"] += 1
            self._notify("job.succeeded", running, outcome=outcome)
            return
        if outcome.snooze is not None or outcome.end is not None:
            self._chosen_written(outcome, running)
            return
        self.stats["failed"] += 1
        if outcome.timed_out:
            self._notify("job.timed_out", running, outcome=outcome)
        final = outcome.claim.attempts >= outcome.claim.max_attempts
        if not final and outcome.retry_in is not None:
            self.producer.wake_in(outcome.retry_in)
        self._notify("job.failed" if final else "job.retried", running, outcome=outcome)
        self._log_failure(outcome, final)

    def _chosen_written(self, outcome: Outcome, running: Running | None) -> None:
        """A snooze, or an end the handler chose (or an error its task does not retry),
        is written: its event and its log line."""
        claim, error = outcome.claim, outcome.error
        if outcome.snooze is not None and outcome.written == "pending":
            self.stats["snoozed"] += 1
            snooze = outcome.snooze
            self.producer.wake_in(
                snooze.seconds if snooze.seconds is not None
                else 0.0 if snooze.until is None
                else (snooze.until - dt.datetime.now(dt.UTC)).total_seconds())
            self._notify("job.snoozed", running, outcome=outcome,
                         detail={"seconds": outcome.snooze.seconds,
                                 "until": None if outcome.snooze.until is None
                                 else outcome.snooze.until.isoformat(),
                                 "note": outcome.snooze.note})
            jobs_logger.info("job %s (task %r) %s", claim.id, claim.task, error)
            return
        if outcome.snooze is not None:  # one snooze past max_snoozes: failed
            self.stats["failed"] += 1
            outcome.error = SnoozeLimit(
                f"the job snoozed {outcome.max_snoozes} times, its task's max_snoozes, "
                f"and snoozed again ({error})")
            self._notify("job.failed", running, outcome=outcome,
                         detail={"max_snoozes": outcome.max_snoozes})
            jobs_logger.error("job %s (task %r) snoozed more than its max_snoozes (%s): "
                              "failed", claim.id, claim.task, outcome.max_snoozes)
            return
        if isinstance(error, Cancel):
            self.stats["cancelled"] += 1
            self._notify("job.cancelled", running, outcome=outcome,
                         detail={"reason": error.reason, "by": "handler"})
            jobs_logger.warning("job %s (task %r) cancelled by its handler: %s",
                                claim.id, claim.task, error.reason)
            return
        self.stats["failed"] += 1
        if isinstance(error, Discard):
            self._notify("job.discarded", running, outcome=outcome,
                         detail={"reason": error.reason})
            jobs_logger.warning("job %s (task %r) discarded by its handler: %s",
                                claim.id, claim.task, error.reason)
            return
        if outcome.timed_out:
            self._notify("job.timed_out", running, outcome=outcome)
        self._notify("job.failed", running, outcome=outcome)
        self._log_failure(outcome, True)

    def _wake_in(self, seconds: float) -> None:
        """The executor's: a job that slept durably is due in `seconds` (the producer is
        made after the executor)."""
        self.producer.wake_in(seconds)

    def _let_go(self, running: Running) -> None:
        """A claim this worker lost (cancelled by an operator, taken after its lease, or
        refused at the write): once its handler has really stopped, release it, so that
        the hold a cancelled job keeps on its key ends now rather than at its lease
        (docs/explanation/guarantees.md). The release is fenced: it changes nothing if
        another worker holds the job."""
        task = asyncio.create_task(self._release_when_stopped(running))
        self._letting_go.add(task)
        task.add_done_callback(self._letting_go.discard)

    async def _release_when_stopped(self, running: Running) -> None:
        if running.thread is not None and not running.thread.done():
            try:
                await self._hold_key_while(running, asyncio.wrap_future(running.thread))
            except asyncio.CancelledError:
                # The worker stops while the thread runs on: never let go of a job whose
                # handler still runs; its key waits for the lease last extended.
                logger.warning("job %s: its thread still runs as the worker stops; its "
                               "key stays held until its lease ends", running.claim.id)
                raise
        try:
            await self.queue.engine.release_many([running.claim])
        except Exception as error:
            logger.warning("could not let go of lost job %s (%s): its key waits for its "
                           "lease", running.claim.id, error)

    async def _hold_key_while(self, running: Running, thread: asyncio.Future[Any]) -> None:
        """Until the thread of a lost job's handler returns, keep the hold a cancelled job
        has on its key: its lease, extended as a heartbeat would (the thread cannot be
        stopped, only asked to, and the next job of its key must not start beside it).
        A job taken by another worker is left alone by the fenced statement."""
        while True:
            try:
                await self.queue.engine.hold_keys([running.claim], lease=running.lease)
            except Exception as error:
                logger.warning("job %s: could not extend the hold on its key while its "
                               "thread runs on (%s)", running.claim.id, error)
            try:
                await asyncio.wait_for(asyncio.shield(thread), running.lease / 3)
            except TimeoutError:
                continue
            except asyncio.CancelledError:
                raise  # this task's, or a thread never started: no let-go
            except BaseException:  # what the thread ended with is judged already
                return
            return

    def _log_failure(self, outcome: Outcome, final: bool) -> None:
        claim, error = outcome.claim, outcome.error
        error_type = type(error).__name__ if isinstance(error, BaseException) else "Error"
        extra = {
            "job_id": claim.id, "task": claim.task, "queue": claim.queue,
            "attempt": claim.attempts, "max_attempts": claim.max_attempts,
            "error_type": error_type,
        }
        then = "failed for good" if final else (
            f"will retry in {outcome.retry_in:.3g} s" if outcome.retry_in is not None
            else "will retry"
        )
        jobs_logger.log(
            logging.ERROR if final else logging.WARNING,
            "job %s (task %r, queue %r) attempt %d/%d failed: %s: %s; %s",
            claim.id, claim.task, claim.queue, claim.attempts, claim.max_attempts,
            error_type, error, then, extra=extra,
        )
        if isinstance(error, BaseException):
            logging.getLogger("pgbaton.jobs.traceback").log(
                self.app.traceback_log_level, "job %s traceback", claim.id,
                exc_info=error, extra=extra,
            )

    def _blocker(self, frame: types.FrameType | None) -> tuple[str, int | None] | None:
        """The handler whose code the loop's thread is in, read from its stack."""
        codes: dict[types.CodeType, Running] = {}
        for running in self.held:
            if running.task is not None and running.task.is_async:
                codes[running.task.func.__code__] = running
        while frame is not None:
            found = codes.get(frame.f_code)
            if found is not None:
                return found.claim.task, found.claim.id
            frame = frame.f_back
        return None

    def _loop_blocked(self, seconds: float, task: str | None, job_id: int | None) -> None:
        self.stats["loop_blocked"] += 1
        if self.events.active:
            self.events.emit(Event("worker.loop_blocked", worker_id=self.worker_id,
                                   task=task, job_id=job_id, run_time=seconds))

    def _notify(
        self,
        name: str,
        running: Running | None,
        *,
        outcome: Outcome | None = None,
        error: BaseException | str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Count what happened; hand it to the App's subscribers if any listen."""
        if name == "job.lost" and running is not None and outcome is None:
            self.stats["claims_lost"] += 1
        elif name in ("results_discarded", "heartbeats", "worker.fenced"):
            self.stats[name.replace("worker.", "")] += 1
        if not self.events.active or name not in EVENTS:
            return
        claim = running.claim if running is not None else (
            outcome.claim if outcome is not None else None
        )
        at = time.time()
        # Events are built positionally, and the error fields only for failures: this runs
        # for every job, and a subscriber must cost the drain little
        # (docs/reference/events.md).
        if claim is None:
            self.events.emit(Event(name, at, self.worker_id, error_type=_error_type(error),
                                   error=None if error is None else str(error),
                                   exception=error if isinstance(error, BaseException)
                                   else None, detail=detail))
            return
        queue_time = run_time = None
        if name == "job.started":
            if claim.run_at is not None:
                queue_time = max(0.0, at - claim.run_at.timestamp())
        elif outcome is not None:
            run_time = outcome.run_time
            if not outcome.ok:
                error = outcome.error
        event = Event(name, at, self.worker_id, claim.id, claim.task, claim.queue,
                      claim.attempts, queue_time, run_time)
        if error is not None or detail is not None:
            event.error_type = _error_type(error)
            event.error = None if error is None else str(error)
            event.exception = error if isinstance(error, BaseException) else None
            event.detail = detail
        self.events.emit(event)

    # -- shutdown -------------------------------------------------------------------

    async def _shut_down(self) -> None:
        # Jobs claimed ahead that have not started go back first, without spending an
        # attempt: a stopping worker starts nothing new, and once dropped from the held
        # jobs their leases are no longer extended.
        not_started = [r for r in self.held if r.started is None and not r.finished]
        for running in not_started:
            running.released = True
            if running.handler is not None:
                running.handler.cancel()
        await asyncio.gather(*(r.handler for r in not_started if r.handler),
                             return_exceptions=True)
        if not_started:
            await self._release(not_started)
        if not self._forced.is_set():
            await self._wait_handlers()
        unfinished = [r for r in self.held if not r.finished]
        for running in unfinished:
            running.released = True
            running.context._signal_stop("shutdown")
            if running.handler is not None:
                running.handler.cancel()
        await asyncio.gather(*(r.handler for r in unfinished if r.handler),
                             return_exceptions=True)
        # A sync handler cannot be cancelled, only asked to stop: give it a moment to see
        # should_stop and return before its job is handed back.
        threads = [asyncio.wrap_future(r.thread) for r in unfinished if r.thread is not None]
        if threads and not self._forced.is_set():
            await asyncio.wait(threads, timeout=SYNC_STOP_GRACE_SECONDS)
        if not self.supervisor.tasks["completer"].done():
            await self._until_forced(self.held.all_written.wait(),
                                     self.config.shutdown_grace)
        await self.supervisor.stop("completer")
        if self._letting_go:
            _, pending = await asyncio.wait(self._letting_go, timeout=FORCED_STOP_SECONDS)
            # Those still waiting for a thread stop here, before the queue closes: none
            # may write after the worker has stopped (or reopen its pool to do so).
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        # Whatever is still held now (released handlers, and outcomes the completer could
        # not write) goes back to pending without spending an attempt.
        leftover = [*unfinished, *(r for r in self.held if r not in unfinished)]
        if leftover:
            await self._keep_released_lines(leftover)
            await self._release(leftover)

    async def _keep_released_lines(self, runnings: list[Running]) -> None:
        """What the released runs logged and reported, written before the release lets
        go of the claims that fence it (nothing is sent when they have none)."""
        try:
            await asyncio.wait_for(
                write_run_extras(self.queue, [(r, "released") for r in runnings]),
                FORCED_STOP_SECONDS if self._forced.is_set() else None,
            )
        except TimeoutError:
            logger.warning("could not keep the log lines of %d released jobs in time",
                           len(runnings))

    async def _release(self, runnings: list[Running]) -> None:
        """Hand back what the stopping worker holds and has not finished; a release cut
        by a passing error is sent again (releasing.py) for up to STOP_RELEASE_SECONDS
        in all, FORCED_STOP_SECONDS after a second stop request."""
        # The whole of it, an attempt in flight included, is cut at STOP_RELEASE_SECONDS,
        # or FORCED_STOP_SECONDS after a second stop request, even one that comes while
        # it retries.
        limit = FORCED_STOP_SECONDS if self._forced.is_set() else STOP_RELEASE_SECONDS
        releasing = asyncio.ensure_future(asyncio.wait_for(
            release_through_passing_errors(
                self.queue, self.held, runnings, what="release",
                until=self.held.now() + limit),
            limit,
        ))
        forced = asyncio.ensure_future(self._forced.wait())
        try:
            await asyncio.wait([releasing, forced], return_when=asyncio.FIRST_COMPLETED)
            forced.cancel()
            released = await asyncio.wait_for(releasing, FORCED_STOP_SECONDS)
        except Exception as error:
            logger.warning("could not release %d jobs (%s): their leases will expire",
                           len(runnings), error)
            return
        if released is None:
            return
        self.stats["released"] += sum(released)
        for running, ok in zip(runnings, released, strict=True):
            if ok:
                self._notify("job.released", running)

    async def _wait_handlers(self) -> None:
        handlers = [r.handler for r in self.held if r.handler and not r.handler.done()]
        if handlers:
            await self._until_forced(
                asyncio.wait(handlers), self.config.shutdown_grace
            )

    async def _until_forced(self, awaitable: Any, timeout: float) -> None:
        """Wait for awaitable, for at most timeout, or until a second stop request."""
        waiting = asyncio.ensure_future(awaitable)
        forced = asyncio.ensure_future(self._forced.wait())
        await asyncio.wait([waiting, forced], timeout=timeout,
                           return_when=asyncio.FIRST_COMPLETED)
        for future in (waiting, forced):
            future.cancel()


def _error_type(error: BaseException | str | None) -> str | None:
    if error is None:
        return None
    return type(error).__name__ if isinstance(error, BaseException) else "Error"
