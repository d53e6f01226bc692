"""The build-your-own-worker protocol (async source), docs/howto/queue-api.md: the
queue's names for what a worker sends, each a delegate to the engine (engine_async.py,
`queue.engine`, on the queue's own pool).

Claims, heartbeats, starts, the fenced ends (complete, fail, release, snooze and their
*_many forms), progress and logs, the worker's presence and LISTEN; and durable steps
(docs/howto/durable-steps.md): a handler's steps, sleeps and waits, and the events sent
to the jobs that wait for them.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg

from .._checks import check_job_id, check_key
from .._engine_base import Row
from .._queue_base import event_params
from ..claim_marks import ClaimMarks
from ..errors import InvalidArgument, JobNotFound
from ..flow import ClaimBatch
from ..integrations.connections import AsyncCallerConnection
from ..models import Claim, Step
from ..outcomes import Snooze
from .core_async import AsyncQueueCore


class AsyncWorkerProtocol(AsyncQueueCore):
    """What a worker calls on its queue: delegates to `queue.engine`."""

    @property
    def limited_queues(self) -> frozenset[str]:
        """The queues with a concurrency limit, as the engine last read them."""
        return self.engine.limited_queues

    @property
    def rated_queues(self) -> frozenset[str]:
        """The queues with a rate limit, as the engine last read them."""
        return self.engine.rated_queues

    @property
    def _claim_marks(self) -> ClaimMarks:
        # The engine's; settable here as the tests of the claim's marks do.
        return self.engine._claim_marks

    @_claim_marks.setter
    def _claim_marks(self, marks: ClaimMarks) -> None:
        self.engine._claim_marks = marks

    async def claim(
        self,
        worker_id: str,
        *,
        limit: int = 1,
        lease: float = 30.0,
        queues: Iterable[str] | None = None,
        tasks: Iterable[str] | None = None,
    ) -> list[Claim]:
        """Claim up to `limit` claimable jobs in one statement, committed at once. With
        `tasks`, only jobs of those tasks (the ones this worker can run) are claimed;
        jobs of other tasks stay pending, their attempts untouched. Paused queues give
        none, limited queues no more than their limits allow
        (docs/explanation/flow_control.md)."""
        return (await self.engine.claim_batch(
            worker_id, limit=limit, lease=lease, queues=queues, tasks=tasks
        )).claims

    async def claim_batch(
        self,
        worker_id: str,
        *,
        limit: int = 1,
        lease: float = 30.0,
        queues: Iterable[str] | None = None,
        tasks: Iterable[str] | None = None,
        finished: Iterable[uuid.UUID] | None = None,
        starting: int | None = None,
    ) -> ClaimBatch:
        """As claim(), and when a rate-limited queue is full, in how many seconds its
        next start is due; `finished` and `starting` as engine.claim_batch."""
        return await self.engine.claim_batch(
            worker_id, limit=limit, lease=lease, queues=queues, tasks=tasks,
            finished=finished, starting=starting)

    async def serves_a_rate(self, queues: Iterable[str] | None) -> bool:
        """Whether a claim of these queues may take jobs of a rate-limited queue
        (engine.serves_a_rate)."""
        return await self.engine.serves_a_rate(queues)

    async def notify_freed(
        self, claims: Sequence[Claim], *, taken: Sequence[Claim] = ()
    ) -> None:
        """Tell the fleet that these claims' jobs of limited queues have finished
        (engine.notify_freed)."""
        await self.engine.notify_freed(claims, taken=taken)

    async def heartbeat(
        self, claim_or_claims: Claim | Iterable[Claim], *, lease: float = 30.0
    ) -> list[bool]:
        """Extend the leases of claims still held, in one statement. Returns, for each
        claim in order, whether it is still held; held claims get their new lease_until."""
        return await self.engine.heartbeat(claim_or_claims, lease=lease)

    async def claims_lost(self, claims: Iterable[Claim]) -> list[tuple[str | None, str | None]]:
        """For claims no longer held, in order: the job's status now and the worker that
        holds it, if another one does (engine.claims_lost)."""
        return await self.engine.claims_lost(claims)

    async def start_many(self, claims: Iterable[Claim]) -> list[bool]:
        """Record the start of jobs claimed ahead; for each, whether it is still held
        (engine.start_many). Their leases are left to the heartbeat."""
        return await self.engine.start_many(claims)

    async def write_progress(
        self, reports: Iterable[tuple[Claim, float | None, str | None]]
    ) -> list[bool]:
        """Write the progress of running jobs, fenced by their claims
        (engine.write_progress)."""
        return await self.engine.write_progress(reports)

    async def write_logs(
        self,
        runs: Iterable[tuple[Claim, list[dict[str, Any]], int]],
        *,
        ended: Sequence[str | None] | None = None,
    ) -> list[bool]:
        """Keep what runs logged, fenced by their claims (engine.write_logs)."""
        return await self.engine.write_logs(runs, ended=ended)

    async def complete(self, claim: Claim, result: Any = None) -> bool:
        """Mark the job done. False: this claim was lost and nothing was changed."""
        return (await self.engine.complete_many([(claim, result)]))[0]

    async def complete_many(self, outcomes: Iterable[tuple[Claim, Any]]) -> list[bool]:
        """Complete many jobs in one statement, each row fenced by its own token."""
        return await self.engine.complete_many(outcomes)

    async def fail(
        self, claim: Claim, error: BaseException | str, *, retry_in: float | None = None
    ) -> bool:
        """Record a failed attempt: retry later, or `failed` after the last attempt.
        False: this claim was lost and nothing was changed."""
        return (await self.engine.fail_many([(claim, error, retry_in)]))[0]

    async def fail_many(
        self, failures: Iterable[tuple[Claim, BaseException | str, float | None]]
    ) -> list[bool]:
        """Fail many jobs in one statement, each row fenced by its own token."""
        return await self.engine.fail_many(failures)

    async def release(self, claim: Claim) -> bool:
        """Hand a job back to pending without spending an attempt (a worker shutting
        down). False: this claim was lost. A job cancelled under this claim is let go
        (its key no longer waits for the lease): release a lost claim once its handler
        has stopped."""
        return (await self.engine.release_many([claim]))[0]

    async def release_many(self, claims: Iterable[Claim]) -> list[bool]:
        """Release many jobs in one statement, each row fenced by its own token."""
        return await self.engine.release_many(claims)

    async def snooze(
        self, claim: Claim, snooze: Snooze, *, max_snoozes: int | None = None
    ) -> str | None:
        """Hand a job back to pending until the Snooze's time without spending an
        attempt, counting a snooze; past max_snoozes (None: no limit) it ends `failed`.
        Returns the job's status after ('pending' or 'failed'), None when this claim was
        lost and nothing was changed."""
        return (await self.engine.snooze_many([(claim, snooze, max_snoozes)]))[0]

    async def snooze_many(
        self, snoozes: Iterable[tuple[Claim, Snooze, int | None]]
    ) -> list[str | None]:
        """snooze() for many jobs in one statement, each row fenced by its own token."""
        return await self.engine.snooze_many(snoozes)

    async def end_many(
        self, ends: Iterable[tuple[Claim, str, BaseException | str]]
    ) -> list[str | None]:
        """End running jobs at once as `failed` or `cancelled`, whatever attempts they
        have left (engine.end_many)."""
        return await self.engine.end_many(ends)

    async def worker_beat(self, presence: Mapping[str, Any]) -> None:
        """Write a worker's row of the workers table (engine.worker_beat)."""
        await self.engine.worker_beat(presence)

    async def worker_leave(self, presence: Mapping[str, Any]) -> None:
        """Delete a stopping worker's own row of the workers table."""
        await self.engine.worker_leave(presence)

    async def listen(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """LISTEN on conn (autocommit, kept open) for this schema's new jobs."""
        await self.engine.listen(conn)

    async def ping(self, conn: AsyncCallerConnection | None = None) -> None:
        """One round trip on conn (or a pooled connection); raises if it fails."""
        await self.engine.ping(conn)

    # -- durable steps and events (docs/howto/durable-steps.md) -----------------------

    async def steps(self, job_id: int) -> list[Step]:
        """The job's durable steps, sleeps and waits, in the order its handler reached
        them (an archived job has none: they leave with it)."""
        rows = await self._fetch("job_steps_get", {"id": check_job_id(job_id)})
        return [Step.from_row(row) for row in rows]

    async def step_store(
        self, claim: Claim, seq: int, name: str, result_json: str, seconds: float
    ) -> bool:
        """Store a step's result, fenced by the claim (engine.step_store)."""
        return await self.engine.step_store(claim, seq, name, result_json, seconds)

    async def step_suspend(
        self, claim: Claim, seq: int, name: str, kind: str, *, until: dt.datetime | None,
        seconds: float, deadline: bool, event: str | None,
    ) -> dt.datetime | None:
        """Suspend a running job until its wake time (engine.step_suspend)."""
        return await self.engine.step_suspend(claim, seq, name, kind, until=until,
                                              seconds=seconds, deadline=deadline,
                                              event=event)

    async def step_event_take(self, claim: Claim, seq: int, event: str) -> tuple[bool, Any]:
        """Take the oldest event sent to the job as its wait's result
        (engine.step_event_take)."""
        return await self.engine.step_event_take(claim, seq, event)

    async def step_pass(self, claim: Claim, seq: int, result_json: str | None) -> bool:
        """Finish a sleep or a wait whose time has come (engine.step_pass)."""
        return await self.engine.step_pass(claim, seq, result_json)

    async def send_event(self, job_id: int, event: str, payload: Any = None) -> bool:
        """Send event `event` to a job: kept for its ctx.wait_for(event), and a job
        suspended on that wait is due now. True: it woke the job. JobNotFound for an
        unknown job; InvalidArgument for a finished one."""
        params = {"id": check_job_id(job_id), **event_params(event, payload)}
        rows = await self._event_call("job_event_send", params)
        return bool(rows[0]["woken"])

    async def send_event_by_key(self, key: str, event: str, payload: Any = None) -> list[int]:
        """send_event() to every unfinished job of `key`; returns their ids.
        JobNotFound when the key has none."""
        if key is None:
            raise InvalidArgument("send_event_by_key: key must be a non-empty string, got None")
        params = {"key": check_key("key", key), **event_params(event, payload)}
        rows = await self._event_call("job_event_send_by_key", params)
        return list(rows[0]["ids"])

    async def _event_call(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        try:
            return await self._fetch(name, params)
        except psycopg.errors.NoDataFound as error:
            raise JobNotFound(error.diag.message_primary or str(error)) from None
        except psycopg.errors.InvalidParameterValue as error:
            raise InvalidArgument(error.diag.message_primary or str(error)) from None
