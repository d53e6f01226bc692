# WARNING: generated from queue_async.py by tools/async_to_sync.py: DO NOT EDIT.
# Change queue_async.py and run `make generate`.
"""The data plane's face: what users call on a queue (generated sync twin).

Enqueue (one job, once, many, by COPY, graphs and batches), reads, operator actions,
flow settings, durable events and schedules, each one statement of sql/*.sql run on
the pool of the database handle (_database_async.py) the queue is. The worker's and the
leader's statements are the engine's (engine_async.py, `queue.engine`, on the same
pool); the build-your-own-worker protocol keeps its names here (claim, heartbeat,
complete, fail, release, snooze, the *_many calls, reap, archive, vacuum, ...), each a
delegate to the engine. What builds parameters or reads rows without I/O lives in
_queue_base.py and _checks.py, once for both twins; queue.py is generated from this.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import psycopg
from psycopg.rows import dict_row

from . import _database as database
from . import dependencies
from ._checks import (
    JOB_DEFAULTS,
    CopyRow,
    check_filter,
    check_int4,
    check_job_id,
    check_key,
    check_limit,
    check_name,
    check_status,
    copy_job_rows,
    copy_values,
    encode_job_rows,
    job_params,
    many_job_params,
)
from ._encoding import to_json
from ._engine_base import Row
from ._queue_base import (
    action_params,
    event_params,
    filter_params,
    matching_params,
    schedule_now,
    unique_enqueued,
    unique_refused,
)
from .actions import action_named
from .claim_marks import ClaimMarks
from .cron import DEFAULT_CATCH_UP_LIMIT, Cron
from .dependencies import Batch, BatchInfo, Dependency
from .encryption import Keyring, ResealCounts, reseal
from .engine import HISTORY_LOCK_WAIT_SECONDS, Engine
from .enqueue_hook import enqueue_span, meta_json
from .errors import (
    ArgsRejected,
    ConnectionFailed,
    IdempotencyKeyTaken,
    InvalidArgument,
    JobNotFound,
    ScheduleChanged,
    UniqueJobUnseen,
)
from .events import Event, Events
from .flow import (
    ClaimBatch,
    QueueSettings,
    Rate,
    check_aging,
    check_concurrency,
    parse_rate,
)
from .integrations.connections import CallerConnection, psycopg_connection
from .job_filter import JobFilter
from .models import Claim, Enqueued, HistoryPartition, Job, JobLog, QueueStats, Step
from .outcomes import Snooze
from .schedules import (
    CODE_SCHEDULE_GRACE,
    Schedule,
    check_changes,
    check_revision,
    check_schedule_name,
    definition,
    describe,
    job_for_tick,
    schedule_event,
    stored,
)
from .unique import Unique, check_unique

# How long a COPY batch whose connection was lost waits for the backend that ran it to
# end, so that whether it was written can be told (_copy_outcome).
COPY_OUTCOME_WAIT_SECONDS = 5.0
# How many times a unique enqueue runs again when the job that blocked it was committed
# after its statement's snapshot (_insert_unique): each run needs a new such job.
UNIQUE_ATTEMPTS = 5
schedule_logger = logging.getLogger("pgbaton.schedules")


class Queue(database.Database):
    """A handle on one pgbaton schema in one database.

    Connections come from a small pool, opened on first use after checking that the
    server is reachable, new enough, and migrated to this version of pgbaton, and
    (prepare=None) whether the DSN goes through a transaction pool, where the pool's
    connections then prepare no statements (docs/howto/pgbouncer.md). `connect_timeout`:
    how long a call waits for a connection of the pool before ConnectionFailed (10 s).

    A Queue knows no tasks: it writes a job of any task name, and of any callback's
    (batch=), which waits until a worker whose App registers that task takes it. An
    App's enqueues (a task's enqueue and defer, App.enqueue_many) refuse a task the App
    does not register, before anything is written.
    """

    # enqueue_many writes a batch of at least this many jobs by COPY (docs/architecture.md,
    # "Large batches by COPY"): below it the one INSERT statement is as fast.
    copy_min_jobs: int = 500

    # How long drop_history waits for a lock on jobs_history before it leaves a
    # partition for its next call (engine.drop_history's lock_wait).
    history_lock_wait: float = HISTORY_LOCK_WAIT_SECONDS

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str = "pgbaton",
        pool_size: int = 4,
        events: Events | None = None,
        connection_provider: Callable[[], CallerConnection | None] | None = None,
        prepare: bool | None = None,
        connect_timeout: float = database.CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__(dsn, schema=schema, pool_size=pool_size, prepare=prepare,
                         connect_timeout=connect_timeout)
        # Asked by enqueue, enqueue_once and enqueue_many when no conn= is given: the
        # connection whose transaction the job joins (a framework's current one), or
        # None for the pool. docs/frameworks.md, "Joining a transaction without conn=".
        self.connection_provider = connection_provider
        # job.enqueued and job.cancelled go to these subscribers (an App's queues share
        # the App's Events); emitted when the statement ran, so with conn= the caller's
        # transaction may still roll the job back.
        self.events = events if events is not None else Events()
        # The worker's and the leader's statements, over this queue's pool: the worker
        # and the maintenance leader call it; the queue's names for them delegate.
        self.engine = Engine(self)

    def __enter__(self) -> Queue:
        return self

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

    # -- producing ------------------------------------------------------------------

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
        cancelled too, or runs anyway with after_failure="run" (docs/dependencies.md).
        limit_key: the group whose per-key limits the job obeys (docs/flow_control.md).
        unique: a job of the same unique key that blocks this one is kept (its id comes
        back), replaced or pushed back instead (docs/howto/unique.md)."""
        dependencies.check_after_failure("", after_failure)
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

    def _insert_unique(
        self, params: Mapping[str, Any], conn: CallerConnection | None
    ) -> Enqueued:
        """job_insert_unique, again while the job that blocked it is one this statement's
        snapshot could not see (committed since): each run sees what committed before it,
        so another only follows a job that ended or was written in the meantime."""
        for _ in range(UNIQUE_ATTEMPTS):
            rows = self._fetch("job_insert_unique", params, conn)
            if rows:
                enqueued = unique_enqueued(rows[0])
                self._unique_enqueued(enqueued, params["task"], params["queue"])
                return enqueued
        raise UniqueJobUnseen(
            f"task {params['task']!r}: a job of the same unique key kept blocking this "
            f"enqueue and could not be read {UNIQUE_ATTEMPTS} times in a row (a "
            "transaction that does not see what committed after it began?); nothing was "
            "written"
        )

    def _unique_enqueued(self, enqueued: Enqueued, task: str, queue: str) -> None:
        if self.events.active:
            name = "job.enqueued" if enqueued.created else f"job.unique_{enqueued.outcome}"
            self.events.emit(Event(name, job_id=enqueued.id, task=task, queue=queue,
                                   detail={"status": enqueued.status}))

    def _insert_one(
        self, params: dict[str, Any], conn: CallerConnection | None
    ) -> int:
        if params["idempotency_key"] is None:
            job_id = int((self._fetch("job_insert", params, conn))[0]["id"])
            self._enqueued(job_id, params["task"], params["queue"])
            return job_id
        return (self._insert_idempotent(params, conn)).id

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

    def _enqueued(self, job_id: int, task: str, queue: str) -> None:
        if self.events.active:
            self.events.emit(Event("job.enqueued", job_id=job_id, task=task, queue=queue))

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

    def _insert_idempotent(
        self, params: Mapping[str, Any], conn: CallerConnection | None
    ) -> Enqueued:
        rows = self._fetch("job_insert_idempotent", params, conn)
        if rows:
            enqueued = Enqueued(id=int(rows[0]["id"]), created=bool(rows[0]["created"]))
            if enqueued.created:
                self._enqueued(enqueued.id, params["task"], params["queue"])
            return enqueued
        # Nothing inserted and nothing found: the job that has the key was committed after
        # this statement's snapshot (a fresh statement sees it), or it belongs to another
        # task and the previous release's global index refused the key.
        task, key = params["task"], params["idempotency_key"]
        found = self._ids_by_task_idempotency_key([task], [key], conn)
        if (task, key) in found:
            return Enqueued(id=found[task, key], created=False)
        raise self._key_taken(task, key, conn)

    def _key_taken(
        self, task: str, key: str, conn: CallerConnection | None
    ) -> IdempotencyKeyTaken:
        rows = self._fetch("job_idempotency_key_holder", {"idempotency_key": key}, conn)
        holder = f"job {rows[0]['id']} of task {rows[0]['task']!r}" if rows else "another job"
        return IdempotencyKeyTaken(
            f"idempotency key {key!r} for task {task!r} is taken by {holder}: keys are per "
            "task, but until the previous release's global index is dropped a key cannot "
            "be reused across tasks; nothing was written"
        )

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
        once, when the last of them ends (docs/dependencies.md)."""
        dependencies.check_batch(batch)
        jobs = jobs if isinstance(jobs, Sequence) else list(jobs)
        if batch is not None or dependencies.needs_plan(jobs):
            ids = self._enqueue_graph(jobs, batch, conn)
            if ids and self.events.active:
                self.events.emit(Event("job.enqueued", job_id=ids[0], count=len(ids)))
            return ids
        params = many_job_params(jobs, encode=False)
        if not params["count"]:
            return []
        if params["uniques"]:
            return self._enqueue_many_unique(params, conn)
        if params["count"] >= self.copy_min_jobs and not params["idempotency_keys"]:
            rows: list[CopyRow] | None = copy_job_rows(params["rows"])
        else:
            rows = None
            params = encode_job_rows(params)
        conn = self._provided(conn)
        with enqueue_span(self.events.enqueue_hook, params["queue"], params["count"]) as span:
            if rows is None:
                ids = self._insert_many(params, meta_json(span), conn)
            else:
                ids = self._copy_many(rows, meta_json(span), conn)
            span.sent(ids)
        if self.events.active:
            self.events.emit(Event("job.enqueued", job_id=ids[0], count=len(ids)))
        return ids

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

    def _insert_unique_many(
        self, jobs: Sequence[Mapping[str, Any]], conn: psycopg.Connection[Any]
    ) -> list[Enqueued]:
        """job_insert_unique for each job in order, in one transaction: the first alone
        (it checks a caller's connection, as every statement does), the rest in one
        pipelined executemany, a round trip for all rather than one each. Each
        statement sees what the ones before it wrote. One that met a job it could not
        see runs again alone (_insert_unique)."""
        done = [self._insert_unique(jobs[0], conn)]
        if len(jobs) == 1:
            return done
        with conn.cursor(row_factory=dict_row) as cursor:
            cursor.executemany(self._sql["job_insert_unique"], jobs[1:], returning=True)
            results = [cursor.fetchall()]
            while cursor.nextset():
                results.append(cursor.fetchall())
        for job, rows in zip(jobs[1:], results, strict=True):
            if not rows:
                done.append(self._insert_unique(job, conn))
                continue
            enqueued = unique_enqueued(rows[0])
            self._unique_enqueued(enqueued, job["task"], job["queue"])
            done.append(enqueued)
        return done

    def _insert_many(
        self, params: Mapping[str, Any], meta: str | None, conn: CallerConnection | None
    ) -> list[int]:
        statement_params = {"jobs": params["jobs"], "meta": meta}
        if not params["idempotency_keys"]:
            (row,) = self._fetch("job_insert_many", statement_params, conn)
            return cast(list[int], row["ids"])
        # The insert and the look-up of taken keys form one transaction (a savepoint in
        # the caller's), so that a key taken by another task undoes the whole batch.
        with self._transaction(conn) as held:
            (row,) = self._fetch("job_insert_many", statement_params, held)
            ids: list[int | None] = row["ids"]
            if None not in ids:
                return cast(list[int], ids)
            wanted = [
                (task, key)
                for job_id, task, key in zip(
                    ids, row["tasks"], row["idempotency_keys"], strict=True
                )
                if job_id is None
            ]
            existing = self._ids_by_task_idempotency_key(
                [task for task, _ in wanted], [key for _, key in wanted], held
            )
            for task, key in wanted:
                if (task, key) not in existing:
                    raise self._key_taken(task, key, held)
            return [
                job_id if job_id is not None else existing[task, key]
                for job_id, task, key in zip(
                    ids, row["tasks"], row["idempotency_keys"], strict=True
                )
            ]

    def _copy_many(
        self, rows: Sequence[CopyRow], meta: str | None, conn: CallerConnection | None
    ) -> list[int]:
        """A large batch by COPY: the ids (and now()) first, then every row in one COPY
        statement, all or nothing. A savepoint in the caller's transaction; on a pooled
        connection a transaction only when some job's run_at is reckoned from now().
        On its own connection, a lost connection's outcome is found out (_copy_outcome)."""
        scheduled = any(row[4] is not None or row[5] for row in rows)
        if conn is not None:
            with self._transaction(conn) as held:
                return self._copy_rows(rows, meta, scheduled, held)
        sent: list[Any] = []
        try:
            if not scheduled:
                # The table's defaults give every job the COPY's own now(), as the
                # INSERT's transaction gives it: two round trips fewer than BEGIN ... COMMIT.
                with self._connection() as pooled:
                    return self._copy_rows(rows, meta, scheduled, pooled, sent)
            with self._transaction(None) as held:
                return self._copy_rows(rows, meta, scheduled, held, sent)
        except ConnectionFailed as error:
            return self._copy_outcome(error, sent)

    def _copy_outcome(self, error: ConnectionFailed, sent: list[Any]) -> list[int]:
        """The connection of a COPY batch was lost: its ids if it was written after all;
        else the error, with `written` False when none of it was (a retry is safe) and
        None when that cannot be found out. The reserved ids tell: they are the batch's
        alone, and one statement writes all or none of them, once the backend that ran
        it has ended (its commit may still be under way until then)."""
        if not sent:
            error.written = False
            error.add_note("nothing of the batch was written: a retry is safe")
            raise error
        ids, pid = sent
        deadline = time.monotonic() + COPY_OUTCOME_WAIT_SECONDS
        while time.monotonic() < deadline:
            try:
                (row,) = self._fetch("job_ids_written", {"ids": ids, "pid": pid})
            except ConnectionFailed:
                break
            if row["written"] == len(ids):
                return cast(list[int], ids)
            if row["written"] == 0:
                error.written = False
                error.add_note(f"none of the {len(ids)} jobs was written: a retry is safe")
                raise error
            time.sleep(0.1)
        error.add_note(f"whether the {len(ids)} jobs (ids {ids[0]} to {ids[-1]}) were "
                       "written is not known: look for them before enqueueing them again")
        raise error

    def _copy_rows(
        self,
        rows: Sequence[CopyRow],
        meta: str | None,
        scheduled: bool,
        conn: psycopg.Connection[Any],
        sent: list[Any] | None = None,
    ) -> list[int]:
        """`sent`: filled with the reserved ids and the connection's backend pid."""
        (reserved,) = self._fetch("job_ids_reserve", {"count": len(rows)}, conn)
        ids: list[int] = reserved["ids"]
        if sent is not None:
            sent[:] = [ids, conn.info.backend_pid]
        statement = self._sql["job_copy_scheduled" if scheduled else "job_copy"]
        with conn.cursor() as cursor, cursor.copy(statement) as copy:
            for values in copy_values(ids, rows, meta, reserved["now"] if scheduled else None):
                copy.write_row(values)
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

    def _write_graph(
        self,
        plan: dependencies.Plan,
        params: Mapping[str, Any],
        batch_params: Mapping[str, Any] | None,
        meta: str | None,
        conn: CallerConnection | None,
    ) -> list[int]:
        """Lock and read the parents, write the batch, the jobs and their edges, then
        apply the end of parents that had already failed or been cancelled."""
        with self._transaction(conn) as held:
            statuses: dict[int, tuple[str, str]] = {}
            if plan.external:
                rows = self._fetch("job_parents_lock", {"ids": plan.external}, held)
                statuses = {row["id"]: (row["task"], row["status"]) for row in rows}
                moved = [job_id for job_id in plan.external if job_id not in statuses]
                if moved:  # done parents moved to jobs_history (docs/retention.md)
                    rows = self._fetch("job_parents_archived", {"ids": moved}, held)
                    statuses |= {row["id"]: (row["task"], row["status"]) for row in rows}
            graph = plan.statement_params(statuses, self.schema)
            batch_id = None
            if batch_params is not None:
                batch_id = (self._fetch("batch_insert", batch_params, held))[0]["id"]
            insert = {"jobs": params["jobs"], "batch_id": batch_id, "meta": meta, **graph}
            (row,) = self._fetch("job_insert_graph", insert, held)
            ids = cast(list[int], row["ids"])
            ended = plan.ended_parents(statuses)
            if ended:
                replay = {"parents": ended, "children": ids, "channel": self.channel}
                self._fetch("job_parents_replay", replay, held)
            return ids

    def _ids_by_task_idempotency_key(
        self,
        tasks: Sequence[str],
        keys: Sequence[str],
        conn: CallerConnection | None,
    ) -> dict[tuple[str, str], int]:
        rows = self._fetch(
            "job_ids_by_task_idempotency_key", {"tasks": list(tasks), "keys": list(keys)}, conn
        )
        return {(row["task"], row["idempotency_key"]): int(row["id"]) for row in rows}

    # -- the worker's protocol: delegates to the engine ------------------------------

    def claim(
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
        none, limited queues no more than their limits allow (docs/flow_control.md)."""
        return (self.engine.claim_batch(
            worker_id, limit=limit, lease=lease, queues=queues, tasks=tasks
        )).claims

    def claim_batch(
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
        return self.engine.claim_batch(
            worker_id, limit=limit, lease=lease, queues=queues, tasks=tasks,
            finished=finished, starting=starting)

    def serves_a_rate(self, queues: Iterable[str] | None) -> bool:
        """Whether a claim of these queues may take jobs of a rate-limited queue
        (engine.serves_a_rate)."""
        return self.engine.serves_a_rate(queues)

    def notify_freed(
        self, claims: Sequence[Claim], *, taken: Sequence[Claim] = ()
    ) -> None:
        """Tell the fleet that these claims' jobs of limited queues have finished
        (engine.notify_freed)."""
        self.engine.notify_freed(claims, taken=taken)

    def heartbeat(
        self, claim_or_claims: Claim | Iterable[Claim], *, lease: float = 30.0
    ) -> list[bool]:
        """Extend the leases of claims still held, in one statement. Returns, for each
        claim in order, whether it is still held; held claims get their new lease_until."""
        return self.engine.heartbeat(claim_or_claims, lease=lease)

    def claims_lost(self, claims: Iterable[Claim]) -> list[tuple[str | None, str | None]]:
        """For claims no longer held, in order: the job's status now and the worker that
        holds it, if another one does (engine.claims_lost)."""
        return self.engine.claims_lost(claims)

    def start_many(self, claims: Iterable[Claim]) -> list[bool]:
        """Record the start of jobs claimed ahead; for each, whether it is still held
        (engine.start_many). Their leases are left to the heartbeat."""
        return self.engine.start_many(claims)

    def write_progress(
        self, reports: Iterable[tuple[Claim, float | None, str | None]]
    ) -> list[bool]:
        """Write the progress of running jobs, fenced by their claims
        (engine.write_progress)."""
        return self.engine.write_progress(reports)

    def write_logs(
        self,
        runs: Iterable[tuple[Claim, list[dict[str, Any]], int]],
        *,
        ended: Sequence[str | None] | None = None,
    ) -> list[bool]:
        """Keep what runs logged, fenced by their claims (engine.write_logs)."""
        return self.engine.write_logs(runs, ended=ended)

    def logs(self, job_id: int) -> list[JobLog]:
        """What the job's handler logged, one JobLog per run that logged (a snooze, a
        durable sleep or a release runs an attempt again), in the order they ran
        (docs/howto/progress-and-logs.md); kept while the job is, in jobs or
        jobs_history."""
        rows = self._fetch("job_logs_get", {"id": check_job_id(job_id)})
        return [JobLog.from_row(row) for row in rows]

    def complete(self, claim: Claim, result: Any = None) -> bool:
        """Mark the job done. False: this claim was lost and nothing was changed."""
        return (self.engine.complete_many([(claim, result)]))[0]

    def complete_many(self, outcomes: Iterable[tuple[Claim, Any]]) -> list[bool]:
        """Complete many jobs in one statement, each row fenced by its own token."""
        return self.engine.complete_many(outcomes)

    def fail(
        self, claim: Claim, error: BaseException | str, *, retry_in: float | None = None
    ) -> bool:
        """Record a failed attempt: retry later, or `failed` after the last attempt.
        False: this claim was lost and nothing was changed."""
        return (self.engine.fail_many([(claim, error, retry_in)]))[0]

    def fail_many(
        self, failures: Iterable[tuple[Claim, BaseException | str, float | None]]
    ) -> list[bool]:
        """Fail many jobs in one statement, each row fenced by its own token."""
        return self.engine.fail_many(failures)

    def release(self, claim: Claim) -> bool:
        """Hand a job back to pending without spending an attempt (a worker shutting
        down). False: this claim was lost. A job cancelled under this claim is let go
        (its key no longer waits for the lease): release a lost claim once its handler
        has stopped."""
        return (self.engine.release_many([claim]))[0]

    def release_many(self, claims: Iterable[Claim]) -> list[bool]:
        """Release many jobs in one statement, each row fenced by its own token."""
        return self.engine.release_many(claims)

    def snooze(
        self, claim: Claim, snooze: Snooze, *, max_snoozes: int | None = None
    ) -> str | None:
        """Hand a job back to pending until the Snooze's time without spending an
        attempt, counting a snooze; past max_snoozes (None: no limit) it ends `failed`.
        Returns the job's status after ('pending' or 'failed'), None when this claim was
        lost and nothing was changed."""
        return (self.engine.snooze_many([(claim, snooze, max_snoozes)]))[0]

    def snooze_many(
        self, snoozes: Iterable[tuple[Claim, Snooze, int | None]]
    ) -> list[str | None]:
        """snooze() for many jobs in one statement, each row fenced by its own token."""
        return self.engine.snooze_many(snoozes)

    def end_many(
        self, ends: Iterable[tuple[Claim, str, BaseException | str]]
    ) -> list[str | None]:
        """End running jobs at once as `failed` or `cancelled`, whatever attempts they
        have left (engine.end_many)."""
        return self.engine.end_many(ends)

    # -- durable steps and events (docs/howto/durable-steps.md) -----------------------

    def steps(self, job_id: int) -> list[Step]:
        """The job's durable steps, sleeps and waits, in the order its handler reached
        them (an archived job has none: they leave with it)."""
        rows = self._fetch("job_steps_get", {"id": check_job_id(job_id)})
        return [Step.from_row(row) for row in rows]

    def step_store(
        self, claim: Claim, seq: int, name: str, result_json: str, seconds: float
    ) -> bool:
        """Store a step's result, fenced by the claim (engine.step_store)."""
        return self.engine.step_store(claim, seq, name, result_json, seconds)

    def step_suspend(
        self, claim: Claim, seq: int, name: str, kind: str, *, until: dt.datetime | None,
        seconds: float, deadline: bool, event: str | None,
    ) -> dt.datetime | None:
        """Suspend a running job until its wake time (engine.step_suspend)."""
        return self.engine.step_suspend(claim, seq, name, kind, until=until,
                                        seconds=seconds, deadline=deadline,
                                        event=event)

    def step_event_take(self, claim: Claim, seq: int, event: str) -> tuple[bool, Any]:
        """Take the oldest event sent to the job as its wait's result
        (engine.step_event_take)."""
        return self.engine.step_event_take(claim, seq, event)

    def step_pass(self, claim: Claim, seq: int, result_json: str | None) -> bool:
        """Finish a sleep or a wait whose time has come (engine.step_pass)."""
        return self.engine.step_pass(claim, seq, result_json)

    def send_event(self, job_id: int, event: str, payload: Any = None) -> bool:
        """Send event `event` to a job: kept for its ctx.wait_for(event), and a job
        suspended on that wait is due now. True: it woke the job. JobNotFound for an
        unknown job; InvalidArgument for a finished one."""
        params = {"id": check_job_id(job_id), **event_params(event, payload)}
        rows = self._event_call("job_event_send", params)
        return bool(rows[0]["woken"])

    def send_event_by_key(self, key: str, event: str, payload: Any = None) -> list[int]:
        """send_event() to every unfinished job of `key`; returns their ids.
        JobNotFound when the key has none."""
        if key is None:
            raise InvalidArgument("send_event_by_key: key must be a non-empty string, got None")
        params = {"key": check_key("key", key), **event_params(event, payload)}
        rows = self._event_call("job_event_send_by_key", params)
        return list(rows[0]["ids"])

    def _event_call(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        try:
            return self._fetch(name, params)
        except psycopg.errors.NoDataFound as error:
            raise JobNotFound(error.diag.message_primary or str(error)) from None
        except psycopg.errors.InvalidParameterValue as error:
            raise InvalidArgument(error.diag.message_primary or str(error)) from None

    # -- maintenance (the leader's, delegates to the engine) and inspection -----------

    def reap(self) -> int:
        """Expired leases go back to pending, or to failed with no attempts left."""
        return self.engine.reap()

    def reseal_args(self, ring: Keyring, *, batch_size: int = 500) -> ResealCounts:
        """Seal again with the first key of `ring` the args of every job still to run
        (pending, scheduled or waiting) that another key sealed, a page of batch_size
        at a time, each page one statement (`pgbaton rotate-keys`). A job claimed or
        changed meanwhile is left alone and counted; one whose key `ring` lacks is
        counted with its id, never changed. docs/howto/encryption.md."""
        check_int4("batch_size", batch_size, minimum=1)
        counts = ResealCounts()
        after = 0
        while True:
            page = self._fetch("job_sealed_page", {
                "after": after, "kid": ring.current, "limit": batch_size})
            if not page:
                return counts
            after = page[-1]["id"]
            ids, old, new = [], [], []
            for row in page:
                try:
                    sealed = reseal(row["task"], row["args"], ring)
                except ArgsRejected:
                    counts.unopenable.append(row["id"])
                    continue
                if sealed is not None:
                    ids.append(row["id"])
                    old.append(json.dumps(row["args"]))
                    new.append(json.dumps(sealed))
            if ids:
                accepted = self._changed_positions(
                    "job_args_reseal_many", {"ids": ids, "old": old, "new": new}, len(ids))
                counts.resealed += sum(accepted)
                counts.changed_meanwhile += len(ids) - sum(accepted)

    def prune(self, *, retention: float, limit: int = 10_000) -> int:
        """Delete done, failed and cancelled jobs that finished more than `retention`
        seconds ago, at most `limit` of them; returns how many went."""
        return self.engine.prune(retention=retention, limit=limit)

    # The history retention mode (docs/retention.md): done jobs move to jobs_history,
    # partitioned by the time they finished, and leave it a partition at a time.

    def archive(self, *, after: float, partition: float, limit: int = 10_000) -> int:
        """Move done jobs that finished more than `after` seconds ago to jobs_history,
        in partitions `partition` seconds wide (docs/retention.md); returns how many
        moved (engine.archive)."""
        return self.engine.archive(after=after, partition=partition, limit=limit)

    def drop_history(self, *, retention: float) -> int:
        """Drop the partitions of jobs_history whose whole range ended more than
        `retention` seconds ago; returns how many went. A partition whose lock is not
        granted within history_lock_wait seconds is left for the next call."""
        return self.engine.drop_history(retention=retention,
                                        lock_wait=self.history_lock_wait)

    def vacuum(self, *, min_dead: int = 0, min_dead_share: float = 0.0) -> int:
        """VACUUM the jobs table once it holds at least `min_dead` dead row versions, and
        `min_dead_share` times its live ones; returns that count when it ran
        (engine.vacuum)."""
        return self.engine.vacuum(min_dead=min_dead, min_dead_share=min_dead_share)

    def history_partitions(self) -> list[HistoryPartition]:
        """The partitions of jobs_history, oldest first, with their bounds and sizes."""
        rows = self._fetch("history_partitions_list")
        return [HistoryPartition(**row) for row in rows]

    def leader_try_acquire(self, conn: psycopg.Connection[Any]) -> bool:
        """Try to become the maintenance leader on `conn` (engine.leader_try_acquire)."""
        return self.engine.leader_try_acquire(conn)

    def ping(self, conn: CallerConnection | None = None) -> None:
        """One round trip on conn (or a pooled connection); raises if it fails."""
        self.engine.ping(conn)

    def worker_beat(self, presence: Mapping[str, Any]) -> None:
        """Write a worker's row of the workers table (engine.worker_beat)."""
        self.engine.worker_beat(presence)

    def worker_leave(self, presence: Mapping[str, Any]) -> None:
        """Delete a stopping worker's own row of the workers table."""
        self.engine.worker_leave(presence)

    def listen(self, conn: psycopg.Connection[Any]) -> None:
        """LISTEN on conn (autocommit, kept open) for this schema's new jobs."""
        self.engine.listen(conn)

    def listen_ended(self, conn: psycopg.Connection[Any]) -> None:
        """LISTEN on conn (autocommit, kept open) for the ends of awaited jobs."""
        self._fetch("channel_listen_ended", None, conn)

    def mark_awaited(self, job_id: int) -> bool:
        """Mark an unfinished job so that its end sends a NOTIFY (App.wait); False when
        it has ended already or is not in the jobs table."""
        return bool(self._fetch("job_await", {"id": check_job_id(job_id)}))

    def ended_among(
        self, job_ids: Iterable[int], conn: psycopg.Connection[Any] | None = None
    ) -> list[int]:
        """Which of these jobs are no longer unfinished in the jobs table (App.wait's
        fallback poll, in case a NOTIFY was missed)."""
        ids = [check_job_id(job_id) for job_id in job_ids]
        rows = self._fetch("job_ended_among", {"ids": ids}, conn)
        return [int(row["id"]) for row in rows]

    def cancel(self, job_id: int) -> bool:
        """Cancel a pending or running job; a running holder loses its claim, but the
        job's key stays held until that holder releases it or its lease runs out."""
        return self.act("cancel", job_id)

    def retry(self, job_id: int) -> bool:
        """Send a failed or cancelled job back to pending with a fresh set of attempts;
        a cancelled job whose holder's lease has not run out waits for it first."""
        return self.act("retry", job_id)

    def dependencies(self, job_id: int) -> list[Dependency]:
        """The jobs this job waits for (relation "parent") and those that wait for it
        ("child"), each with its status."""
        rows = self._fetch("job_dependencies_get", {"id": check_job_id(job_id)})
        return [Dependency(**row) for row in rows]

    def batch(self, batch_id: int) -> BatchInfo | None:
        """A batch's counts (Job.batch_id names a job's batch); None if there is none."""
        rows = self._fetch("batch_get", {"id": check_job_id(batch_id)})
        return BatchInfo.from_row(rows[0]) if rows else None

    def get(self, job_id: int) -> Job | None:
        """The job, wherever it is kept: in jobs, or moved to jobs_history (looked up
        there only when jobs does not have it); None when there is none."""
        params = {"id": check_job_id(job_id)}
        rows = self._fetch("job_get", params)
        if not rows:
            rows = self._fetch("job_get_archived", params)
        return Job.from_row(rows[0]) if rows else None

    def jobs(
        self,
        *,
        status: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        key: str | None = None,
        text: str | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        ids: Sequence[int] | None = None,
        limit: int = 100,
        conn: CallerConnection | None = None,
    ) -> list[Job]:
        """The newest jobs first, filtered as a JobFilter filters (status, queue, task,
        key, a substring of args or errors, finished or created since/until, ids); with
        conn=, as the caller's transaction sees them (its own enqueues not yet committed
        included)."""
        check_status(status)
        check_filter("queue", queue)
        check_filter("task", task)
        job_filter = JobFilter(status=status, queue=queue, task=task, key=key, text=text,
                               since=since, until=until,
                               ids=tuple(ids) if ids is not None else None)
        params = {**job_filter.params(), "limit": check_limit(limit)}
        return [Job.from_row(row) for row in self._fetch("job_list", params, conn)]

    def stats(self) -> list[QueueStats]:
        """Per queue: jobs by status, expired leases, age of the oldest claimable job."""
        return [QueueStats.from_row(row) for row in self._fetch("queue_stats")]

    # -- operator actions (the dashboard's and the command line's) -------------------
    # One job, or every job of a JobFilter up to the newest id the operator saw
    # counted (count_matching's `upto`): each an ordinary fenced statement that leaves
    # alone a job no longer in a state the action may change. The actions, their
    # states and statements are one table, actions.ACTIONS.

    def act(self, action: str, job_id: int, *, priority: int | None = None) -> bool:
        """Do the operator action named `action` (retry, cancel, run_now, set_priority
        or delete; set_priority takes `priority`) to one job: False when the job is
        gone or not in a state the action may leave."""
        chosen = action_named(action)
        params = {"id": check_job_id(job_id), **action_params(chosen, priority, self.channel)}
        try:
            changed = bool(self._fetch(chosen.one, params))
        except psycopg.errors.UniqueViolation as error:
            raise unique_refused(error, f"job {job_id}") from None
        if not changed and chosen.one_else is not None:
            changed = bool(self._fetch(chosen.one_else, {"id": params["id"]}))
        if changed and chosen.event is not None and self.events.active:
            self.events.emit(Event(chosen.event, job_id=job_id))
        return changed

    def act_matching(
        self, action: str, job_filter: JobFilter, *, upto: int, priority: int | None = None
    ) -> int:
        """Do the operator action named `action` to every job of the filter with an id
        up to `upto` (count_matching's) that is in a state the action may leave; the
        number of jobs changed."""
        chosen = action_named(action)
        params = {**matching_params(job_filter, upto),
                  **action_params(chosen, priority, self.channel)}
        try:
            rows = self._fetch(chosen.matching, params)
        except psycopg.errors.UniqueViolation as error:
            raise unique_refused(error, "a job of the filter") from None
        return int(rows[0]["changed"]) if chosen.wakes else len(rows)

    def delete(self, job_id: int) -> bool:
        """Delete a job that is not running (a running one would lose its holder's work
        without telling it: cancel it first), or a done job moved to jobs_history."""
        return self.act("delete", job_id)

    def run_now(self, job_id: int) -> bool:
        """Make a scheduled pending job due now and wake its queue's workers."""
        return self.act("run_now", job_id)

    def set_priority(self, job_id: int, priority: int) -> bool:
        """Change a pending job's priority (higher runs first)."""
        return self.act("set_priority", job_id, priority=priority)

    def count_matching(self, action: str, job_filter: JobFilter) -> tuple[int, int]:
        """How many jobs of the filter `action` would change now, and the newest of
        their ids: pass it as `upto` to the *_matching action to act on exactly those
        (and older ones that entered the filter since, never newer ones)."""
        params = {**filter_params(job_filter),
                  "statuses": list(action_named(action).statuses)}
        (row,) = self._fetch("job_count_matching", params)
        return int(row["count"]), int(row["upto"] or 0)

    def retry_matching(self, job_filter: JobFilter, *, upto: int) -> int:
        """Send the failed and cancelled jobs of the filter back to pending."""
        return self.act_matching("retry", job_filter, upto=upto)

    def cancel_matching(self, job_filter: JobFilter, *, upto: int) -> int:
        """Cancel the pending, running and waiting jobs of the filter."""
        return self.act_matching("cancel", job_filter, upto=upto)

    def delete_matching(self, job_filter: JobFilter, *, upto: int) -> int:
        """Delete the jobs of the filter that are not running."""
        return self.act_matching("delete", job_filter, upto=upto)

    def run_now_matching(self, job_filter: JobFilter, *, upto: int) -> int:
        """Make the scheduled pending jobs of the filter due now."""
        return self.act_matching("run_now", job_filter, upto=upto)

    # -- flow control (docs/flow_control.md) ----------------------------------------

    def pause(self, queue: str) -> None:
        """Claims that begin from now on take none of this queue's jobs; running ones
        finish. Stays paused, across restarts, until resume()."""
        self._set_paused(queue, True)

    def resume(self, queue: str) -> None:
        """Let the queue's jobs be claimed again, and wake its workers."""
        self._set_paused(queue, False)

    def _set_paused(self, queue: str, paused: bool) -> None:
        params = {"name": check_name("queue", queue), "paused": paused,
                  "channel": self.channel}
        self._fetch("queue_set_paused", params)
        self.engine.flow_changed()

    def set_concurrency(self, queue: str, concurrency: int | None) -> QueueSettings:
        """At most `concurrency` of the queue's jobs held at once, fleet-wide (None: no
        limit). Takes effect for the claims that begin after it, without restarts."""
        return self._set_limits(
            queue, set_concurrency=True, concurrency=check_concurrency(concurrency)
        )

    def set_rate(self, queue: str, rate: object) -> QueueSettings:
        """At most so many starts in any sliding window: "100/s", "10/min", a
        `(limit, seconds)` pair or a `Rate`; None removes the limit."""
        return self._set_limits(queue, set_rate=True, rate=parse_rate(rate))

    def set_key_concurrency(
        self, queue: str, concurrency: int | None
    ) -> QueueSettings:
        """At most `concurrency` jobs of each limit key (enqueue's `limit_key=`) of the
        queue held at once, fleet-wide; None removes the limit."""
        return self._set_limits(
            queue, set_key_concurrency=True, key_concurrency=check_concurrency(concurrency)
        )

    def set_key_rate(self, queue: str, rate: object) -> QueueSettings:
        """At most so many starts of each limit key of the queue per sliding window."""
        return self._set_limits(queue, set_key_rate=True, key_rate=parse_rate(rate))

    def _set_limits(
        self,
        queue: str,
        *,
        set_concurrency: bool = False,
        concurrency: int | None = None,
        set_rate: bool = False,
        rate: Any = None,
        set_key_concurrency: bool = False,
        key_concurrency: int | None = None,
        set_key_rate: bool = False,
        key_rate: Any = None,
    ) -> QueueSettings:
        params = {
            "name": check_name("queue", queue), "channel": self.channel,
            "set_concurrency": set_concurrency, "concurrency": concurrency,
            "set_rate": set_rate,
            "rate_limit": None if rate is None else rate.limit,
            "rate_period": None if rate is None else rate.period,
            "set_key_concurrency": set_key_concurrency, "key_concurrency": key_concurrency,
            "set_key_rate": set_key_rate,
            "key_rate_limit": None if key_rate is None else key_rate.limit,
            "key_rate_period": None if key_rate is None else key_rate.period,
        }
        self._fetch("queue_set_limits", params)
        self.engine.flow_changed()
        (settings,) = self.queue_settings(queue)
        return settings

    def apply_limits(
        self, limits: Mapping[str, tuple[int | None, Rate | None]]
    ) -> None:
        """Write the limits an App declares (App.limit), each only where named: what a
        worker does as it starts, so that code wins then (docs/flow_control.md)."""
        for name, (concurrency, rate) in limits.items():
            if concurrency is not None:
                self.set_concurrency(name, concurrency)
            if rate is not None:
                self.set_rate(name, rate)

    def set_aging(
        self, queue: str, *, every: float | None, step: int = 1, cap: int = 0
    ) -> QueueSettings:
        """Priority aging: every `every` seconds the leader raises the priority of the
        queue's jobs due at least that long by `step`, up to `cap`. every=None: off."""
        aging = check_aging(every, step, cap)
        params = {
            "name": check_name("queue", queue),
            "every": None if aging is None else aging.every,
            "step": None if aging is None else aging.step,
            "cap": None if aging is None else aging.cap,
        }
        self._fetch("queue_set_aging", params)
        (settings,) = self.queue_settings(queue)
        return settings

    def age_priorities(self, *, limit: int = 10_000) -> int:
        """One aging pass (the leader runs it): how many jobs gained priority."""
        return self.engine.age_priorities(limit=limit)

    def queue_settings(self, queue: str | None = None) -> list[QueueSettings]:
        """Every queue that has a setting or a pending or held job (or just `queue`),
        with its settings and how many of its jobs are held now."""
        name = None if queue is None else check_name("queue", queue)
        rows = self._fetch("queue_settings_list", {"name": name})
        return [QueueSettings.from_row(row) for row in rows]

    def set_priority_matching(
        self, job_filter: JobFilter, priority: int, *, upto: int
    ) -> int:
        """Change the priority of the pending jobs of the filter."""
        return self.act_matching("set_priority", job_filter, upto=upto,
                                 priority=priority)

    # -- schedules (docs/schedules.md) ----------------------------------------------

    def add_schedule(
        self,
        name: str,
        cron: str,
        task: str,
        args: Mapping[str, Any] | None = None,
        *,
        timezone: str = "UTC",
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        catch_up: str = "skip",
        catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
        paused: bool = False,
        new: bool = False,
        by: str | None = None,
        now: dt.datetime | None = None,
    ) -> Schedule:
        """Add a schedule: `task` enqueued with `args` at each tick of `cron` (5 fields,
        or 6 with seconds last) read in `timezone`. The leader enqueues its ticks from
        the next one on, without restarts. Refused before anything is written: a cron
        that never fires, an unknown zone or catch-up policy, a name taken, and a task
        no schedule names yet unless new=True (an App's app.schedules knows its tasks).
        queue, priority, max_attempts: None takes the task's own."""
        now = schedule_now(now)
        params = definition(
            cron=cron, task=task, args=args, timezone=timezone, queue=queue,
            priority=priority, max_attempts=max_attempts, catch_up=catch_up,
            catch_up_limit=catch_up_limit, now=now,
        )
        if not isinstance(paused, bool):
            raise InvalidArgument(f"paused must be True or False, got {paused!r}")
        params |= {"name": check_schedule_name(name), "paused": paused, "by": by,
                   "now": now}
        if not new:
            self._check_task_named(task)
        rows = self._fetch("schedule_insert", params)
        if not rows:
            raise InvalidArgument(f"a schedule named {name!r} exists already; nothing "
                                  "was written")
        schedule = Schedule.from_row(rows[0])
        schedule_logger.info("schedule %s added by %s", describe(schedule), by or "the API")
        self._schedule_event("schedule.added", schedule, by)
        return schedule

    def update_schedule(
        self, name: str, *, new: bool = False, by: str | None = None,
        now: dt.datetime | None = None, revision: int | None = None, **changes: Any,
    ) -> Schedule:
        """Change a run-time schedule's cron, timezone, task, args, queue, priority,
        max_attempts, catch_up or catch_up_limit; the leader follows from its next run.
        A new cron or zone counts from now: its past ticks are not caught up. A schedule
        defined in code is refused (change the code and deploy). `revision`: the
        Schedule.revision the change was made against (a form opened earlier); if the
        row has moved on since, ScheduleChanged and nothing is written."""
        check_changes(changes)
        now = schedule_now(now)
        current = self._schedule_named(name)
        if revision is not None:
            check_revision(current, revision)
        if current.origin == "code":
            raise InvalidArgument(
                f"schedule {name!r} is defined in code (@app.periodic): change it there "
                "and deploy; pause, resume and run now work on it; nothing was written"
            )
        params = definition(**(stored(current) | changes), now=now)
        if not new and params["task"] != current.task:
            self._check_task_named(params["task"])
        timing = (params["cron"], params["timezone"]) != (current.cron, current.timezone)
        params |= {
            "name": name, "by": by,
            "revision": current.revision if revision is None else revision,
            "last_tick": now if timing else current.last_tick,
            "next_tick": params["next_tick"] if timing else current.next_tick,
        }
        rows = self._fetch("schedule_update", params)
        if not rows:
            raise ScheduleChanged(f"schedule {name!r} changed while this change was "
                                  "made: read it again; nothing was written")
        schedule = Schedule.from_row(rows[0])
        schedule_logger.info("schedule %s changed by %s (%s)", describe(schedule),
                             by or "the API", ", ".join(sorted(changes)))
        self._schedule_event("schedule.updated", schedule, by, changes=sorted(changes))
        return schedule

    def pause_schedule(self, name: str, *, by: str | None = None) -> Schedule:
        """Enqueue none of the schedule's ticks until resume_schedule(); survives
        restarts and deploys."""
        return self._set_schedule_paused(name, True, by, None)

    def resume_schedule(
        self, name: str, *, by: str | None = None, now: dt.datetime | None = None
    ) -> Schedule:
        """Enqueue the schedule's ticks again from the next one on: the ticks of the
        pause are not caught up."""
        return self._set_schedule_paused(name, False, by, schedule_now(now))

    def _set_schedule_paused(
        self, name: str, paused: bool, by: str | None, now: dt.datetime | None
    ) -> Schedule:
        for _ in range(UNIQUE_ATTEMPTS):  # each retry needs another change in between
            current = self._schedule_named(name)
            next_tick = None if now is None else Cron(
                current.cron, current.timezone).next_after(now)
            rows = self._fetch("schedule_set_paused", {
                "name": name, "paused": paused, "revision": current.revision,
                "now": now, "next_tick": next_tick, "by": by,
            })
            if rows:
                schedule_logger.info("schedule %r %s by %s", name,
                                     "paused" if paused else "resumed", by or "the API")
                changed = Schedule.from_row(rows[0])
                self._schedule_event("schedule.paused" if paused else "schedule.resumed",
                                     changed, by)
                return changed
        raise InvalidArgument(f"schedule {name!r} kept changing: try again")

    def remove_schedule(self, name: str, *, by: str | None = None) -> None:
        """Delete a run-time schedule, or a code schedule the code no longer has. Jobs
        it enqueued stay."""
        rows = self._fetch("schedule_delete", {"name": name})
        if not rows:
            current = self._schedule_named(name)
            raise InvalidArgument(
                f"schedule {current.name!r} is defined in code (@app.periodic): remove it "
                "there and deploy (its row goes "
                f"{CODE_SCHEDULE_GRACE.days} days after no worker's code has it); pause "
                "it meanwhile; nothing was removed"
            )
        schedule_logger.info("schedule %r removed by %s", name, by or "the API")
        self._schedule_event("schedule.removed", rows[0], by)

    def run_schedule_now(
        self, name: str, *, by: str | None = None, defaults: Mapping[str, Any] | None = None
    ) -> int:
        """Enqueue the schedule's job now, besides its ticks (paused or not); returns
        its id. `defaults`: the task's job options where the schedule gives none."""
        current = self._schedule_named(name)
        job = job_for_tick(current, None, defaults or {})
        with self._transaction(None) as held:
            (job_id,) = self.enqueue_many([job], conn=held)
            self._fetch("schedule_note_job", {"name": name, "job_id": job_id}, held)
        schedule_logger.info("schedule %r run now by %s: job %s", name, by or "the API",
                             job_id)
        return job_id

    def schedules(self) -> list[Schedule]:
        """Every schedule, by name, with its last job's status."""
        return [Schedule.from_row(row) for row in self._fetch("schedule_list")]

    def schedule(self, name: str) -> Schedule | None:
        rows = self._fetch("schedule_get", {"name": name})
        return Schedule.from_row(rows[0]) if rows else None

    def _schedule_named(self, name: str) -> Schedule:
        found = self.schedule(name) if isinstance(name, str) else None
        if found is None:
            names = ", ".join(repr(s.name) for s in self.schedules()) or "none"
            raise InvalidArgument(f"no schedule named {name!r} (schedules: {names})")
        return found

    def _check_task_named(self, task: str) -> None:
        (row,) = self._fetch("schedule_task_named", {"task": task})
        if not row["named"]:
            raise InvalidArgument(
                f"unknown task {task!r}: no schedule names it, and without the App "
                "(--app) its tasks are not known; pass new=True (--new) if the name is "
                "right; nothing was written"
            )

    # The maintenance leader's side (maintenance/services.py, Scheduler).

    def schedules_due(
        self, now: dt.datetime, *, limit: int = 100, passed: Iterable[str] = ()
    ) -> list[Schedule]:
        """The active schedules due at now, but for those named in `passed`."""
        rows = self._fetch("schedule_list_due",
                           {"now": now, "limit": limit, "passed": list(passed)})
        return [Schedule.from_row(row) for row in rows]

    def schedule_revisions(self, names: Sequence[str]) -> dict[str, int]:
        """The revision of each schedule named that exists."""
        rows = self._fetch("schedule_revision_many", {"names": list(names)})
        return {row["name"]: row["revision"] for row in rows}

    def fire_schedules(
        self, fires: Sequence[tuple[Schedule, Sequence[Mapping[str, Any]], dt.datetime,
                                    dt.datetime]],
    ) -> list[list[int] | None]:
        """Enqueue due schedules' jobs and record their progress (last_tick, next_tick)
        in one transaction: for each (schedule, jobs, last_tick, next_tick), the ids
        of its jobs, or None when the row is no longer as read (changed, paused, or
        advanced by another leader) and nothing of it was written."""
        if not fires:
            return []
        with self._transaction(None) as held:
            locked = self._fetch("schedule_lock_due_many", {
                "names": [s.name for s, _, _, _ in fires],
                "revisions": [s.revision for s, _, _, _ in fires],
                "last_ticks": [s.last_tick for s, _, _, _ in fires],
            }, held)
            positions = sorted(int(row["position"]) - 1 for row in locked)
            jobs = [job for position in positions for job in fires[position][1]]
            ids = self.enqueue_many(jobs, conn=held) if jobs else []
            result: list[list[int] | None] = [None] * len(fires)
            start = 0
            for position in positions:
                count = len(fires[position][1])
                result[position] = ids[start:start + count]
                start += count
            self._fetch("schedule_advance_many", {
                "names": [fires[p][0].name for p in positions],
                "last_ticks": [fires[p][2] for p in positions],
                "next_ticks": [fires[p][3] for p in positions],
                "last_job_ids": [ids_of[-1] if (ids_of := result[p]) else None
                                 for p in positions],
            }, held)
            return result

    def sync_code_schedules(
        self, columns: Mapping[str, list[Any]], *, now: dt.datetime, by: str | None = None
    ) -> tuple[list[str], list[str]]:
        """Write an App's @app.periodic schedules (schedules.code_definitions) and mark
        the code schedules it lacks missing; returns the names a run-time schedule holds
        (not written) and those newly missing."""
        rows = self._fetch("schedule_sync_code", {**columns, "now": now, "by": by})
        taken = [row["name"] for row in rows if row["taken"]]
        missing = self._fetch("schedule_mark_missing",
                              {"names": list(columns["names"]), "now": now})
        for row in missing:
            self._schedule_event("schedule.missing", row, by)
        return taken, [row["name"] for row in missing]

    def delete_missing_schedules(self, *, before: dt.datetime) -> list[str]:
        """Delete the code schedules missing from code since before `before`."""
        rows = self._fetch("schedule_delete_missing", {"before": before})
        for row in rows:
            self._schedule_event("schedule.removed", row,
                                 "the leader: missing from code past the grace")
        return [row["name"] for row in rows]

    def _schedule_event(
        self, name: str, schedule: Schedule | Mapping[str, Any], by: str | None,
        **detail: Any,
    ) -> None:
        """Hand a schedule's change to the subscribers (docs/events.md)."""
        if self.events.active:
            self.events.emit(schedule_event(name, schedule, by, **detail))

