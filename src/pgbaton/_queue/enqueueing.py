# WARNING: generated from enqueueing_async.py by tools/async_to_sync.py: DO NOT EDIT.
# Change enqueueing_async.py and run `make generate`.
"""The enqueue family (generated sync twin): one job (enqueue), once (enqueue_once), many
(enqueue_many: by one INSERT, by COPY, unique jobs, graphs and batches).

Each checks its arguments and builds its parameters before anything is written, takes
the connection (conn=, the connection provider's, or the pool's), and writes inside
the enqueue hook's span (enqueue_hook.py) through the statements of the job_writes
part, which this one is built on.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg

from .. import dependencies
from .._checks import (
    JOB_DEFAULTS,
    encodable,
    encodable_job,
    encode_job_rows,
    job_params,
    many_job_params,
)
from .._copy_rows import CopyRows, copy_rows, plain_copy_rows
from .._encoding import to_json
from ..dependencies import Batch
from ..enqueue_hook import enqueue_span, meta_json
from ..errors import InvalidArgument
from ..events import Event
from ..integrations.connections import CallerConnection, psycopg_connection
from ..models import Enqueued
from ..unique import Unique, check_unique
from .job_writes import JobWrites


class Enqueueing(JobWrites):
    """Adding jobs: enqueue, enqueue_once and enqueue_many."""

    # enqueue_many writes a batch of at least this many jobs by COPY
    # (docs/explanation/architecture.md, "Large batches by COPY"): below it the one
    # INSERT statement is as fast.
    copy_min_jobs: int = 500

    def enqueue(
        self,
        task: str,
        args: Mapping[str, Any] | None = None,
        *,
        queue: str = "default",
        priority: int = 0,
        run_at: dt.datetime | None = None,
        delay: float | None = None,
        key: str | None = None,
        idempotency_key: str | None = None,
        max_attempts: int = 5,
        conn: CallerConnection | None = None,
        after: Iterable[int] | None = None,
        after_failure: str = "cancel",
        limit_key: str | None = None,
        unique: Unique | None = None,
    ) -> int:
        """Add one job; returns its id. With conn=, it is written in the caller's
        transaction. An idempotency key that a job of the same task already has returns
        that job's id (enqueue_once() also says whether the job is new). With after=,
        the job waits until those jobs are done; if one fails or is cancelled, it is
        cancelled too, or runs anyway with after_failure="run"
        (docs/explanation/dependencies.md).
        limit_key: the group whose per-key limits the job obeys
        (docs/explanation/flow_control.md).
        unique: a job of the same unique key that blocks this one is kept (its id comes
        back), replaced or pushed back instead (docs/howto/unique.md)."""
        dependencies.check_after_failure("", after_failure)
        with encodable_job(task=task, args=args, queue=queue, key=key,
                           idempotency_key=idempotency_key, limit_key=limit_key):
            if unique is not None:
                return (self._enqueue_unique(
                    task, args, unique, queue=queue, priority=priority, run_at=run_at,
                    delay=delay, key=key, idempotency_key=idempotency_key,
                    max_attempts=max_attempts, conn=conn, after=after, limit_key=limit_key,
                )).id
            if dependencies.check_after("", after, labels=False):
                if idempotency_key is not None:
                    raise InvalidArgument(
                        "idempotency_key cannot be combined with after= (an existing job "
                        "cannot be made to wait); nothing was written"
                    )
                job = {
                    "task": task, "args": args, "queue": queue, "priority": priority,
                    "run_at": run_at, "delay": delay, "key": key,
                    "idempotency_key": idempotency_key, "max_attempts": max_attempts,
                    "after": after, "after_failure": after_failure, "limit_key": limit_key,
                }
                return (self._enqueue_graph([job], None, conn))[0]
            params = job_params(
                task, args, queue=queue, priority=priority, run_at=run_at, delay=delay,
                key=key, idempotency_key=idempotency_key, max_attempts=max_attempts,
                limit_key=limit_key,
            )
            conn = self._provided(conn)
            with enqueue_span(self.events.enqueue_hook, queue, 1) as span:
                params["meta"] = meta_json(span)
                job_id = self._insert_one(params, conn)
                span.sent([job_id])
                return job_id

    def _enqueue_unique(
        self,
        task: str,
        args: Mapping[str, Any] | None,
        unique: Unique,
        *,
        queue: str,
        priority: int,
        run_at: dt.datetime | None,
        delay: float | None,
        key: str | None,
        idempotency_key: str | None,
        max_attempts: int,
        conn: CallerConnection | None,
        after: Iterable[int] | None,
        limit_key: str | None,
    ) -> Enqueued:
        check_unique(unique, after=after, idempotency_key=idempotency_key, run_at=run_at,
                     delay=delay)
        params = job_params(
            task, args, queue=queue, priority=priority, run_at=run_at, delay=delay,
            key=key, max_attempts=max_attempts, limit_key=limit_key,
        )
        params |= unique.params(task, args or {}, queue)
        conn = self._provided(conn)
        with enqueue_span(self.events.enqueue_hook, queue, 1) as span:
            params["meta"] = meta_json(span)
            enqueued = self._insert_unique(params, conn)
            span.sent([enqueued.id])
            return enqueued

    def _provided(
        self, conn: CallerConnection | None
    ) -> CallerConnection | None:
        """conn, else what the connection provider gives (None: the pool)."""
        if conn is not None or self.connection_provider is None:
            return conn
        provided = self.connection_provider()
        if provided is None:
            return None
        try:
            return psycopg_connection(provided, psycopg.Connection)
        except InvalidArgument as error:
            raise InvalidArgument(
                f"the queue's connection_provider gave what conn= cannot be: {error}"
            ) from None

    def enqueue_once(
        self,
        task: str,
        args: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        queue: str = "default",
        priority: int = 0,
        run_at: dt.datetime | None = None,
        delay: float | None = None,
        key: str | None = None,
        max_attempts: int = 5,
        conn: CallerConnection | None = None,
        limit_key: str | None = None,
        unique: Unique | None = None,
    ) -> Enqueued:
        """Add one job unless a job of the same task already has this idempotency key.
        Returns the job's id and whether this call created it; a job that existed is
        returned as it is (its args are not compared), and nothing is written. With
        unique= instead of a key: enqueue(unique=), saying what it did (Enqueued's
        outcome: created, kept, replaced or debounced; docs/howto/unique.md)."""
        with encodable_job(task=task, args=args, queue=queue, key=key,
                           idempotency_key=idempotency_key, limit_key=limit_key):
            if unique is not None:
                return self._enqueue_unique(
                    task, args, unique, queue=queue, priority=priority, run_at=run_at,
                    delay=delay, key=key, idempotency_key=idempotency_key,
                    max_attempts=max_attempts, conn=conn, after=None, limit_key=limit_key,
                )
            if not isinstance(idempotency_key, str):
                raise InvalidArgument(
                    "enqueue_once needs an idempotency_key string or unique=, got "
                    f"idempotency_key={idempotency_key!r}"
                )
            params = job_params(
                task, args, queue=queue, priority=priority, run_at=run_at, delay=delay,
                key=key, idempotency_key=idempotency_key, max_attempts=max_attempts,
                limit_key=limit_key,
            )
            conn = self._provided(conn)
            with enqueue_span(self.events.enqueue_hook, queue, 1) as span:
                params["meta"] = meta_json(span)
                enqueued = self._insert_idempotent(params, conn)
                span.sent([enqueued.id])
                return enqueued

    def enqueue_many(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        conn: CallerConnection | None = None,
        batch: Batch | None = None,
    ) -> list[int]:
        """Add many jobs in one statement (a batch of copy_min_jobs or more without
        idempotency keys: by COPY); ids come back in input order. A job whose
        task already has a job with its idempotency key gets that job's id instead. All
        or nothing: a key taken by another task's job raises and writes none of them.
        A job may carry `after` (job ids, or labels of jobs of this call), `label` and
        `after_failure`; with batch=, the jobs form a batch whose callbacks are enqueued
        once, when the last of them ends (docs/explanation/dependencies.md)."""
        dependencies.check_batch(batch)
        jobs = jobs if isinstance(jobs, Sequence) else list(jobs)
        # psycopg encodes the batch's text (the INSERT's parameter, the COPY's rows) in
        # the connection's client encoding, which may lack a character.
        with encodable(jobs):
            return self._enqueue_many(jobs, conn, batch)

    def _enqueue_many(
        self,
        jobs: Sequence[Mapping[str, Any]],
        conn: CallerConnection | None,
        batch: Batch | None,
    ) -> list[int]:
        """enqueue_many's checks and writes, by whichever path the batch takes."""
        if batch is None and len(jobs) >= self.copy_min_jobs:
            # The usual large batch, tasks and their args alone, checked a batch at a
            # time; any other, or one with a job at fault, is checked job by job below.
            plain = plain_copy_rows(jobs)
            if plain is not None:
                return self._enqueue_copy(plain, JOB_DEFAULTS["queue"], conn)
        if batch is not None or dependencies.needs_plan(jobs):
            ids = self._enqueue_graph(jobs, batch, conn)
            self._batch_enqueued(ids)
            return ids
        params = many_job_params(jobs, encode=False)
        if not params["count"]:
            return []
        if params["uniques"]:
            return self._enqueue_many_unique(params, conn)
        if params["count"] >= self.copy_min_jobs and not params["idempotency_keys"]:
            return self._enqueue_copy(copy_rows(params["rows"]), params["queue"], conn)
        params = encode_job_rows(params)
        conn = self._provided(conn)
        with enqueue_span(self.events.enqueue_hook, params["queue"], params["count"]) as span:
            ids = self._insert_many(params, meta_json(span), conn)
            span.sent(ids)
        self._batch_enqueued(ids)
        return ids

    def _enqueue_copy(
        self, rows: CopyRows, queue: str | None, conn: CallerConnection | None
    ) -> list[int]:
        """A checked batch by COPY, inside the enqueue hook's span (`queue`: the batch's
        one queue, None when it has several)."""
        conn = self._provided(conn)
        with enqueue_span(self.events.enqueue_hook, queue, len(rows)) as span:
            ids = self._copy_many(rows, meta_json(span), conn)
            span.sent(ids)
        self._batch_enqueued(ids)
        return ids

    def _batch_enqueued(self, ids: Sequence[int]) -> None:
        """One job.enqueued event for a batch written (none for an empty one)."""
        if ids and self.events.active:
            self.events.emit(Event("job.enqueued", job_id=ids[0], count=len(ids)))

    def _enqueue_many_unique(
        self, params: Mapping[str, Any], conn: CallerConnection | None
    ) -> list[int]:
        """A batch with unique jobs, all or nothing in one transaction (a savepoint in
        the caller's): the other jobs in one job_insert_many, never by COPY, which cannot
        skip a conflict; then each unique job in input order, so that a key repeated in
        the batch meets its first job as a later call would. Ids in input order."""
        rows: list[dict[str, Any]] = params["rows"]
        uniques: dict[int, Unique] = params["uniques"]
        unique_params: dict[int, dict[str, Any]] = {}
        for position, unique in uniques.items():
            job = {**JOB_DEFAULTS, **rows[position]}
            try:
                check_unique(unique, idempotency_key=job["idempotency_key"],
                             run_at=job["run_at"], delay=job["delay"] or None)
                job["args"] = to_json(job["args"], f"args for task {job['task']!r}")
                unique_params[position] = job | unique.params(
                    job["task"], rows[position].get("args") or {}, job["queue"])
            except InvalidArgument as error:
                raise type(error)(f"job {position}: {error}") from None
        plain = [position for position in range(len(rows)) if position not in uniques]
        plain_params = encode_job_rows({**params, "rows": [rows[p] for p in plain],
                                        "count": len(plain)}) if plain else None
        ids: list[int] = [0] * len(rows)
        conn = self._provided(conn)
        with enqueue_span(self.events.enqueue_hook, params["queue"], params["count"]) as span:
            meta = meta_json(span)
            with self._transaction(conn) as held:
                if plain_params is not None:
                    written = self._insert_many(plain_params, meta, held)
                    for position, job_id in zip(plain, written, strict=True):
                        ids[position] = job_id
                for job in unique_params.values():
                    job["meta"] = meta
                for position, enqueued in zip(
                    unique_params, self._insert_unique_many(
                        list(unique_params.values()), held), strict=True):
                    ids[position] = enqueued.id
            span.sent(ids)
        return ids

    def _enqueue_graph(
        self,
        jobs: Iterable[Mapping[str, Any]],
        batch: Batch | None,
        conn: CallerConnection | None,
    ) -> list[int]:
        """Jobs with parents or in a batch, in one transaction (inside the enqueue hook,
        as every enqueue): see _write_graph."""
        jobs = jobs if isinstance(jobs, Sequence) else list(jobs)
        plan = dependencies.plan(jobs)
        params = many_job_params(plan.jobs)
        if params["uniques"]:
            at = next((p for p in params["uniques"] if batch is not None
                       or jobs[p].get("after") is not None), min(params["uniques"]))
            raise InvalidArgument(
                f"job {at}: unique= cannot be combined with after= or batch= (a job "
                "waiting for its parents is not found, replaced or pushed back with its "
                "edges); nothing was written"
            )
        batch_params = None if batch is None else batch.params(params["count"])
        if not params["count"]:
            return []
        conn = self._provided(conn)
        with enqueue_span(self.events.enqueue_hook, params["queue"], params["count"]) as span:
            ids = self._write_graph(plan, params, batch_params, meta_json(span), conn)
            span.sent(ids)
            return ids
