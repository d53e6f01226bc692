"""JobContext: what a running handler may know about its job and do about its claim."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import inspect
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._checks import check_progress
from .errors import InvalidArgument
from .models import Claim
from .steps import StepLog

if TYPE_CHECKING:
    from .queue_async import AsyncQueue

_EVENT_LOCK = threading.Lock()


@dataclass(eq=False)
class JobContext:
    """Handed to a handler that asks for it with `@app.task(pass_context=True)`.

    `idempotency_key` is the same on every attempt of the job: pass it to the systems
    the handler calls (a payment provider, a mail service), so that a repeat after a
    crash is recognised there. Delivery is at least once; this is how effects are not.
    """

    claim: Claim
    worker_id: str
    _extend: Callable[[JobContext], Coroutine[Any, Any, bool]] = field(repr=False)
    _loop: asyncio.AbstractEventLoop = field(repr=False)
    # Why should_stop became true: 'cancelled' (an operator cancelled the job), 'lost'
    # (its lease ran out and it was taken, deleted or requeued), 'fenced' (the
    # heartbeat cannot reach the database), 'timeout' or 'shutdown'.
    stop_reason: str | None = None
    _stopped: bool = field(default=False, repr=False)
    # Made only when a sync handler waits on it: most jobs never need one.
    _stop_event: threading.Event | None = field(default=None, repr=False)
    # The latest (fraction, note) the handler reported, a new tuple each call, and the
    # one the worker last wrote: the progress flush writes the former when it is not
    # the latter (no lock: each is one attribute store, from any thread).
    _progress: tuple[float | None, str | None] | None = field(default=None, repr=False)
    _progress_written: tuple[float | None, str | None] | None = field(
        default=None, repr=False)
    # Durable steps (docs/howto/durable-steps.md): the queue they are stored in and the
    # worker's events (set by the executor after construction: keyword arguments would
    # cost every job), and the run's step log, made at the first step.
    _queue: AsyncQueue | None = field(default=None, init=False, repr=False)
    _emit: Callable[[JobContext, str, dict[str, Any]], None] | None = field(
        default=None, init=False, repr=False)
    _step_log: StepLog | None = field(default=None, init=False, repr=False)

    @property
    def job_id(self) -> int:
        return self.claim.id

    @property
    def attempt(self) -> int:
        return self.claim.attempts

    @property
    def token(self) -> uuid.UUID:
        return self.claim.token

    @property
    def lease_until(self) -> dt.datetime:
        return self.claim.lease_until

    @property
    def idempotency_key(self) -> str:
        return self.claim.idempotency_key

    @property
    def should_stop(self) -> bool:
        """True once the claim was lost or cancelled, or the job timed out: a sync
        handler should check it between steps and return; its result is not written."""
        return self._stopped

    def wait_for_stop(self, timeout: float | None = None) -> bool:
        """Block (in a sync handler's thread) until told to stop, or until timeout."""
        with _EVENT_LOCK:
            if self._stop_event is None:
                self._stop_event = threading.Event()
                if self._stopped:
                    self._stop_event.set()
        return self._stop_event.wait(timeout)

    def _signal_stop(self, reason: str) -> None:
        if self._stopped:
            return
        self.stop_reason = reason
        self._stopped = True
        with _EVENT_LOCK:
            if self._stop_event is not None:
                self._stop_event.set()

    def progress(self, fraction: float | None = None, note: str | None = None) -> None:
        """Say how far the job is: a fraction between 0 and 1 (None: not known) and a
        short note. Writes nothing now: the worker writes the latest value at most once
        a second, fenced by this claim (docs/howto/progress-and-logs.md). Callable from
        an async handler and from a sync one's thread. Raises InvalidArgument for a
        fraction outside 0..1 or NaN, or a note longer than MAX_PROGRESS_NOTE_CHARS."""
        self._progress = check_progress(fraction, note)

    def _unwritten_progress(self) -> tuple[float | None, str | None] | None:
        """The progress reported since the last write, marked as written."""
        pending = self._progress
        if pending is None or pending is self._progress_written:
            return None
        self._progress_written = pending
        return pending

    async def heartbeat(self) -> bool:
        """Extend this job's lease now (the worker also does it on its own schedule).
        False: the claim is lost, stop working on the job."""
        return await self._extend(self)

    def heartbeat_sync(self) -> bool:
        """heartbeat() for a sync handler running in the worker's thread pool."""
        return asyncio.run_coroutine_threadsafe(self._extend(self), self._loop).result()

    # -- durable steps, sleep and events (docs/howto/durable-steps.md) ---------------

    @property
    def _steps(self) -> StepLog:
        if self._step_log is None:
            emit = None if self._emit is None else functools.partial(self._emit, self)
            self._step_log = StepLog(self._queue, self.claim, emit)
        return self._step_log

    @property
    def step_key(self) -> str:
        """The idempotency key of the step running now (or last begun): the same on
        every run of the job. Pass it to the system the step calls, so a step killed in
        flight and run again is recognised there."""
        key = self._steps.current_key
        if key is None:
            raise RuntimeError("step_key is known only inside a step (ctx.step)")
        return key

    async def step(self, name: str, func: Callable[..., Any], /, *args: Any,
                   **kwargs: Any) -> Any:
        """Run `func(*args, **kwargs)` (sync or async) once for this job: its result is
        stored, and a later run of the job (after a crash, a retry, a sleep) gets the
        stored result back without calling it. Returns the result as stored (its JSON
        form, the same on every run). `name` must be unique in the run."""
        return await self._steps.step(name, func, args, kwargs)

    def step_sync(self, name: str, func: Callable[..., Any], /, *args: Any,
                  **kwargs: Any) -> Any:
        """step() for a sync handler: `func` runs in the handler's thread."""
        steps = self._steps
        seq, done, result = self._on_loop(steps.begin(name))
        if done:
            return result
        started = time.monotonic()
        try:
            value = func(*args, **kwargs)
            if inspect.isawaitable(value):
                if inspect.iscoroutine(value):
                    value.close()  # never awaited: no warning about it
                raise InvalidArgument(
                    f"step_sync: the function of step {name!r} returned an awaitable: "
                    "await ctx.step() in an async handler instead")
        except BaseException:
            steps.undo(seq, name)
            raise
        return self._on_loop(steps.store(seq, name, value, time.monotonic() - started))

    async def sleep(self, seconds: float | None = None, *,
                    until: dt.datetime | None = None) -> None:
        """Sleep durably: the run ends at once (the worker's slot, connection and lease
        are freed) and the job runs again at its wake time, without spending an attempt,
        replaying its stored steps up to here and going on."""
        await self._steps.sleep(seconds, until)

    def sleep_sync(self, seconds: float | None = None, *,
                   until: dt.datetime | None = None) -> None:
        """sleep() for a sync handler."""
        self._on_loop(self._steps.sleep(seconds, until))

    async def wait_for(self, event: str, *, timeout: float | None = None) -> Any:
        """The payload of event `event` sent to this job (App.send_event), suspending
        the job, as sleep() does, until it comes; an event sent before the job waits is
        kept for it. Raises TimeoutError once `timeout` seconds passed without it."""
        return await self._steps.wait_for(event, timeout)

    def wait_for_sync(self, event: str, *, timeout: float | None = None) -> Any:
        """wait_for() for a sync handler."""
        return self._on_loop(self._steps.wait_for(event, timeout))

    def _on_loop(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _steps_finished(self) -> None:
        """The handler returned: a run that used steps must have reached every stored
        one (StepMismatch). Costs nothing for a job without steps."""
        if self._step_log is not None:
            self._step_log.check_finished()

