"""The worker: claim for free slots, commit, run, write outcomes in batches.

One asyncio loop runs everything: the producer (claims), the handlers (async ones on the
loop, sync ones in a thread pool), the heartbeat that extends every held lease in one
statement, the completer, the LISTEN connection, and, on one worker of the fleet, the
maintenance leader. No transaction is open while a handler runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import json
import logging
import os
import random
import socket
import uuid
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from .._base import Claim
from ..app import App, Task
from ..context import JobContext
from ..errors import ConnectionFailed, JobTimeout, UnknownTask
from ..maintenance import Leader, Periodics, Pruner, Reaper
from ..queue_async import AsyncQueue
from .completer import Completer, Outcome
from .listener import listen

logger = logging.getLogger("pgbaton.worker")

RECONNECT_START_SECONDS = 0.1
RECONNECT_MAX_SECONDS = 5.0
SYNC_STOP_GRACE_SECONDS = 2.0


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel until every task has ended. Once is not always enough on Python 3.11:
    asyncio.wait_for (used by the pool) can swallow a cancellation that arrives just as
    what it waits for completes."""
    pending: set[asyncio.Task[None]] = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.5)


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class WorkerConfig:
    """How a worker runs. Every field has a default fit for production."""

    queues: list[str] | None = None
    concurrency: int = 10
    processes: int = 1
    lease: float = 30.0
    poll_interval: float = 2.0
    shutdown_grace: float = 30.0
    maintenance: bool = True
    reap_interval: float = 1.0
    prune_interval: float = 60.0
    retention: float = 7 * 24 * 3600.0
    periodic_interval: float = 0.2
    elect_interval: float = 2.0
    worker_id: str | None = None
    dsn: str | None = None

    def __post_init__(self) -> None:
        for name in ("lease", "poll_interval", "reap_interval", "prune_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.concurrency < 1 or self.processes < 1:
            raise ValueError("concurrency and processes must be at least 1")


@dataclass(eq=False)
class Running:
    """A claim this worker holds, from the claim until its outcome is written."""

    claim: Claim
    context: JobContext
    lease: float
    handler: asyncio.Task[None] | None = None
    thread: concurrent.futures.Future[Any] | None = None  # a sync handler's run
    lost: bool = False
    released: bool = False


class Worker:
    def __init__(self, app: App, config: WorkerConfig | None = None) -> None:
        self.app = app
        self.config = config or WorkerConfig()
        self.worker_id = self.config.worker_id or default_worker_id()
        self.queue = AsyncQueue(self.config.dsn or app.dsn, schema=app.schema, pool_size=4)
        self.stats: Counter[str] = Counter()
        self._held: dict[uuid.UUID, Running] = {}
        self._executing = 0
        self._wakeup = asyncio.Event()
        self._slot_free = asyncio.Event()
        self._stopping = asyncio.Event()
        self._forced = asyncio.Event()
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.config.concurrency, thread_name_prefix="pgbaton-job"
        )
        self._completer = Completer(self.queue, self._written)
        self.leader: Leader | None = None

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
            self._stopping.set()
        self._wakeup.set()
        self._slot_free.set()

    async def run(self) -> None:
        await self.queue.open()
        logger.info(
            "worker %s started: queues=%s concurrency=%d lease=%.3gs",
            self.worker_id, self.config.queues or "all", self.config.concurrency,
            self.config.lease,
        )
        background = [
            asyncio.create_task(self._completer.run(), name="completer"),
            asyncio.create_task(self._heartbeat_forever(), name="heartbeat"),
            asyncio.create_task(
                listen(self.queue, self.config.queues, self._wake), name="listener"
            ),
        ]
        if self.config.maintenance:
            self.leader = Leader(
                self.queue,
                [
                    Reaper(self.queue, self.config.reap_interval),
                    Pruner(self.queue, self.config.prune_interval, self.config.retention),
                    *(
                        [Periodics(
                            self.queue, self.app.periodics, self.config.periodic_interval,
                            catch_up=2 * self.config.elect_interval + 5,
                        )]
                        if self.app.periodics else []
                    ),
                ],
                elect_interval=self.config.elect_interval,
            )
            background.append(asyncio.create_task(self.leader.run(), name="leader"))
        try:
            await self._produce()
            await self._shut_down()
        finally:
            await _cancel_all(background)
            self._threads.shutdown(wait=False, cancel_futures=True)
            await self.queue.close()
            logger.info("worker %s stopped: %s", self.worker_id, json.dumps(dict(self.stats)))

    # -- claiming -------------------------------------------------------------------

    def _wake(self, reason: str) -> None:
        self.stats[f"wakeups_{reason}"] += 1
        self._wakeup.set()

    async def _produce(self) -> None:
        backoff = RECONNECT_START_SECONDS
        while not self._stopping.is_set():
            # Back-pressure: finished jobs whose outcomes are not yet written still hold
            # their claims. Up to `concurrency` of them may wait for the completer; past
            # that, claiming more would only grow a backlog of running rows.
            free = min(
                self.config.concurrency - self._executing,
                2 * self.config.concurrency - len(self._held),
            )
            if free <= 0:
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            # Cleared before the claim: a NOTIFY that lands during it wakes the next wait.
            self._wakeup.clear()
            try:
                claims = await self.queue.claim(
                    self.worker_id, limit=free, lease=self.config.lease,
                    queues=self.config.queues,
                )
            except ConnectionFailed as error:
                logger.warning("claim failed (%s); retrying in %.1f s", error, backoff)
                await self._sleep_unless_stopping(backoff)
                backoff = min(backoff * 2, RECONNECT_MAX_SECONDS)
                continue
            backoff = RECONNECT_START_SECONDS
            if claims:
                await self._start(claims)
            if len(claims) < free:
                poll = self.config.poll_interval * random.uniform(0.8, 1.0)
                await self._sleep_unless_stopping(poll, wake_on=self._wakeup)

    async def _sleep_unless_stopping(
        self, seconds: float, wake_on: asyncio.Event | None = None
    ) -> None:
        event = wake_on or self._stopping
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)

    async def _start(self, claims: list[Claim]) -> None:
        self.stats["claimed"] += len(claims)
        loop = asyncio.get_running_loop()
        longer: dict[float, list[Running]] = {}
        for claim in claims:
            task = self.app.tasks.get(claim.task)
            lease = task.lease if task is not None and task.lease else self.config.lease
            context = JobContext(claim, self.worker_id, self._extend_one, loop)
            running = Running(claim, context, lease)
            self._held[claim.token] = running
            if lease != self.config.lease:
                longer.setdefault(lease, []).append(running)
            self._executing += 1
            running.handler = asyncio.create_task(self._execute(running, task))
        for group in longer.values():
            await self._extend(group)

    # -- running --------------------------------------------------------------------

    async def _execute(self, running: Running, task: Task | None) -> None:
        claim = running.claim
        outcome: Outcome | None = None
        try:
            if task is None:
                raise UnknownTask(
                    f"no task named {claim.task!r} is registered in this worker's App "
                    f"(it has: {', '.join(sorted(self.app.tasks)) or 'none'})"
                )
            result = await self._invoke(task, running)
            outcome = Outcome(claim, ok=True, result=result)
        except asyncio.CancelledError:
            if not (running.lost or running.released):
                raise
        except Exception as error:
            retry_in = task.retry(claim.attempts) if task is not None else None
            outcome = Outcome(claim, ok=False, error=error, retry_in=retry_in)
        finally:
            self._executing -= 1
            self._slot_free.set()
        if outcome is None or running.lost or running.released:
            self._held.pop(claim.token, None)
            if running.lost:
                self.stats["results_discarded"] += 1
                await self._let_go(running)
            return
        self._completer.add(outcome)

    async def _let_go(self, running: Running) -> None:
        """Once a lost claim's handler has really stopped (a sync one may run on in its
        thread), release the claim: a job an operator cancelled keeps its key until then
        (docs/guarantees.md). If this fails, the key waits for the lease to run out."""
        if running.thread is not None and not running.thread.done():
            with contextlib.suppress(Exception):  # its error is of no use now
                await asyncio.wrap_future(running.thread)
        try:
            await self.queue.release_many([running.claim])
        except ConnectionFailed as error:
            logger.warning("could not let go of lost job %s (%s): its lease will expire",
                           running.claim.id, error)

    async def _invoke(self, task: Task, running: Running) -> Any:
        positional = (running.context,) if task.pass_context else ()
        call: Awaitable[Any]
        if task.is_async:
            call = task.func(*positional, **running.claim.args)
        else:
            running.thread = self._threads.submit(
                contextvars.copy_context().run, task.func, *positional, **running.claim.args
            )
            call = asyncio.wrap_future(running.thread)
        if task.timeout is None:
            return await call
        deadline = asyncio.timeout(task.timeout)
        try:
            async with deadline:
                return await call
        except TimeoutError as error:
            if not deadline.expired():
                raise
            running.context._signal_stop("timeout")
            raise JobTimeout(
                f"task {task.name!r} ran past its timeout of {task.timeout:g} s"
            ) from error

    def _written(self, outcome: Outcome, accepted: bool) -> None:
        self._held.pop(outcome.claim.token, None)
        # A finished job can make others claimable (the next job of its key), and a
        # short claim may have left work behind: claim again rather than wait for a poll.
        self._wakeup.set()
        self._slot_free.set()
        if accepted:
            self.stats["completed" if outcome.ok else "failed"] += 1
            return
        self.stats["outcomes_refused"] += 1
        logger.warning(
            "job %s: %s refused: this worker lost the claim (its lease expired and "
            "another worker took the job, or it was cancelled); nothing was changed",
            outcome.claim.id, "completion" if outcome.ok else "failure",
        )

    # -- leases ---------------------------------------------------------------------

    async def _heartbeat_forever(self) -> None:
        while not self._forced.is_set():
            leases = [r.lease for r in self._held.values()] or [self.config.lease]
            # A third of the shortest lease: two heartbeats may fail before it runs out.
            await asyncio.sleep(min(leases) / 3)
            await self._extend(list(self._held.values()))

    async def _extend_one(self, context: JobContext) -> bool:
        running = self._held.get(context.token)
        if running is None or running.lost:
            return False
        await self._extend([running])
        return not running.lost

    async def _extend(self, runnings: list[Running]) -> None:
        by_lease: dict[float, list[Running]] = {}
        for running in runnings:
            if not running.lost:
                by_lease.setdefault(running.lease, []).append(running)
        for lease, group in by_lease.items():
            try:
                held = await self.queue.heartbeat([r.claim for r in group], lease=lease)
            except ConnectionFailed as error:
                logger.warning("heartbeat failed (%s); will retry", error)
                continue
            self.stats["heartbeats"] += 1
            for running, still_held in zip(group, held, strict=True):
                # A finished handler's outcome may have been written while this heartbeat
                # was in flight; the completer's own fenced write tells the truth for it.
                if not still_held and running.handler is not None and not running.handler.done():
                    self._lose(running)

    def _lose(self, running: Running) -> None:
        if running.lost:
            return
        running.lost = True
        self.stats["claims_lost"] += 1
        logger.warning(
            "lost the claim on job %s (lease expired and re-claimed, or cancelled): "
            "stopping its handler; its result will not be written", running.claim.id,
        )
        running.context._signal_stop("lost")
        if running.handler is not None and not running.handler.done():
            running.handler.cancel()

    # -- shutdown -------------------------------------------------------------------

    async def _shut_down(self) -> None:
        handlers = [r.handler for r in self._held.values() if r.handler and not r.handler.done()]
        if handlers:
            forced = asyncio.create_task(self._forced.wait())
            await self._wait_handlers(handlers, forced)
            forced.cancel()
        unfinished = [
            r for r in self._held.values() if r.handler is not None and not r.handler.done()
        ]
        for running in unfinished:
            running.released = True
            running.context._signal_stop("shutdown")
            assert running.handler is not None
            running.handler.cancel()
        await asyncio.gather(*(r.handler for r in unfinished if r.handler), return_exceptions=True)
        # A sync handler cannot be cancelled, only asked to stop: give it a moment to see
        # should_stop and return before its job is handed back.
        threads = [asyncio.wrap_future(r.thread) for r in unfinished if r.thread is not None]
        if threads:
            await asyncio.wait(threads, timeout=SYNC_STOP_GRACE_SECONDS)
        await self._completer.drained()
        if unfinished:
            try:
                released = await self.queue.release_many([r.claim for r in unfinished])
                self.stats["released"] += sum(released)
            except ConnectionFailed as error:
                logger.warning("could not release %d jobs (%s): their leases will expire",
                               len(unfinished), error)

    async def _wait_handlers(
        self, handlers: list[asyncio.Task[None]], forced: asyncio.Task[bool]
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.shutdown_grace
        waiting: set[asyncio.Future[Any]] = {*handlers}
        while waiting and not forced.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            done, _ = await asyncio.wait(
                [*waiting, forced], timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            waiting -= done
