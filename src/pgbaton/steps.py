"""Durable steps, sleeps and waits of one run of a job (docs/howto/durable-steps.md).

A handler's steps are numbered in the order it reaches them. Each run loads the job's
stored steps once, at its first step, sleep or wait (a job that uses none reads
nothing), and at each place either returns what is stored there or does the work and
stores it. A stored step of another name or kind at the same place means the code
changed between runs: StepMismatch, never a silent replay of the wrong value.

A sleep or a wait that must last ends the run by raising Suspend; the worker writes it
(worker/suspend.py) and the job comes back at its wake time, its attempt not counted.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._checks import check_name
from ._encoding import to_json
from .errors import InvalidArgument, StepMismatch, StepNotStored
from .limits import LATEST_WAKE, MAX_STEP_RESULT_BYTES
from .models import Claim, Step

if TYPE_CHECKING:
    from .queue_async import AsyncQueue

SLEEP = "sleep"  # the name of every sleep: its place in the run tells them apart
TIMED_OUT = {"timed_out": True}  # a wait's stored result when its deadline passed


class Suspend(BaseException):
    """Raised by ctx.sleep() and ctx.wait_for() to end the run until the job's wake
    time. A BaseException, so a handler's `except Exception` lets it through."""

    def __init__(
        self, seq: int, name: str, kind: str, *, until: dt.datetime | None = None,
        seconds: float = 0.0, deadline: bool = True, event: str | None = None,
    ) -> None:
        super().__init__(f"job suspended at {kind} {name!r} (step {seq})")
        self.seq, self.name, self.kind = seq, name, kind
        self.until, self.seconds = until, seconds  # until: absolute; else seconds from now
        self.deadline = deadline  # the wake time is a deadline (a wait without: none)
        self.event = event


def check_sleep(
    seconds: float | None, until: dt.datetime | None
) -> tuple[float, dt.datetime | None]:
    """A sleep's length or end: one of them, >= 0, waking by the end of year 9999."""
    if (seconds is None) == (until is None):
        raise InvalidArgument("sleep takes seconds or until=, one of them")
    if until is not None:
        if not isinstance(until, dt.datetime) or until.tzinfo is None:
            raise InvalidArgument(
                f"sleep: until must be a timezone-aware datetime, got {until!r}")
        if until > LATEST_WAKE:
            raise InvalidArgument(
                f"sleep: until must lie before the end of year 9999, got {until.isoformat()}")
        return 0.0, until
    if (isinstance(seconds, bool) or not isinstance(seconds, int | float)
            or not math.isfinite(seconds) or seconds < 0):
        raise InvalidArgument(f"sleep: seconds must be a >= 0 number, got {seconds!r}")
    latest = (LATEST_WAKE - dt.datetime.now(dt.UTC)).total_seconds()
    if seconds > latest:
        raise InvalidArgument(
            f"sleep: {seconds!r} seconds from now is past the year 9999")
    return float(seconds), None


def check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if (isinstance(timeout, bool) or not isinstance(timeout, int | float)
            or not math.isfinite(timeout) or timeout < 0):
        raise InvalidArgument(f"wait_for: timeout must be a >= 0 number or None, got {timeout!r}")
    if timeout > (LATEST_WAKE - dt.datetime.now(dt.UTC)).total_seconds():
        raise InvalidArgument(f"wait_for: a timeout of {timeout!r} seconds ends past the year 9999")
    return float(timeout)


class StepLog:
    """The steps of one run of one job: what is stored, and where the run has reached."""

    def __init__(
        self, queue: AsyncQueue | None, claim: Claim,
        emit: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self._queue = queue  # None: a test's context, nothing stored (testing.job_context)
        self._claim = claim
        self._emit = emit
        self._stored: dict[int, Step] | None = None
        self._next = 0  # the place of the next step, sleep or wait in this run
        self._names: set[str] = set()
        self.current_key: str | None = None

    @property
    def loaded(self) -> bool:
        return self._stored is not None

    def key(self, name: str) -> str:
        """The idempotency key of one step of this job: the same on every run."""
        return f"{self._claim.idempotency_key}:step:{name}"

    async def _load(self) -> dict[int, Step]:
        if self._stored is None:
            steps = [] if self._queue is None else await self._queue.steps(self._claim.id)
            self._stored = {step.seq: step for step in steps}
        return self._stored

    async def _reach(self, name: str, kind: str) -> tuple[int, Step | None]:
        """Take the next place; what is stored there, checked to be this step."""
        stored = await self._load()
        seq = self._next
        found = stored.get(seq)
        if found is not None and (found.name, found.kind) != (name, kind):
            raise StepMismatch(
                f"job {self._claim.id}: step {seq} of this run is {kind} {name!r}, but an "
                f"earlier run stored {found.kind} {found.name!r} there: the code changed "
                "between runs (a step added, removed or renamed before it); nothing is "
                "replayed (docs/howto/durable-steps.md)"
            )
        self._next += 1
        return seq, found

    # -- steps ------------------------------------------------------------------------

    async def begin(self, name: str) -> tuple[int, bool, Any]:
        """The place of step `name`, whether it is stored, and its stored result."""
        check_name("step name", name)
        if name in self._names:
            raise InvalidArgument(
                f"job {self._claim.id}: step name {name!r} is used twice in one run: "
                "step names must be unique in a run (add a number for a loop's steps)"
            )
        seq, found = await self._reach(name, "step")
        self._names.add(name)
        self.current_key = self.key(name)
        if found is not None:
            return seq, True, found.result
        return seq, False, None

    def undo(self, seq: int, name: str) -> None:
        """The step's function raised: its place and name are free again, so a handler
        that catches the error and calls the step again stores it at the same place."""
        if self._next == seq + 1:
            self._next = seq
        self._names.discard(name)

    async def store(self, seq: int, name: str, value: Any, seconds: float) -> Any:
        """Store a step's result; returns it as a later run will read it (its JSON)."""
        text = to_json(value, f"the result of step {name!r} of job {self._claim.id}",
                       MAX_STEP_RESULT_BYTES)
        if self._queue is not None and not await self._queue.engine.step_store(
            self._claim, seq, name, text, seconds
        ):
            raise StepNotStored(
                f"job {self._claim.id}: the result of step {name!r} was not stored: the "
                "claim is lost (cancelled, or taken by another worker after its lease)"
            )
        if self._emit is not None:
            self._emit("job.step_done", {"step": name, "seq": seq, "seconds": seconds,
                                         "size": len(text.encode())})
        return json.loads(text)

    async def step(self, name: str, func: Callable[..., Any], args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> Any:
        seq, done, result = await self.begin(name)
        if done:
            return result
        started = time.monotonic()
        try:
            value = func(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except BaseException:
            self.undo(seq, name)
            raise
        return await self.store(seq, name, value, time.monotonic() - started)

    # -- sleeps and waits -----------------------------------------------------------------

    def _woken(self, kind: str, name: str) -> None:
        if self._emit is not None:
            self._emit("job.woken", {"kind": kind, "name": name})

    async def sleep(self, seconds: float | None, until: dt.datetime | None) -> None:
        seconds, until = check_sleep(seconds, until)
        seq, found = await self._reach(SLEEP, "sleep")
        if found is None:
            if self._queue is None:
                return  # a test's context: nothing to wake it
            raise Suspend(seq, SLEEP, "sleep", until=until, seconds=seconds)
        if found.finished_at is not None:
            return
        assert self._queue is not None
        if await self._queue.engine.step_pass(self._claim, seq, None):
            self._woken("sleep", SLEEP)
            return
        raise Suspend(seq, SLEEP, "sleep", until=found.until)  # woken early: again

    async def wait_for(self, event: str, timeout: float | None) -> Any:
        check_name("event name", event)
        timeout = check_timeout(timeout)
        seq, found = await self._reach(event, "event")
        if found is not None and found.finished_at is not None:
            return _payload(found.result, event, self._claim.id)
        if self._queue is None:
            raise InvalidArgument("wait_for needs a worker: this context stores nothing")
        taken, result = await self._queue.engine.step_event_take(self._claim, seq, event)
        if taken:
            if found is not None:
                self._woken("event", event)
            return _payload(result, event, self._claim.id)
        if found is None:
            if timeout is None:
                raise Suspend(seq, event, "event", until=LATEST_WAKE, deadline=False,
                              event=event)
            raise Suspend(seq, event, "event", seconds=timeout, event=event)
        if found.until is None:
            raise Suspend(seq, event, "event", until=LATEST_WAKE, deadline=False, event=event)
        if await self._queue.engine.step_pass(self._claim, seq, json.dumps(TIMED_OUT)):
            self._woken("event", event)
            return _payload(TIMED_OUT, event, self._claim.id)
        raise Suspend(seq, event, "event", until=found.until, event=event)

    def check_finished(self) -> None:
        """The handler returned: every stored step must have been reached."""
        if self._stored is None:
            return
        left = sorted(seq for seq in self._stored if seq >= self._next)
        if left:
            names = ", ".join(f"{self._stored[s].kind} {self._stored[s].name!r}" for s in left)
            raise StepMismatch(
                f"job {self._claim.id}: the handler returned without reaching {names}, "
                "which an earlier run stored: the code changed between runs (a step "
                "removed or no longer reached); its result is not written "
                "(docs/howto/durable-steps.md)"
            )


def _payload(result: Any, event: str, job_id: int) -> Any:
    if result == TIMED_OUT:
        raise TimeoutError(f"job {job_id}: no event {event!r} came before the wait's timeout")
    return result["payload"]
