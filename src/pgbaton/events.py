"""Events: what happens to a job and to a worker, handed to subscribers off the event loop.

Every event pgbaton emits is named in EVENTS below, with what it carries. Subscribers
are plain callables, `subscriber(event)`, registered with `App.subscribe` (every event
of the App's workers and queues) or `Queue.events.subscribe` (a queue's data-plane
events). They run on one dispatcher thread per Events, never on the worker's event
loop: a slow subscriber delays other subscribers, never a job. A subscriber that raises
is logged (once per subscriber and exception type) and called again for later events.

Emitting costs one deque append when someone listens, and one attribute test when
nobody does: the hot paths check `events.active` before they build an event. The
dispatcher takes what has gathered every DISPATCH_INTERVAL (50 ms), so subscribers see
events in order, a little after they happened.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .enqueue_hook import EnqueueHook

logger = logging.getLogger("pgbaton.events")

# name -> when it is emitted. The table of docs/reference/events.md is checked against
# this one.
EVENTS: dict[str, str] = {
    "job.enqueued": "a job was written by enqueue() (count > 1 for one enqueue_many call)",
    "job.unique_kept": "a unique enqueue met a job of its key and wrote nothing (job_id: "
                       "that job; detail: its status)",
    "job.unique_replaced": "a unique enqueue gave its args, priority and run_at to the "
                           "pending job of its key (conflict=\"replace\")",
    "job.unique_debounced": "a unique enqueue pushed the pending job of its key back and "
                            "gave it its args (conflict=\"debounce\")",
    "job.claimed": "a worker claimed the job (its attempt number is already counted)",
    "job.started": "its handler started on a worker; queue_time = start - run_at",
    "job.succeeded": "the handler returned and the completion was written",
    "job.failed": "the attempt failed and no attempt is left, or its error is not retried "
                  "(retry_on, a policy's None), or it snoozed past max_snoozes: `failed`",
    "job.retried": "the attempt failed and the job is pending again, for a later attempt",
    "job.timed_out": "the handler ran past its task's timeout (then failed or retried)",
    "job.progress": "the worker wrote the progress its handler reported (ctx.progress; "
                    "detail: fraction, note), at most once a second a job",
    "job.lost": "a fenced write was refused: another worker owns the job now, or it was "
                "cancelled; the handler is told to stop and its outcome is discarded",
    "job.cancelled": "an operator cancelled the job (emitted by the queue that cancelled it), "
                     "or its handler raised pgbaton.Cancel (detail: reason, by)",
    "job.snoozed": "its handler raised pgbaton.Snooze and the job is pending again, its "
                   "attempt not counted (detail: seconds or until, note)",
    "job.discarded": "its handler raised pgbaton.Discard: the job is `failed` at once, "
                     "whatever attempts were left (detail: reason)",
    "job.released": "a stopping worker handed the job back without spending an attempt",
    "job.step_done": "a durable step's result was stored (detail: step, seq, seconds, size)",
    "job.sleeping": "the handler slept or waited (ctx.sleep, ctx.wait_for): the job is "
                    "pending until detail.until, its attempt not counted",
    "job.woken": "a run passed the sleep or wait it was suspended on (detail: kind, name)",
    "job.reaped": "the reaper handed back jobs whose lease expired (count)",
    "job.pruned": "the pruner deleted finished jobs (count)",
    "job.archived": "the pruner moved done jobs to jobs_history (count; history mode)",
    "history.dropped": "the pruner dropped partitions of jobs_history past the retention "
                       "(count; history mode)",
    "jobs.vacuumed": "the leader vacuumed the jobs table (count: the dead row versions "
                     "the statistics counted before)",
    "schedule.added": "a schedule was added at run time (detail: schedule, by)",
    "schedule.updated": "a run-time schedule's definition was changed (detail: "
                        "schedule, by, changes)",
    "schedule.paused": "a schedule was paused: it enqueues nothing (detail: schedule, by)",
    "schedule.resumed": "a paused schedule was resumed, from its next tick (detail: "
                        "schedule, by)",
    "schedule.removed": "a schedule was deleted, by an operator or by the leader once "
                        "missing from code past the grace (detail: schedule, by)",
    "schedule.enqueued": "the leader enqueued the jobs of a schedule's due ticks (job_id: "
                         "the newest; count; detail: schedule, ticks)",
    "schedule.skipped": "the leader's catch-up policy left out ticks missed while no "
                        "worker led (count: at least; detail: schedule, catch_up, "
                        "catch_up_limit, missed_after, missed_before)",
    "schedule.missing": "a starting worker's code lacks a code schedule: it enqueues "
                        "nothing and is deleted after the grace (detail: schedule, by)",
    "leader.elected": "this worker became the maintenance leader",
    "leader.lost": "this worker stopped being the maintenance leader",
    "worker.started": "a worker process opened its connections and started claiming",
    "worker.stopping": "a worker stopped claiming (reason: signal, failure)",
    "worker.stopped": "a worker finished; detail holds its final statistics",
    "worker.part_failed": "a part of the worker (producer, heartbeat, ...) raised and is "
                          "restarted; error_type and error say what",
    "worker.loop_blocked": "the event loop did not run for a while (run_time); task and "
                           "job_id name the handler that blocked it, when known",
    "worker.fenced": "heartbeats could not reach the database past a lease: the handler "
                     "was told to stop before another worker could take the job",
    "connection.lost": "a worker part lost its database connection",
    "connection.restored": "that part reached the database again",
}


# The dispatcher hands events over in batches, at most this long after they happened:
# waking a thread per event would make it and the worker's loop take turns at the GIL.
DISPATCH_INTERVAL = 0.05


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs twice as much
class Event:
    """One thing that happened. Fields that do not apply to an event are None."""

    name: str
    at: float = field(default_factory=time.time)  # seconds since the epoch
    worker_id: str | None = None
    job_id: int | None = None
    task: str | None = None
    queue: str | None = None
    attempt: int | None = None
    queue_time: float | None = None  # seconds from run_at to the handler's start
    run_time: float | None = None  # seconds the handler ran (or the loop was blocked)
    error_type: str | None = None
    error: str | None = None
    # The exception itself, for error trackers (job.failed, job.retried, part_failed).
    exception: BaseException | None = field(default=None, repr=False)
    count: int = 1
    detail: dict[str, Any] | None = None


Subscriber = Callable[[Event], object]


class Events:
    """The subscribers of one App or Queue, and the thread that calls them."""

    def __init__(self) -> None:
        self._subscribers: list[tuple[Subscriber, frozenset[str] | None]] = []
        self._pending: collections.deque[Event] = collections.deque()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._complained: set[tuple[int, type[BaseException]]] = set()
        self.active = False
        # Not an event: a hook around each enqueue, run in the caller's thread and
        # context (pgbaton.tracing's PRODUCER span); None costs the enqueue nothing.
        self.enqueue_hook: EnqueueHook | None = None

    def subscribe(self, subscriber: Subscriber, names: Iterable[str] | None = None) -> Subscriber:
        """Call subscriber(event) for every event, or only for those named. Returns the
        subscriber, so this works as a decorator too."""
        if not callable(subscriber):
            raise TypeError(f"a subscriber must be callable, got {subscriber!r}")
        wanted = None if names is None else frozenset([names] if isinstance(names, str)
                                                      else names)
        unknown = (wanted or frozenset()) - EVENTS.keys()
        if unknown:
            raise ValueError(
                f"unknown event names {sorted(unknown)}; known: {', '.join(EVENTS)}"
            )
        with self._lock:
            self._subscribers.append((subscriber, wanted))
            self.active = True
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        with self._lock:
            self._subscribers = [s for s in self._subscribers if s[0] is not subscriber]
            self.active = bool(self._subscribers)

    def emit(self, event: Event) -> None:
        """Hand an event to the subscribers; returns at once (one deque append)."""
        if not self.active:
            return
        self._pending.append(event)
        if self._thread is None:
            self._start()

    def emit_many(self, events: Iterable[Event]) -> None:
        if not self.active:
            return
        self._pending.extend(events)
        if self._thread is None:
            self._start()

    def flush(self, timeout: float | None = 5.0) -> bool:
        """Wait until every event emitted so far has been handed to the subscribers."""
        if self._thread is None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._wake.set()
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._idle.wait(remaining) and not self._pending:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.001)  # events are waiting for the dispatcher to wake

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._dispatch, name="pgbaton-events", daemon=True
                )
                self._thread.start()

    def _dispatch(self) -> None:
        while True:
            self._wake.wait(DISPATCH_INTERVAL)
            self._wake.clear()
            while self._pending:
                self._idle.clear()
                pending, subscribers = self._pending, self._subscribers
                while pending:
                    event = pending.popleft()
                    for subscriber, wanted in subscribers:
                        if wanted is None or event.name in wanted:
                            try:
                                subscriber(event)
                            except Exception as error:  # never breaks what emits
                                self._complain(subscriber, event, error)
                self._idle.set()

    def _complain(self, subscriber: Subscriber, event: Event, error: Exception) -> None:
        complaint = (id(subscriber), type(error))
        if complaint not in self._complained:
            self._complained.add(complaint)
            logger.error(
                "event subscriber %r raised on %s (logged once per error type; it keeps "
                "receiving events)", subscriber, event.name, exc_info=error,
            )
