"""Waiting for a job's end (App.wait, wait_async): woken by the NOTIFY an awaited job's
end sends, through one LISTEN connection per process and database that every waiter
shares; a poll of all the waited jobs each POLL_SECONDS is only the fallback, for a
notification missed while that connection was down. docs/howto/waiting.md."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from . import _database as database
from ._checks import check_job_id, check_seconds
from .dsn import with_application_name
from .errors import JobCancelled, JobFailed, JobNotFound
from .models import Job
from .queue import Queue
from .queue_async import AsyncQueue

logger = logging.getLogger("pgbaton.wait")

# The fallback: how often the listener asks which waited jobs have ended, in case their
# NOTIFY was missed (a reconnect, a LISTEN through a transaction pool, which never hears).
POLL_SECONDS = 1.0
# The listener lets go of its connection once nobody has waited for this long.
IDLE_SECONDS = 30.0
RECONNECT_SECONDS = 1.0
UNFINISHED = ("pending", "running", "waiting")

Wake = Callable[[], None]


def outcome(job: Job) -> Any:
    """A finished job's result, or the exception its end means."""
    if job.status == "failed":
        raise JobFailed(job.id, job.task, job.errors, job.attempts)
    if job.status == "cancelled":
        raise JobCancelled(job.id, job.task, job.errors, job.attempts)
    return job.result


class Listener:
    """The one LISTEN connection of this process to one database and schema, on a
    thread of its own, waking the waiters of each job that ends."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.queue = Queue(with_application_name(dsn, "pgbaton wait"), schema=schema)
        self.listening = threading.Event()
        self._lock = threading.Lock()
        self._waiters: dict[int, set[Wake]] = {}
        self._thread: threading.Thread | None = None
        self._idle_since = time.monotonic()

    def add(self, job_id: int, wake: Wake) -> None:
        with self._lock:
            self._waiters.setdefault(job_id, set()).add(wake)
            if self._thread is None:
                self.listening.clear()
                self._thread = threading.Thread(
                    target=self._run, name="pgbaton-wait-listener", daemon=True)
                self._thread.start()

    def remove(self, job_id: int, wake: Wake) -> None:
        with self._lock:
            waiting = self._waiters.get(job_id)
            if waiting is not None:
                waiting.discard(wake)
                if not waiting:
                    del self._waiters[job_id]
            if not self._waiters:
                self._idle_since = time.monotonic()

    def _wake(self, job_ids: list[int]) -> None:
        with self._lock:
            wakes = [wake for job_id in job_ids for wake in self._waiters.get(job_id, ())]
        for wake in wakes:
            wake()

    def _done(self) -> bool:
        """Whether to let go: nobody waits and nobody has for IDLE_SECONDS."""
        with self._lock:
            if self._waiters or time.monotonic() - self._idle_since < IDLE_SECONDS:
                return False
            self._thread = None
            self.listening.clear()
            return True

    def _run(self) -> None:
        while True:
            try:
                with database.connect(self.queue.dsn, autocommit=True) as conn:
                    self.queue.listen_ended(conn)
                    self.listening.set()
                    while True:
                        # What ended before the LISTEN, or while the connection was down.
                        with self._lock:
                            waited = list(self._waiters)
                        if waited:
                            self._wake(self.queue.ended_among(waited, conn))
                        if self._done():
                            return
                        for notification in conn.notifies(timeout=POLL_SECONDS):
                            self._wake([int(notification.payload)])
            except Exception as error:  # the waiters time out if it never comes back
                self.listening.clear()
                logger.warning("the wait listener lost its connection (%s); reconnecting",
                               error)
                if self._done():
                    return
            time.sleep(RECONNECT_SECONDS)


_listeners: dict[tuple[int, str, str], Listener] = {}
_listeners_lock = threading.Lock()


def listener_for(dsn: str, schema: str) -> Listener:
    """This process's listener for the database and schema (a forked child makes its
    own: the parent's thread did not come with it)."""
    key = (os.getpid(), dsn, schema)
    with _listeners_lock:
        if key not in _listeners:
            _listeners[key] = Listener(dsn, schema)
        return _listeners[key]


def _deadline(timeout: float | None) -> float:
    if timeout is None:
        return math.inf
    return time.monotonic() + check_seconds("timeout", timeout)


def _timed_out(job_id: int, timeout: float | None) -> TimeoutError:
    return TimeoutError(f"job {job_id} has not ended after {timeout:g} s")


def wait(queue: Queue, job_id: int, timeout: float | None) -> Any:
    """App.wait: the job's result once it is done; JobFailed, JobCancelled, JobNotFound,
    or TimeoutError after `timeout` seconds (None: no limit)."""
    check_job_id(job_id)
    deadline = _deadline(timeout)
    listener = listener_for(queue.dsn, queue.schema)
    woken = threading.Event()
    listener.add(job_id, woken.set)
    try:
        listener.listening.wait(max(0.0, min(deadline - time.monotonic(), 10.0)))
        while True:
            if not queue.mark_awaited(job_id):
                job = queue.get(job_id)
                if job is None:
                    raise JobNotFound(f"there is no job {job_id} (in jobs or the history)")
                if job.status not in UNFINISHED:
                    return outcome(job)
                continue  # retried since: mark it again
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not woken.wait(None if math.isinf(left) else left):
                    raise _timed_out(job_id, timeout)
                woken.clear()
                job = queue.get(job_id)
                if job is None:
                    raise JobNotFound(f"job {job_id} was deleted before it ended")
                if job.status not in UNFINISHED:
                    return outcome(job)
    finally:
        listener.remove(job_id, woken.set)


async def wait_async(queue: AsyncQueue, job_id: int, timeout: float | None) -> Any:
    """wait() for asyncio: the same listener, its wake-ups handed to this loop."""
    check_job_id(job_id)
    deadline = _deadline(timeout)
    listener = listener_for(queue.dsn, queue.schema)
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:
        loop.call_soon_threadsafe(woken.set)

    listener.add(job_id, wake)
    try:
        if not listener.listening.is_set():
            await asyncio.to_thread(
                listener.listening.wait, max(0.0, min(deadline - time.monotonic(), 10.0)))
        while True:
            if not await queue.mark_awaited(job_id):
                job = await queue.get(job_id)
                if job is None:
                    raise JobNotFound(f"there is no job {job_id} (in jobs or the history)")
                if job.status not in UNFINISHED:
                    return outcome(job)
                continue
            while True:
                left = deadline - time.monotonic()
                try:
                    if left <= 0:
                        raise TimeoutError
                    await asyncio.wait_for(woken.wait(), None if math.isinf(left) else left)
                except TimeoutError:
                    raise _timed_out(job_id, timeout) from None
                woken.clear()
                job = await queue.get(job_id)
                if job is None:
                    raise JobNotFound(f"job {job_id} was deleted before it ended")
                if job.status not in UNFINISHED:
                    return outcome(job)
    finally:
        listener.remove(job_id, wake)
