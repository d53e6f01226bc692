"""Runs handlers: async ones on the loop, sync ones in a thread pool; timeouts,
cancellation, middleware, and the judging of what a handler returned or raised.

Whatever a handler does (returns a value JSON cannot hold, raises SystemExit, raises
CancelledError of its own, outlives its timeout in a thread) ends as one outcome for its
attempt, or as a stopped claim; it never ends the worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import job_logs
from .._encoding import error_json, to_json
from ..context import JobContext
from ..errors import ArgsRejected, JobTimeout, PgbatonError, StepMismatch, UnknownTask
from ..middleware import Middleware, chain
from ..models import Claim
from ..outcomes import Cancel, HandlerOutcome, Snooze
from ..steps import Suspend
from .completer import write_run_extras
from .held import HeldJobs, Outcome, Running
from .suspend import write_suspension

if TYPE_CHECKING:
    from ..app import Task
    from ..queue_async import AsyncQueue

logger = logging.getLogger("pgbaton.worker")


class HandlerExit(PgbatonError):
    """A handler raised SystemExit, KeyboardInterrupt or another BaseException: its
    attempt fails with this error and the worker carries on."""


class _ThreadRaised(Exception):
    """Carries a GeneratorExit out of a sync handler's thread. asyncio throws a
    future's exception into the awaiting task at its outermost coroutine, and a
    GeneratorExit thrown there closes every coroutine it passes on the way down
    instead of reaching their except clauses: the attempt would be dropped unwritten,
    its claim left to its lease."""

    def __init__(self, error: GeneratorExit) -> None:
        super().__init__()
        self.error = error


def _in_thread(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    try:
        return func(*args, **kwargs)
    except GeneratorExit as error:
        raise _ThreadRaised(error) from None


class Executor:
    def __init__(
        self,
        *,
        held: HeldJobs,
        tasks: dict[str, Task],
        middlewares: Sequence[Middleware],
        worker_id: str,
        claim_lease: float,
        extend_one: Callable[[JobContext], Coroutine[Any, Any, bool]],
        start_ahead: Callable[[Running], Coroutine[Any, Any, bool]],
        notify: Callable[..., None],
        on_dropped: Callable[[Running], None],
        job_log_level: int | None = None,
        queue: AsyncQueue | None = None,
        wake_in: Callable[[float], None] | None = None,
        claims_ahead: bool = True,
    ) -> None:
        self.held = held
        # Whether this worker ever claims ahead: only then can a job whose start its
        # claim recorded find every slot taken (the holds rule, in _execute); asking
        # the semaphore costs a drain 0.4 us a job (py-spy) for nothing otherwise.
        self.claims_ahead = claims_ahead
        # The producer's wake_in: a durable sleep wakes the claim at its end.
        self._wake_in = wake_in
        # Keep what handlers log with their attempt at this level (job_logs.py); None:
        # the worker keeps no job's lines.
        self.job_log_level = job_log_level
        self.tasks = tasks
        self.middlewares = list(middlewares)
        self.worker_id = worker_id
        self.claim_lease = claim_lease
        self._extend_one = extend_one
        self._start_ahead = start_ahead  # Starter.start: a job claimed ahead starts
        self._notify = notify
        self._on_dropped = on_dropped
        self._queue = queue  # where the handlers' durable steps are stored
        self._emit_step = self._step_event  # bound once, not once a job
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=held.concurrency, thread_name_prefix="pgbaton-job"
        )
        # A handler runs only while it holds one of `concurrency` slots; a job claimed
        # ahead waits here for one, in claim order (asyncio wakes waiters first in, first
        # out). A sync handler that outlives its attempt keeps its slot until it returns.
        self._slots = asyncio.Semaphore(held.concurrency)

    def start(self, claims: list[Claim], sent_at: float) -> None:
        """Run the claims just made, each as soon as a slot is free; sent_at is when the
        claim statement was sent."""
        loop = asyncio.get_running_loop()
        now = self.held.now()
        # The jobs whose start the claim recorded take the free slots: the semaphore
        # serves them first (the claim marks the first in claim order already).
        in_order = claims if all(c.started for c in claims) else sorted(
            claims, key=lambda c: not c.started)
        for claim in in_order:
            task = self.tasks.get(claim.task)
            lease = task.lease if task is not None and task.lease else self.claim_lease
            context = JobContext(claim, self.worker_id, self._extend_one, loop)
            context._queue, context._emit = self._queue, self._emit_step
            running = Running(
                claim, context, task, lease, deadline=sent_at + self.claim_lease,
                needs_extend=lease != self.claim_lease, held_since=now,
            )
            self.held.add(running)
            running.handler = loop.create_task(self._execute(running))

    def _step_event(self, context: JobContext, name: str, detail: dict[str, Any]) -> None:
        """An event of a handler's durable steps (job.step_done, job.woken)."""
        self._notify(name, self.held.get(context.token), detail=detail)

    def shutdown(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def _execute(self, running: Running) -> None:
        outcome: Outcome | None = None
        slot = outlived = False
        try:
            # A job whose start its claim recorded but that must wait for a slot (one
            # held ahead three times, which its claim starts wherever it stands: the
            # holds rule) passes the same gate as a job claimed ahead when its slot
            # comes (Starter.start): a cancel while it waited must still stop it.
            waits = self.claims_ahead and self._slots.locked()
            await self._slots.acquire()
            slot = running.has_slot = True
            recorded = running.claim.started and not waits
            if not recorded and not await self._start_ahead(running):
                self._not_started(running)
            else:
                try:
                    outcome = await self._attempt(running)
                except GeneratorExit:
                    # A GeneratorExit an async handler awaited from a future (a thread
                    # of asyncio.to_thread that raised it): asyncio throws it in here,
                    # at the task's outermost coroutine, and it closed _attempt on its
                    # way down instead of reaching its except clauses (_ThreadRaised).
                    outcome = self._failure(running, HandlerExit(
                        f"task {running.claim.task!r} raised GeneratorExit: a handler "
                        "cannot stop the worker"))
                if outcome is not None and self._thread_runs(running):
                    outcome = await self._outlive(running, outcome)
                    outlived = True
        except asyncio.CancelledError:
            # We stopped it (lost, fenced, released) while it waited for a slot or its
            # start, or while its thread ran on past its attempt: nothing to write.
            outcome = None
        finally:
            if self._thread_runs(running):
                # Its claim is gone but its thread cannot be stopped, only asked to: it
                # keeps its slot until it returns.
                self._thread_strays(running)
            if running.started is not None and outcome is not None:
                outcome.run_time = self.held.now() - running.started
            if outcome is not None and (running.log is not None
                                        or running.context._progress is not None):
                self._attach_extras(running, outcome)
            # A stopping worker (released) still writes the outcome of a job whose
            # thread ran on past its attempt (_outlive); what it does not write by the
            # end it releases.
            self.held.handler_ended(running, outcome if outlived or not running.stopped
                                    else None)
            if slot and not running.strayed:
                self._slots.release()  # else the stray thread's return releases it
        if running.lost:
            if running.started is not None:
                self._notify("results_discarded", running)
            if running.stop_reason != "fenced":
                # Known lost (not merely out of reach): let go of the claim, which frees
                # the key a cancelled job holds. A fenced claim may still be ours; its
                # attempt stays counted and its lease runs out for the reaper.
                self._on_dropped(running)

    def _not_started(self, running: Running) -> None:
        """A job claimed ahead whose start was refused: cancelled while it waited, or
        taken by another worker after its lease. It never starts."""
        running.lost, running.stop_reason = True, "lost"  # no handler to tell
        logger.warning(
            "job %s (task %r) was claimed ahead and is no longer held (cancelled while it "
            "waited, or taken after its lease): it is not started", running.claim.id,
            running.claim.task,
        )
        self._notify("job.lost", running)

    async def _attempt(self, running: Running) -> Outcome | None:  # noqa: PLR0911 (a return per way a handler ends)
        """Run the handler and judge how it ended; None when we stopped it."""
        claim, task = running.claim, running.task
        routed = None
        if self.job_log_level is not None and (task is None or task.job_logs):
            # In this job's own task: its handler's records (and its thread's: the
            # thread runs in a copy of this context) are routed to this attempt.
            running.log_level = self.job_log_level
            routed = job_logs.begin_attempt(running)
        try:
            self.held.began(running)
            self._notify("job.started", running)
            if task is None:
                raise UnknownTask(
                    f"no task named {claim.task!r} is registered in this worker's App "
                    f"(it has: {', '.join(sorted(self.tasks)) or 'none'})"
                )
            # Opened, checked and typed here (ArgsRejected: failed at once, not retried).
            args = task.args_for_run(claim.args)
            result = await self._invoke(task, running, args)
            if running.context._step_log is not None:  # the run used durable steps
                running.context._steps_finished()
            if result is not None:
                to_json(result, f"result of task {task.name!r}")  # judged here, not later
            return Outcome(claim, ok=True, result=result)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if running.stopped or (current is not None and current.cancelling()):
                return None  # we stopped it: nothing to write
            # The handler raised CancelledError of its own accord.
            return self._failure(running, HandlerExit(
                f"task {claim.task!r} raised CancelledError without being cancelled"
            ))
        except JobTimeout as error:
            return self._failure(running, error, timed_out=True)
        except Suspend as suspend:  # ctx.sleep, ctx.wait_for: docs/howto/durable-steps.md
            if self._queue is not None and not running.stopped:
                # Before the suspension lets go of the claim that fences them.
                await write_run_extras(self._queue, [
                    (running, "slept" if suspend.kind == "sleep" else "waited")])
            await write_suspension(running, suspend, self._notify, self._wake_in)
            return None
        except Exception as error:
            return self._failure(running, error)
        except BaseException as error:  # SystemExit, KeyboardInterrupt, GeneratorExit...
            return self._failure(running, HandlerExit(
                f"task {claim.task!r} raised {type(error).__name__}"
                f"{f'({error})' if str(error) else ''}: a handler cannot stop the worker"
            ))
        finally:
            if routed is not None:
                # The task's context lets go of the attempt, which holds the task: a
                # cycle that only the garbage collector would free, job after job.
                try:  # noqa: SIM105 (suppress() is an object and two calls a job)
                    job_logs.end_attempt(routed)
                except ValueError:  # closed outside its task's context (a loop torn down)
                    pass

    @staticmethod
    def _thread_runs(running: Running) -> bool:
        return running.thread is not None and not running.thread.done()

    async def _outlive(self, running: Running, outcome: Outcome) -> Outcome:
        """The attempt has ended (a timeout) but its sync handler's thread runs on. Its
        job stays held, running with its lease extended, so neither the next job of its
        key, nor its own retry, nor another job of a limited queue starts beside it; the
        outcome is written once the thread returns. A thread that never returns holds
        all that until the worker stops (docs/explanation/architecture.md)."""
        assert running.thread is not None
        claim, ended = running.claim, self.held.now()
        how = "ran past its timeout" if outcome.timed_out else "ended its attempt"
        logger.warning(
            "job %s: the sync handler of task %r %s and still runs in its thread; the "
            "job stays running, holding its key and its slot, until the thread returns "
            "(or this worker stops)", claim.id, claim.task, how,
        )
        try:
            await asyncio.wrap_future(running.thread)
            after = "returned"
        except asyncio.CancelledError:
            if running.lost:
                raise  # the claim is gone: nothing to write
            # The worker stops and waits no longer. The outcome is written, not the job
            # released: a release would give the attempt back, and a thread that never
            # returns would have its job run again after every stop, for ever.
            after = "still ran when the worker stopped"
        except BaseException:
            after = "returned"  # what the thread ended with: the attempt is judged already
        late = self.held.now() - ended
        logger.warning("job %s: the thread of task %r %s, %.3g s after its attempt ended",
                       claim.id, claim.task, after, late)
        if isinstance(outcome.error, BaseException):
            outcome.error.args = (
                f"{outcome.error}; its thread {after}, {late:.3g} s later",
            )
        return outcome

    async def _invoke(self, task: Task, running: Running, args: Mapping[str, Any]) -> Any:
        positional = (running.context,) if task.pass_context else ()
        if task.is_async and task.timeout is None and not self.middlewares:
            return await task.func(*positional, **args)  # nothing to wrap it in

        async def call_handler() -> Any:
            if task.is_async:
                return await task.func(*positional, **args)
            # The thread may outlive this call (a timeout, a lost claim): _execute
            # waits for it or leaves it its slot.
            running.thread = self._threads.submit(
                contextvars.copy_context().run, _in_thread, task.func, *positional, **args
            )
            try:
                return await asyncio.wrap_future(running.thread)
            except _ThreadRaised as raised:
                raise raised.error from None  # raised here, it reaches _attempt

        call = chain(self.middlewares, running.context, call_handler)
        if task.timeout is None:
            return await call()
        deadline = asyncio.timeout(task.timeout)
        try:
            async with deadline:
                return await call()
        except TimeoutError as error:
            if not deadline.expired():
                raise
            running.context._signal_stop("timeout")
            raise JobTimeout(
                f"task {task.name!r} ran past its timeout of {task.timeout:g} s"
            ) from error

    @staticmethod
    def _attach_extras(running: Running, outcome: Outcome) -> None:
        """What the attempt logged and the progress it reported that is not written
        yet ride with its outcome to the completer."""
        if running.log is not None:
            outcome.logs = running.log.take()
        outcome.progress = running.context._unwritten_progress()

    def _thread_strays(self, running: Running) -> None:
        assert running.thread is not None
        running.strayed = True
        self.held.thread_strayed()
        loop = asyncio.get_running_loop()
        logger.warning(
            "job %s: the sync handler of task %r still runs in its thread after its "
            "attempt ended (%s); its slot stays taken until it returns",
            running.claim.id, running.claim.task, running.context.stop_reason or "stopped",
        )

        def returned(_: concurrent.futures.Future[Any]) -> None:
            loop.call_soon_threadsafe(self._thread_returned)

        running.thread.add_done_callback(returned)

    def _thread_returned(self) -> None:
        self.held.thread_returned()
        self._slots.release()

    @staticmethod
    def _chosen(running: Running, chosen: HandlerOutcome) -> Outcome:
        """The handler raised Snooze, Cancel or Discard: the outcome it asked for."""
        claim, task = running.claim, running.task
        if isinstance(chosen, Snooze):
            return Outcome(claim, ok=False, error=chosen, snooze=chosen,
                           max_snoozes=None if task is None else task.max_snoozes)
        return Outcome(claim, ok=False, error=chosen,
                       end="cancelled" if isinstance(chosen, Cancel) else "failed")

    def _failure(
        self, running: Running, error: BaseException, *, timed_out: bool = False
    ) -> Outcome:
        if isinstance(error, HandlerOutcome):
            return self._chosen(running, error)
        claim, task = running.claim, running.task
        retry_in: float | None = None
        end: str | None = None
        if isinstance(error, (ArgsRejected, StepMismatch)):
            # Its args cannot be given to its handler, or its stored steps are not what
            # its code reaches: a retry would meet the same.
            end = "failed"
        elif task is not None and claim.attempts < claim.max_attempts:
            try:
                retry_in = task.retry_in(claim.attempts, error)
                if retry_in is None:
                    end = "failed"  # not one of retry_on, or the policy said stop
            except Exception as policy_error:
                # Retried after the default backoff (job_fail_many's): a broken policy
                # must not end jobs that would have been retried.
                error = HandlerExit(
                    f"the retry policy of task {task.name!r} raised "
                    f"{type(policy_error).__name__}: {policy_error} (after the handler "
                    f"raised {type(error).__name__})"
                )
                retry_in = None
        try:
            error_json(error)
        except Exception as unreadable:
            error = HandlerExit(
                f"task {claim.task!r} raised {type(error).__name__}, whose message cannot "
                f"be read ({type(unreadable).__name__})"
            )
        return Outcome(claim, ok=False, error=error, retry_in=retry_in, timed_out=timed_out,
                       end=end)
