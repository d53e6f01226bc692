"""The data plane of pgbaton: enqueue, claim, lease and fence (async source).

Every method is one statement of sql/jobs.sql, queues.sql, leader.sql or server.sql.
Claims run on autocommit connections, so each claim is its own short transaction:
claim, commit, then work.

Over 400 lines on purpose: the Queue is the data plane's whole API, one short method per
named statement, and queue.py is generated from it; checks and encoding live in
_checks.py and _encoding.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

import psycopg
import psycopg_pool
from psycopg.rows import DictRow, dict_row, tuple_row
from psycopg.types.json import JsonbLoader

from . import _database_async as database
from . import _sql, dependencies, history
from ._checks import (
    JOB_DEFAULTS,
    CopyRow,
    as_claim_list,
    check_filter,
    check_int4,
    check_job_id,
    check_lease,
    check_limit,
    check_name,
    check_partition_width,
    check_queues,
    check_seconds,
    check_status,
    check_tasks,
    check_tokens,
    copy_job_rows,
    copy_values,
    encode_job_rows,
    held_params,
    job_params,
    many_job_params,
    retry_delay,
)
from ._decoding import JsonbBinaryLoader, claim_reader
from ._encoding import error_json, to_json
from ._sql import notify_channel
from ._transient import is_connection_loss, is_prepared_statement_mixup
from .actions import Action, action_named
from .claim_marks import ClaimMarks
from .dependencies import Batch, BatchInfo, Dependency
from .dsn import merge_options, redact_dsn, resolve_dsn
from .enqueue_hook import enqueue_span, meta_json
from .errors import (
    ConfigurationError,
    ConnectionFailed,
    IdempotencyKeyTaken,
    InvalidArgument,
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
from .integrations.connections import AsyncCallerConnection, psycopg_connection
from .job_filter import JobFilter, check_upto
from .models import Claim, Enqueued, HistoryPartition, Job, QueueStats
from .unique import Unique, check_unique

Row = dict[str, Any]

# How often a queue re-reads whether any queue is paused or limited (one tiny
# statement): a setting made elsewhere reaches this queue's claims within this time,
# and until then its jobs are only held back (docs/flow_control.md).
FLOW_RECHECK_SECONDS = 1.0
# How long a COPY batch whose connection was lost waits for the backend that ran it to
# end, so that whether it was written can be told (_copy_outcome).
COPY_OUTCOME_WAIT_SECONDS = 5.0
# How many times a unique enqueue runs again when the job that blocked it was committed
# after its statement's snapshot (_insert_unique): each run needs a new such job.
UNIQUE_ATTEMPTS = 5
Pool = psycopg_pool.AsyncConnectionPool[database.PooledConnection]


def _claim_params(
    worker_id: str, limit: int, lease: float, queues: Iterable[str] | None,
    tasks: Iterable[str] | None, *, finished: Iterable[uuid.UUID] | None = None,
    starting: int | None = None, after: str | None = None,
) -> dict[str, Any]:
    limit = check_limit(limit)
    return {
        "worker_id": check_name("worker_id", worker_id),
        "limit": limit,
        "lease": check_lease(lease),
        "queues": check_queues(queues),
        "tasks": check_tasks(tasks),
        "finished": check_tokens("finished", finished),
        "starting": limit if starting is None else min(
            check_int4("starting", starting, minimum=0), limit),
        "after": after,  # job_claim_many's marks (claim_marks.py)
    }


def _claim_batch(columns: list[str], rows: list[tuple[Any, ...]]) -> ClaimBatch:
    """A claim's rows: the claimed jobs, and (flow claims) a row with no job that says
    when a full rate-limited queue's next start is due."""
    if not rows:
        return ClaimBatch([])
    read_claim = claim_reader(columns)
    id_at = columns.index("id")
    claims = [read_claim(row) for row in rows if row[id_at] is not None]
    slots = [row[columns.index("next_slot_at")] for row in rows if row[id_at] is None]
    if not slots:
        return ClaimBatch(claims)
    due = (slots[0] - dt.datetime.now(dt.UTC)).total_seconds()
    return ClaimBatch(claims, max(due, 0.0))


def _accepted(rows: list[tuple[Any, ...]], count: int) -> list[bool]:
    """For each input position of a *_many statement read as tuples (the position
    first), whether its row was changed."""
    positions = {row[0] for row in rows}
    return [position in positions for position in range(1, count + 1)]


def _unique_refused(error: psycopg.errors.UniqueViolation, which: str) -> Exception:
    """An operator action that would bring back a unique job whose key a newer job holds
    (docs/howto/unique.md): refused in the database, said plainly; else the error."""
    if error.diag.constraint_name != "jobs_unique_key":
        return error
    return InvalidArgument(
        f"{which} cannot be sent back: a newer job of its unique key blocks it (the "
        "database holds one per key); nothing was changed"
    )


def _changed(rows: list[Row], count: int) -> list[bool]:
    """For each input position of a *_many statement, whether its row was changed."""
    positions = {row["position"] for row in rows}
    return [position in positions for position in range(1, count + 1)]


class AsyncQueue:
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

    # How long drop_history waits for a lock on jobs_history (a reader's, a mover's)
    # before it leaves a partition for its next call: a DROP queued behind a long reader
    # would hold up every reader queued behind it.
    history_lock_wait: float = 0.5

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str = "pgbaton",
        pool_size: int = 4,
        events: Events | None = None,
        connection_provider: Callable[[], AsyncCallerConnection | None] | None = None,
        prepare: bool | None = None,
        connect_timeout: float = database.CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        self.dsn = resolve_dsn(dsn)
        # How long a call waits for a connection of the pool (and the pool's first one
        # as it opens) before ConnectionFailed: during an outage, each call waits this.
        self.connect_timeout = check_seconds("connect_timeout", connect_timeout,
                                             positive=True)
        # Asked by enqueue, enqueue_once and enqueue_many when no conn= is given: the
        # connection whose transaction the job joins (a framework's current one), or
        # None for the pool. docs/frameworks.md, "Joining a transaction without conn=".
        self.connection_provider = connection_provider
        # Whether the pool's connections let psycopg prepare statements on the server.
        # Through a transaction pool (PgBouncer before 1.21, or without
        # max_prepared_statements) a statement prepared on one server connection is
        # unknown on the next, or another client's statement of the same name: None
        # decides at open by the probe of pooling.py, False prepares nothing, True
        # prepares without asking (PgBouncer 1.21+ with max_prepared_statements).
        self.prepare = prepare
        # Why the probe took the DSN for a transaction pool, or None: read at open.
        self.transaction_pool: str | None = None
        # job.enqueued and job.cancelled go to these subscribers (an App's queues share
        # the App's Events); emitted when the statement ran, so with conn= the caller's
        # transaction may still roll the job back.
        self.events = events if events is not None else Events()
        self.schema = _sql.check_schema_name(schema)
        self.channel = notify_channel(schema)
        self._sql = _sql.queries(schema)
        self._pool_size = pool_size
        self._pool: Pool | None = None
        self._opening = asyncio.Lock()
        self._schema_checked = False
        self._flow_controlled = False
        self._flow_read_at = -math.inf
        self._claim_marks = ClaimMarks()
        # The queues with a concurrency or rate limit, as last read: their completions
        # wake the fleet's workers, who may be waiting for the room they free.
        self.limited_queues: frozenset[str] = frozenset()
        self.rated_queues: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {redact_dsn(self.dsn)} schema={self.schema!r}>"

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Check the server and schema and open the pool now, rather than on first use."""
        if self._pool is None:
            await self._open_pool()

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    # -- connections ----------------------------------------------------------------

    async def connect(self, **kwargs: Any) -> psycopg.AsyncConnection[DictRow]:
        """A new connection of this queue's own (for LISTEN, or a caller's transaction)."""
        return await database.connect(self.dsn, **kwargs)

    async def _open_pool(self) -> Pool:
        async with self._opening:
            if self._pool is not None:  # opened by a caller this one waited for
                return self._pool
            conn = await database.connect(self.dsn, autocommit=True)
            try:
                await database.check_schema(conn, self.schema)
                self._schema_checked = True
                if self.prepare is None:
                    self.transaction_pool = await database.transaction_pool_evidence(
                        conn, self.dsn, trust_backend_key=True
                    )
                    self.prepare = self.transaction_pool is None
            finally:
                await conn.close()
            pool = Pool(
                self.dsn,
                connection_class=database.PooledConnection,
                min_size=1,
                max_size=self._pool_size,
                kwargs={
                    "autocommit": True,
                    "row_factory": dict_row,
                    **self._statement_kwargs(),
                },
                open=False,
            )
            await pool.open(wait=True, timeout=self.connect_timeout)
            self._pool = pool
            return pool

    def _statement_kwargs(self) -> dict[str, Any]:
        if not self.prepare:
            return {"prepare_threshold": None}
        # Every statement here has one good plan whatever its values
        # (tests/integration/test_claim_index.py checks the claim's), so plan each once
        # per connection instead of at every call.
        return {"options": merge_options(self.dsn, "-c plan_cache_mode=force_generic_plan")}

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[database.PooledConnection]:
        pool = self._pool or await self._open_pool()
        try:
            # getconn and putconn rather than pool.connection(), which also enters the
            # connection's own block: a commit on exit that these autocommit connections
            # never need, and with it a lock and a wait (3.5 to 5.4 of the 9 to 14
            # microseconds a checkout took alone; benchmarks/results/
            # enqueue-server-cost.md). putconn does what matters of it: a connection
            # left mid-statement or broken is replaced, one left in a transaction is
            # rolled back (no statement of pgbaton's leaves one).
            conn = await pool.getconn(timeout=self.connect_timeout)
            try:
                yield conn
            finally:
                await pool.putconn(conn)
        except psycopg.Error as error:
            if self.prepare and is_prepared_statement_mixup(error):
                error.add_note(
                    f"{redact_dsn(self.dsn)} seems to go through a transaction pool, "
                    "where a prepared statement stays on one server connection: give "
                    "the queue prepare=False (docs/howto/pgbouncer.md)"
                )
            if not isinstance(error, psycopg.OperationalError) or not is_connection_loss(
                error
            ):
                raise
            # The server may have restarted: drop every dead idle connection now, so the
            # caller's retry gets a fresh one instead of the next corpse.
            await pool.check()
            raise ConnectionFailed(
                f"lost the connection to PostgreSQL at {redact_dsn(self.dsn)}: {error}"
            ) from error

    async def _fetch(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        conn: AsyncCallerConnection | None = None,
    ) -> list[Row]:
        query = self._sql[name]
        if conn is not None:
            conn = await psycopg_connection(conn, psycopg.AsyncConnection)
            if not isinstance(conn, psycopg.AsyncConnection):
                raise InvalidArgument(
                    f"conn must be a psycopg.AsyncConnection, got {type(conn).__name__}"
                )
            if not self._schema_checked:
                await database.check_schema(conn, self.schema)
                self._schema_checked = True
            async with conn.cursor(row_factory=dict_row) as cursor:
                # A caller's connection may load jsonb its own way (Django's returns
                # text); pgbaton's rows want it parsed, as on its own connections.
                cursor.adapters.register_loader("jsonb", JsonbLoader)
                await cursor.execute(query, params)
                return await cursor.fetchall() if cursor.description else []
        async with self._connection() as pooled:
            cursor = pooled.statements()
            await cursor.execute(query, params)
            return await cursor.fetchall() if cursor.description else []

    async def _fetch_tuples(
        self, name: str, params: Mapping[str, Any]
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """A statement of the worker's hot path: its column names and its rows as
        tuples, in binary (no dict per row, no text to parse), jsonb decoded by
        JsonbBinaryLoader."""
        async with (
            self._connection() as pooled,
            pooled.cursor(row_factory=tuple_row, binary=True) as cursor,
        ):
            cursor.adapters.register_loader("jsonb", JsonbBinaryLoader)
            await cursor.execute(self._sql[name], params)
            if cursor.description is None:
                return [], []
            return [column.name for column in cursor.description], await cursor.fetchall()

    async def _changed_positions(
        self, name: str, params: Mapping[str, Any], count: int
    ) -> list[bool]:
        """Run a *_many statement; for each input position, whether its row changed."""
        _, rows = await self._fetch_tuples(name, params)
        return _accepted(rows, count)

    # -- schema ---------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Bring the schema up to date; returns the versions applied (none if current)."""
        conn = await database.connect(self.dsn, autocommit=True)
        try:
            return await database.migrate(conn, self.schema)
        finally:
            await conn.close()

    async def schema_version(self) -> int:
        conn = await database.connect(self.dsn, autocommit=True)
        try:
            return await database.schema_version(conn, self.schema)
        finally:
            await conn.close()

    # -- producing ------------------------------------------------------------------

    async def enqueue(
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
        conn: AsyncCallerConnection | None = None,
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
            return (await self._enqueue_unique(
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
            return (await self._enqueue_graph([job], None, conn))[0]
        params = job_params(
            task, args, queue=queue, priority=priority, run_at=run_at, delay=delay,
            key=key, idempotency_key=idempotency_key, max_attempts=max_attempts,
            limit_key=limit_key,
        )
        conn = await self._provided(conn)
        with enqueue_span(self.events.enqueue_hook, queue, 1) as span:
            params["meta"] = meta_json(span)
            job_id = await self._insert_one(params, conn)
            span.sent([job_id])
            return job_id

    async def _enqueue_unique(
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
        conn: AsyncCallerConnection | None,
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
        conn = await self._provided(conn)
        with enqueue_span(self.events.enqueue_hook, queue, 1) as span:
            params["meta"] = meta_json(span)
            enqueued = await self._insert_unique(params, conn)
            span.sent([enqueued.id])
            return enqueued

    async def _insert_unique(
        self, params: Mapping[str, Any], conn: AsyncCallerConnection | None
    ) -> Enqueued:
        """job_insert_unique, again while the job that blocked it is one this statement's
        snapshot could not see (committed since): each run sees what committed before it,
        so another only follows a job that ended or was written in the meantime."""
        for _ in range(UNIQUE_ATTEMPTS):
            rows = await self._fetch("job_insert_unique", params, conn)
            if rows:
                row = rows[0]
                enqueued = Enqueued(id=int(row["id"]), created=row["outcome"] == "created",
                                    outcome=row["outcome"], status=row["status"])
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

    async def _insert_one(
        self, params: dict[str, Any], conn: AsyncCallerConnection | None
    ) -> int:
        if params["idempotency_key"] is None:
            job_id = int((await self._fetch("job_insert", params, conn))[0]["id"])
            self._enqueued(job_id, params["task"], params["queue"])
            return job_id
        return (await self._insert_idempotent(params, conn)).id

    async def _provided(
        self, conn: AsyncCallerConnection | None
    ) -> AsyncCallerConnection | None:
        """conn, else what the connection provider gives (None: the pool)."""
        if conn is not None or self.connection_provider is None:
            return conn
        provided = self.connection_provider()
        if provided is None:
            return None
        try:
            return await psycopg_connection(provided, psycopg.AsyncConnection)
        except InvalidArgument as error:
            raise InvalidArgument(
                f"the queue's connection_provider gave what conn= cannot be: {error}"
            ) from None

    def _enqueued(self, job_id: int, task: str, queue: str) -> None:
        if self.events.active:
            self.events.emit(Event("job.enqueued", job_id=job_id, task=task, queue=queue))

    async def enqueue_once(
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
        conn: AsyncCallerConnection | None = None,
        limit_key: str | None = None,
        unique: Unique | None = None,
    ) -> Enqueued:
        """Add one job unless a job of the same task already has this idempotency key.
        Returns the job's id and whether this call created it; a job that existed is
        returned as it is (its args are not compared), and nothing is written. With
        unique= instead of a key: enqueue(unique=), saying what it did (Enqueued's
        outcome: created, kept, replaced or debounced; docs/howto/unique.md)."""
        if unique is not None:
            return await self._enqueue_unique(
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
        conn = await self._provided(conn)
        with enqueue_span(self.events.enqueue_hook, queue, 1) as span:
            params["meta"] = meta_json(span)
            enqueued = await self._insert_idempotent(params, conn)
            span.sent([enqueued.id])
            return enqueued

    async def _insert_idempotent(
        self, params: Mapping[str, Any], conn: AsyncCallerConnection | None
    ) -> Enqueued:
        rows = await self._fetch("job_insert_idempotent", params, conn)
        if rows:
            enqueued = Enqueued(id=int(rows[0]["id"]), created=bool(rows[0]["created"]))
            if enqueued.created:
                self._enqueued(enqueued.id, params["task"], params["queue"])
            return enqueued
        # Nothing inserted and nothing found: the job that has the key was committed after
        # this statement's snapshot (a fresh statement sees it), or it belongs to another
        # task and the previous release's global index refused the key.
        task, key = params["task"], params["idempotency_key"]
        found = await self._ids_by_task_idempotency_key([task], [key], conn)
        if (task, key) in found:
            return Enqueued(id=found[task, key], created=False)
        raise await self._key_taken(task, key, conn)

    async def _key_taken(
        self, task: str, key: str, conn: AsyncCallerConnection | None
    ) -> IdempotencyKeyTaken:
        rows = await self._fetch("job_idempotency_key_holder", {"idempotency_key": key}, conn)
        holder = f"job {rows[0]['id']} of task {rows[0]['task']!r}" if rows else "another job"
        return IdempotencyKeyTaken(
            f"idempotency key {key!r} for task {task!r} is taken by {holder}: keys are per "
            "task, but until the previous release's global index is dropped a key cannot "
            "be reused across tasks; nothing was written"
        )

    async def enqueue_many(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        conn: AsyncCallerConnection | None = None,
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
            ids = await self._enqueue_graph(jobs, batch, conn)
            if ids and self.events.active:
                self.events.emit(Event("job.enqueued", job_id=ids[0], count=len(ids)))
            return ids
        params = many_job_params(jobs, encode=False)
        if not params["count"]:
            return []
        if params["uniques"]:
            return await self._enqueue_many_unique(params, conn)
        if params["count"] >= self.copy_min_jobs and not params["idempotency_keys"]:
            rows: list[CopyRow] | None = copy_job_rows(params["rows"])
        else:
            rows = None
            params = encode_job_rows(params)
        conn = await self._provided(conn)
        with enqueue_span(self.events.enqueue_hook, params["queue"], params["count"]) as span:
            if rows is None:
                ids = await self._insert_many(params, meta_json(span), conn)
            else:
                ids = await self._copy_many(rows, meta_json(span), conn)
            span.sent(ids)
        if self.events.active:
            self.events.emit(Event("job.enqueued", job_id=ids[0], count=len(ids)))
        return ids

    async def _enqueue_many_unique(
        self, params: Mapping[str, Any], conn: AsyncCallerConnection | None
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
        conn = await self._provided(conn)
        with enqueue_span(self.events.enqueue_hook, params["queue"], params["count"]) as span:
            meta = meta_json(span)
            async with self._transaction(conn) as held:
                if plain_params is not None:
                    written = await self._insert_many(plain_params, meta, held)
                    for position, job_id in zip(plain, written, strict=True):
                        ids[position] = job_id
                for job in unique_params.values():
                    job["meta"] = meta
                for position, enqueued in zip(
                    unique_params, await self._insert_unique_many(
                        list(unique_params.values()), held), strict=True):
                    ids[position] = enqueued.id
            span.sent(ids)
        return ids

    async def _insert_unique_many(
        self, jobs: Sequence[Mapping[str, Any]], conn: psycopg.AsyncConnection[Any]
    ) -> list[Enqueued]:
        """job_insert_unique for each job in order, in one transaction: the first alone
        (it checks a caller's connection, as every statement does), the rest in one
        pipelined executemany, a round trip for all rather than one each. Each
        statement sees what the ones before it wrote. One that met a job it could not
        see runs again alone (_insert_unique)."""
        done = [await self._insert_unique(jobs[0], conn)]
        if len(jobs) == 1:
            return done
        async with conn.cursor(row_factory=dict_row) as cursor:
            await cursor.executemany(self._sql["job_insert_unique"], jobs[1:], returning=True)
            results = [await cursor.fetchall()]
            while cursor.nextset():
                results.append(await cursor.fetchall())
        for job, rows in zip(jobs[1:], results, strict=True):
            if not rows:
                done.append(await self._insert_unique(job, conn))
                continue
            row = rows[0]
            enqueued = Enqueued(id=int(row["id"]), created=row["outcome"] == "created",
                                outcome=row["outcome"], status=row["status"])
            self._unique_enqueued(enqueued, job["task"], job["queue"])
            done.append(enqueued)
        return done

    async def _insert_many(
        self, params: Mapping[str, Any], meta: str | None, conn: AsyncCallerConnection | None
    ) -> list[int]:
        statement_params = {"jobs": params["jobs"], "meta": meta}
        if not params["idempotency_keys"]:
            (row,) = await self._fetch("job_insert_many", statement_params, conn)
            return cast(list[int], row["ids"])
        # The insert and the look-up of taken keys form one transaction (a savepoint in
        # the caller's), so that a key taken by another task undoes the whole batch.
        async with self._transaction(conn) as held:
            (row,) = await self._fetch("job_insert_many", statement_params, held)
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
            existing = await self._ids_by_task_idempotency_key(
                [task for task, _ in wanted], [key for _, key in wanted], held
            )
            for task, key in wanted:
                if (task, key) not in existing:
                    raise await self._key_taken(task, key, held)
            return [
                job_id if job_id is not None else existing[task, key]
                for job_id, task, key in zip(
                    ids, row["tasks"], row["idempotency_keys"], strict=True
                )
            ]

    async def _copy_many(
        self, rows: Sequence[CopyRow], meta: str | None, conn: AsyncCallerConnection | None
    ) -> list[int]:
        """A large batch by COPY: the ids (and now()) first, then every row in one COPY
        statement, all or nothing. A savepoint in the caller's transaction; on a pooled
        connection a transaction only when some job's run_at is reckoned from now().
        On its own connection, a lost connection's outcome is found out (_copy_outcome)."""
        scheduled = any(row[4] is not None or row[5] for row in rows)
        if conn is not None:
            async with self._transaction(conn) as held:
                return await self._copy_rows(rows, meta, scheduled, held)
        sent: list[Any] = []
        try:
            if not scheduled:
                # The table's defaults give every job the COPY's own now(), as the
                # INSERT's transaction gives it: two round trips fewer than BEGIN ... COMMIT.
                async with self._connection() as pooled:
                    return await self._copy_rows(rows, meta, scheduled, pooled, sent)
            async with self._transaction(None) as held:
                return await self._copy_rows(rows, meta, scheduled, held, sent)
        except ConnectionFailed as error:
            return await self._copy_outcome(error, sent)

    async def _copy_outcome(self, error: ConnectionFailed, sent: list[Any]) -> list[int]:
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
                (row,) = await self._fetch("job_ids_written", {"ids": ids, "pid": pid})
            except ConnectionFailed:
                break
            if row["written"] == len(ids):
                return cast(list[int], ids)
            if row["written"] == 0:
                error.written = False
                error.add_note(f"none of the {len(ids)} jobs was written: a retry is safe")
                raise error
            await asyncio.sleep(0.1)
        error.add_note(f"whether the {len(ids)} jobs (ids {ids[0]} to {ids[-1]}) were "
                       "written is not known: look for them before enqueueing them again")
        raise error

    async def _copy_rows(
        self,
        rows: Sequence[CopyRow],
        meta: str | None,
        scheduled: bool,
        conn: psycopg.AsyncConnection[Any],
        sent: list[Any] | None = None,
    ) -> list[int]:
        """`sent`: filled with the reserved ids and the connection's backend pid."""
        (reserved,) = await self._fetch("job_ids_reserve", {"count": len(rows)}, conn)
        ids: list[int] = reserved["ids"]
        if sent is not None:
            sent[:] = [ids, conn.info.backend_pid]
        statement = self._sql["job_copy_scheduled" if scheduled else "job_copy"]
        async with conn.cursor() as cursor, cursor.copy(statement) as copy:
            for values in copy_values(ids, rows, meta, reserved["now"] if scheduled else None):
                await copy.write_row(values)
        return ids

    async def _enqueue_graph(
        self,
        jobs: Iterable[Mapping[str, Any]],
        batch: Batch | None,
        conn: AsyncCallerConnection | None,
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
        conn = await self._provided(conn)
        with enqueue_span(self.events.enqueue_hook, params["queue"], params["count"]) as span:
            ids = await self._write_graph(plan, params, batch_params, meta_json(span), conn)
            span.sent(ids)
            return ids

    async def _write_graph(
        self,
        plan: dependencies.Plan,
        params: Mapping[str, Any],
        batch_params: Mapping[str, Any] | None,
        meta: str | None,
        conn: AsyncCallerConnection | None,
    ) -> list[int]:
        """Lock and read the parents, write the batch, the jobs and their edges, then
        apply the end of parents that had already failed or been cancelled."""
        async with self._transaction(conn) as held:
            statuses: dict[int, tuple[str, str]] = {}
            if plan.external:
                rows = await self._fetch("job_parents_lock", {"ids": plan.external}, held)
                statuses = {row["id"]: (row["task"], row["status"]) for row in rows}
                moved = [job_id for job_id in plan.external if job_id not in statuses]
                if moved:  # done parents moved to jobs_history (docs/retention.md)
                    rows = await self._fetch("job_parents_archived", {"ids": moved}, held)
                    statuses |= {row["id"]: (row["task"], row["status"]) for row in rows}
            graph = plan.statement_params(statuses, self.schema)
            batch_id = None
            if batch_params is not None:
                batch_id = (await self._fetch("batch_insert", batch_params, held))[0]["id"]
            insert = {"jobs": params["jobs"], "batch_id": batch_id, "meta": meta, **graph}
            (row,) = await self._fetch("job_insert_graph", insert, held)
            ids = cast(list[int], row["ids"])
            ended = plan.ended_parents(statuses)
            if ended:
                replay = {"parents": ended, "children": ids, "channel": self.channel}
                await self._fetch("job_parents_replay", replay, held)
            return ids

    @asynccontextmanager
    async def _transaction(
        self, conn: AsyncCallerConnection | None
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A transaction on the caller's connection (a savepoint inside theirs) or on a
        pooled one."""
        if conn is not None:
            theirs = await psycopg_connection(conn, psycopg.AsyncConnection)
            if not theirs.autocommit and (
                theirs.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            ):
                # psycopg's transaction() on an idle connection would BEGIN and COMMIT
                # on its own; one statement first opens the caller's transaction, and the
                # block below becomes a savepoint in it, committed by the caller.
                await self._fetch("server_ping", None, theirs)
            async with theirs.transaction():
                yield theirs
            return
        async with self._connection() as pooled, pooled.transaction():
            yield pooled

    async def _ids_by_task_idempotency_key(
        self,
        tasks: Sequence[str],
        keys: Sequence[str],
        conn: AsyncCallerConnection | None,
    ) -> dict[tuple[str, str], int]:
        rows = await self._fetch(
            "job_ids_by_task_idempotency_key", {"tasks": list(tasks), "keys": list(keys)}, conn
        )
        return {(row["task"], row["idempotency_key"]): int(row["id"]) for row in rows}

    # -- consuming ------------------------------------------------------------------

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
        none, limited queues no more than their limits allow (docs/flow_control.md)."""
        return (await self.claim_batch(
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
        next start is due. `finished`: the claim tokens of this worker's jobs whose
        handlers have ended and whose outcomes are not written yet; they no longer count
        against their queues' concurrency limits (a worker's own bookkeeping: a token of
        a job still running would let the limit be passed). `starting`: how many of the
        claimed jobs start at once, the first in claim order (None: all); the others are
        claimed ahead, `Claim.started` False, and start_many() starts them."""
        params = _claim_params(worker_id, limit, lease, queues, tasks, finished=finished,
                               starting=starting)
        statement = "job_claim_flow" if await self._flow_is_on() else "job_claim_many"
        plain = statement == "job_claim_many"
        for _ in range(3):
            if plain:
                params["after"] = self._claim_marks.after(params["queues"], params["tasks"])
            began = time.monotonic()
            try:
                columns, rows = await self._fetch_tuples(statement, params)
            except psycopg.errors.UniqueViolation:
                # jobs_one_running_per_key caught two claims racing for one key whose
                # jobs committed out of id order; the other claim won, try again.
                continue
            batch = _claim_batch(columns, rows)
            if plain:
                self._claim_marks.claimed(
                    params["queues"], params["tasks"], after=params["after"],
                    limit=params["limit"], claims=batch.claims,
                    seconds=time.monotonic() - began)
            return batch
        return ClaimBatch([])

    async def _flow_is_on(self) -> bool:
        """Whether any queue is paused or limited, re-read at most every
        FLOW_RECHECK_SECONDS. While it is off the plain claim runs, unchanged but for
        leaving such queues alone, so a setting made meanwhile is never overstepped."""
        now = time.monotonic()
        if now - self._flow_read_at >= FLOW_RECHECK_SECONDS:
            (row,) = await self._fetch("queue_flow_state")
            self._flow_controlled = row["controlled"] > 0
            self.limited_queues = frozenset(row["limited"])
            self.rated_queues = frozenset(row["rated"])
            self._flow_read_at = now
        return self._flow_controlled

    async def serves_a_rate(self, queues: Iterable[str] | None) -> bool:
        """Whether a claim of these queues (None: every queue) may take jobs of a
        rate-limited queue. The flow claim logs a start for each job it claims, so such
        jobs must start at once: claimed ahead, they would start later, in a burst that
        passes the rate (docs/flow_control.md)."""
        await self._flow_is_on()
        if queues is None:
            return bool(self.rated_queues)
        return not self.rated_queues.isdisjoint(queues)

    async def notify_freed(
        self, claims: Sequence[Claim], *, taken: Sequence[Claim] = ()
    ) -> None:
        """Tell the fleet that these claims' jobs have finished, for those of limited
        queues: room for one more in each, perhaps on another worker that sleeps until
        it hears so (the worker calls this after writing outcomes). `taken`: claims this
        worker made with that room (claim_batch's `finished`); a queue whose room they
        all took wakes nobody."""
        if not self.limited_queues:
            return
        room = Counter(c.queue for c in claims if c.queue in self.limited_queues)
        room.subtract(c.queue for c in taken)
        freed = sorted(queue for queue, count in room.items() if count > 0)
        if freed:
            await self._fetch("queue_notify_freed", {"channel": self.channel, "queues": freed})

    async def heartbeat(
        self, claim_or_claims: Claim | Iterable[Claim], *, lease: float = 30.0
    ) -> list[bool]:
        """Extend the leases of claims still held, in one statement. Returns, for each
        claim in order, whether it is still held; held claims get their new lease_until."""
        claims = as_claim_list(claim_or_claims)
        if not claims:
            return []
        params = {**held_params(claims), "lease": check_lease(lease)}
        rows = await self._fetch("job_heartbeat_many", params)
        extended = {row["position"]: row["lease_until"] for row in rows}
        for position, claim in enumerate(claims, start=1):
            if position in extended:
                claim.lease_until = extended[position]
        return _changed(rows, len(claims))

    async def claims_lost(self, claims: Iterable[Claim]) -> list[tuple[str | None, str | None]]:
        """For claims no longer held, in order: the job's status now (None when it is
        gone) and the worker that holds it, if another one does; what a worker says of
        a lost claim."""
        claims = list(claims)
        if not claims:
            return []
        rows = await self._fetch("job_claims_lost", held_params(claims))
        return [(row["status"], None if row["same_token"] else row["worker_id"])
                for row in rows]

    async def start_many(self, claims: Iterable[Claim], *, lease: float = 30.0) -> list[bool]:
        """Record the start of jobs claimed ahead (claim_batch's `starting`), in one
        statement, and renew their leases. Returns, for each claim in order, whether it
        is still held: a job cancelled or taken by another worker since its claim must
        not start (release() it)."""
        claims = list(claims)
        if not claims:
            return []
        params = {**held_params(claims), "lease": check_lease(lease)}
        rows = await self._fetch("job_start_many", params)
        started = {row["position"]: row["lease_until"] for row in rows}
        for position, claim in enumerate(claims, start=1):
            if position in started:
                claim.lease_until = started[position]
                claim.started = True
        return _changed(rows, len(claims))

    async def complete(self, claim: Claim, result: Any = None) -> bool:
        """Mark the job done. False: this claim was lost and nothing was changed."""
        return (await self.complete_many([(claim, result)]))[0]

    async def complete_many(self, outcomes: Iterable[tuple[Claim, Any]]) -> list[bool]:
        """Complete many jobs in one statement, each row fenced by its own token."""
        outcomes = list(outcomes)
        if not outcomes:
            return []
        params = self._complete_params(outcomes)
        return await self._changed_positions("job_complete_many", params, len(outcomes))

    @staticmethod
    def _complete_params(outcomes: Sequence[tuple[Claim, Any]]) -> dict[str, Any]:
        return {
            **held_params([claim for claim, _ in outcomes]),
            "results": [
                None if result is None else to_json(result, f"result of job {claim.id}")
                for claim, result in outcomes
            ],
        }

    async def fail(
        self, claim: Claim, error: BaseException | str, *, retry_in: float | None = None
    ) -> bool:
        """Record a failed attempt: retry later, or `failed` after the last attempt.
        False: this claim was lost and nothing was changed."""
        return (await self.fail_many([(claim, error, retry_in)]))[0]

    async def fail_many(
        self, failures: Iterable[tuple[Claim, BaseException | str, float | None]]
    ) -> list[bool]:
        """Fail many jobs in one statement, each row fenced by its own token."""
        failures = list(failures)
        if not failures:
            return []
        claims = [claim for claim, _, _ in failures]
        params = {
            **held_params(claims),
            "errors": [error_json(error) for _, error, _ in failures],
            "retry_in": [retry_delay(c.attempts, retry_in) for c, _, retry_in in failures],
        }
        return await self._changed_positions("job_fail_many", params, len(claims))

    async def release(self, claim: Claim) -> bool:
        """Hand a job back to pending without spending an attempt (a worker shutting
        down). False: this claim was lost. A job cancelled under this claim is let go
        (its key no longer waits for the lease): release a lost claim once its handler
        has stopped."""
        return (await self.release_many([claim]))[0]

    async def release_many(self, claims: Iterable[Claim]) -> list[bool]:
        """Release many jobs in one statement, each row fenced by its own token."""
        claims = list(claims)
        if not claims:
            return []
        return await self._changed_positions("job_release_many", held_params(claims),
                                             len(claims))

    # -- maintenance and inspection -------------------------------------------------

    async def reap(self) -> int:
        """Expired leases go back to pending, or to failed with no attempts left."""
        return len(await self._fetch("job_reap"))

    async def prune(self, *, retention: float, limit: int = 10_000) -> int:
        """Delete done, failed and cancelled jobs that finished more than `retention`
        seconds ago, at most `limit` of them; returns how many went."""
        params = {"retention": check_seconds("retention", retention), "limit": check_limit(limit)}
        return len(await self._fetch("job_prune", params))

    # The history retention mode (docs/retention.md): done jobs move to jobs_history,
    # partitioned by the time they finished, and leave it a partition at a time.

    async def archive(self, *, after: float, partition: float, limit: int = 10_000) -> int:
        """Move done jobs without an explicit idempotency key that finished more than
        `after` seconds ago from jobs to jobs_history, at most `limit` of them, oldest
        first; creates the partitions (`partition` seconds wide, from midnight UTC) they
        need. Returns how many moved. Jobs locked by someone else are skipped, never
        waited for; two callers at once never move a job twice."""
        params = {
            "after": check_seconds("after", after),
            "width": check_partition_width("partition", partition),
            "limit": check_limit(limit),
        }
        async with self._transaction(None) as conn:
            await self._fetch("history_lock_share", None, conn)
            (ready,) = await self._fetch("history_prepare", params, conn)
            bins = ready["bins"]
            if not bins:
                return 0
            width = dt.timedelta(seconds=params["width"])
            overlap = {"bins": bins, "width": params["width"]}
            covering = await self._fetch("history_partitions_overlapping", overlap, conn)
            if history.gaps(bins, width, [(p["from_at"], p["to_at"]) for p in covering]):
                await self._fetch("history_lock_create", None, conn)
                # A fresh look, under the lock: another mover may have created them.
                covering = await self._fetch("history_partitions_overlapping", overlap, conn)
                covered = [(p["from_at"], p["to_at"]) for p in covering]
                for from_at, to_at in history.gaps(bins, width, covered):
                    name = history.partition_name(from_at, to_at)
                    for ddl in ("history_partition_create_ddl", "history_partition_attach_ddl"):
                        statement = history.partition_ddl(self._sql[ddl], name, from_at, to_at)
                        await conn.execute(statement, prepare=False)
            (row,) = await self._fetch("job_archive", {**params, "bins": bins}, conn)
            return int(row["moved"])

    async def drop_history(self, *, retention: float) -> int:
        """Drop the partitions of jobs_history whose whole range ended more than
        `retention` seconds ago; returns how many went. A partition whose lock is not
        granted within history_lock_wait seconds (a reader holds the table) is left for
        the next call, as are the later ones."""
        params = {
            "retention": check_seconds("retention", retention),
            "lock_wait": check_seconds("history_lock_wait", self.history_lock_wait,
                                       positive=True),
        }
        # A first look without the lock, which holds up every mover while it is waited
        # for: most runs find nothing to drop.
        if not await self._fetch("history_partitions_expired", params):
            return 0
        dropped = 0
        try:
            async with self._transaction(None) as conn:
                await self._fetch("history_lock_wait_set", params, conn)
                await self._fetch("history_lock_take", None, conn)
                for row in await self._fetch("history_partitions_expired", params, conn):
                    statement = history.partition_ddl(
                        self._sql["history_partition_drop_ddl"], row["name"]
                    )
                    try:
                        async with conn.transaction():
                            await conn.execute(statement, prepare=False)
                    except psycopg.errors.LockNotAvailable:
                        break  # this one and the later ones wait for the next call
                    dropped += 1
        except psycopg.errors.LockNotAvailable:
            return 0  # a mover held the history lock past history_lock_wait
        return dropped

    async def vacuum(self, *, min_dead: int = 0, min_dead_share: float = 0.0) -> int:
        """VACUUM the jobs table once the statistics count at least `min_dead` dead row
        versions in it, and at least `min_dead_share` times its live ones (docs/
        scaling.md, "The claim's dead head"). Returns that count when the VACUUM ran;
        0 when there were fewer, or when another VACUUM or DDL held the table (skipped,
        never waited for). Raises ConfigurationError when this role may not vacuum the
        table, before trying."""
        min_dead = check_int4("min_dead", min_dead, minimum=0)
        if (isinstance(min_dead_share, bool) or not isinstance(min_dead_share, int | float)
                or not 0 <= min_dead_share < math.inf):
            raise InvalidArgument(
                f"min_dead_share must be a finite number >= 0, got {min_dead_share!r}"
            )
        (state,) = await self._fetch("jobs_vacuum_state", {"schema": self.schema})
        if not state["allowed"]:
            raise ConfigurationError(
                f"role {state['role']!r} may not VACUUM {self.schema}.jobs: "
                f"it needs to own the table or the database, or, from PostgreSQL 17, "
                f"GRANT MAINTAIN ON {self.schema}.jobs"
            )
        dead = int(state["dead"])
        if dead == 0 or dead < min_dead or dead < min_dead_share * int(state["live"]):
            return 0
        skipped: list[str] = []

        def note(notice: psycopg.errors.Diagnostic) -> None:
            if notice.sqlstate == "55P03":  # lock_not_available: SKIP_LOCKED skipped it
                skipped.append(notice.message_primary or "")

        async with self._connection() as pooled:
            pooled.add_notice_handler(note)
            try:
                # Not prepared: a utility statement, run every few seconds at most.
                await pooled.execute(self._sql["jobs_vacuum"], prepare=False)
            finally:
                pooled.remove_notice_handler(note)
        return 0 if skipped else dead

    async def history_partitions(self) -> list[HistoryPartition]:
        """The partitions of jobs_history, oldest first, with their bounds and sizes."""
        rows = await self._fetch("history_partitions_list")
        return [HistoryPartition(**row) for row in rows]

    async def leader_try_acquire(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Try to become the maintenance leader on `conn`, a connection kept open for as
        long as the leadership should last (the lock dies with the session)."""
        rows = await self._fetch("leader_try_acquire", {"schema": self.schema}, conn)
        return bool(rows[0]["acquired"])

    async def ping(self, conn: AsyncCallerConnection | None = None) -> None:
        """One round trip on conn (or a pooled connection); raises if it fails."""
        await self._fetch("server_ping", None, conn)

    async def listen(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """LISTEN on conn (autocommit, kept open) for this schema's new jobs."""
        await self._fetch("channel_listen", None, conn)

    async def listen_ended(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """LISTEN on conn (autocommit, kept open) for the ends of awaited jobs."""
        await self._fetch("channel_listen_ended", None, conn)

    async def mark_awaited(self, job_id: int) -> bool:
        """Mark an unfinished job so that its end sends a NOTIFY (App.wait); False when
        it has ended already or is not in the jobs table."""
        return bool(await self._fetch("job_await", {"id": check_job_id(job_id)}))

    async def ended_among(
        self, job_ids: Iterable[int], conn: psycopg.AsyncConnection[Any] | None = None
    ) -> list[int]:
        """Which of these jobs are no longer unfinished in the jobs table (App.wait's
        fallback poll, in case a NOTIFY was missed)."""
        ids = [check_job_id(job_id) for job_id in job_ids]
        rows = await self._fetch("job_ended_among", {"ids": ids}, conn)
        return [int(row["id"]) for row in rows]

    async def cancel(self, job_id: int) -> bool:
        """Cancel a pending or running job; a running holder loses its claim, but the
        job's key stays held until that holder releases it or its lease runs out."""
        return await self.act("cancel", job_id)

    async def retry(self, job_id: int) -> bool:
        """Send a failed or cancelled job back to pending with a fresh set of attempts;
        a cancelled job whose holder's lease has not run out waits for it first."""
        return await self.act("retry", job_id)

    async def dependencies(self, job_id: int) -> list[Dependency]:
        """The jobs this job waits for (relation "parent") and those that wait for it
        ("child"), each with its status."""
        rows = await self._fetch("job_dependencies_get", {"id": check_job_id(job_id)})
        return [Dependency(**row) for row in rows]

    async def batch(self, batch_id: int) -> BatchInfo | None:
        """A batch's counts (Job.batch_id names a job's batch); None if there is none."""
        rows = await self._fetch("batch_get", {"id": check_job_id(batch_id)})
        return BatchInfo.from_row(rows[0]) if rows else None

    async def get(self, job_id: int) -> Job | None:
        """The job, wherever it is kept: in jobs, or moved to jobs_history (looked up
        there only when jobs does not have it); None when there is none."""
        params = {"id": check_job_id(job_id)}
        rows = await self._fetch("job_get", params)
        if not rows:
            rows = await self._fetch("job_get_archived", params)
        return Job.from_row(rows[0]) if rows else None

    async def jobs(
        self,
        *,
        status: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        key: str | None = None,
        text: str | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        limit: int = 100,
        conn: AsyncCallerConnection | None = None,
    ) -> list[Job]:
        """The newest jobs first, filtered as a JobFilter filters (status, queue, task,
        key, a substring of args or errors, finished or created since/until); with
        conn=, as the caller's transaction sees them (its own enqueues not yet committed
        included)."""
        check_status(status)
        check_filter("queue", queue)
        check_filter("task", task)
        job_filter = JobFilter(status=status, queue=queue, task=task, key=key, text=text,
                               since=since, until=until)
        params = {**job_filter.params(), "limit": check_limit(limit)}
        return [Job.from_row(row) for row in await self._fetch("job_list", params, conn)]

    async def stats(self) -> list[QueueStats]:
        """Per queue: jobs by status, expired leases, age of the oldest claimable job."""
        return [QueueStats.from_row(row) for row in await self._fetch("queue_stats")]

    # -- operator actions (the dashboard's and the command line's) -------------------
    # One job, or every job of a JobFilter up to the newest id the operator saw
    # counted (count_matching's `upto`): each an ordinary fenced statement that leaves
    # alone a job no longer in a state the action may change. The actions, their
    # states and statements are one table, actions.ACTIONS.

    async def act(self, action: str, job_id: int, *, priority: int | None = None) -> bool:
        """Do the operator action named `action` (retry, cancel, run_now, set_priority
        or delete; set_priority takes `priority`) to one job: False when the job is
        gone or not in a state the action may leave."""
        chosen = action_named(action)
        params = {"id": check_job_id(job_id), **self._action_params(chosen, priority)}
        try:
            changed = bool(await self._fetch(chosen.one, params))
        except psycopg.errors.UniqueViolation as error:
            raise _unique_refused(error, f"job {job_id}") from None
        if not changed and chosen.one_else is not None:
            changed = bool(await self._fetch(chosen.one_else, {"id": params["id"]}))
        if changed and chosen.event is not None and self.events.active:
            self.events.emit(Event(chosen.event, job_id=job_id))
        return changed

    async def act_matching(
        self, action: str, job_filter: JobFilter, *, upto: int, priority: int | None = None
    ) -> int:
        """Do the operator action named `action` to every job of the filter with an id
        up to `upto` (count_matching's) that is in a state the action may leave; the
        number of jobs changed."""
        chosen = action_named(action)
        params = {**self._matching(job_filter, upto), **self._action_params(chosen, priority)}
        try:
            rows = await self._fetch(chosen.matching, params)
        except psycopg.errors.UniqueViolation as error:
            raise _unique_refused(error, "a job of the filter") from None
        return int(rows[0]["changed"]) if chosen.wakes else len(rows)

    def _action_params(self, action: Action, priority: int | None) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if action.takes_priority:
            # None is refused by check_int4, with the message the API always gave.
            params["priority"] = check_int4("priority", cast(int, priority))
        elif priority is not None:
            raise InvalidArgument(f"{action.name} takes no priority")
        if action.wakes:
            params["channel"] = self.channel
        return params

    async def delete(self, job_id: int) -> bool:
        """Delete a job that is not running (a running one would lose its holder's work
        without telling it: cancel it first), or a done job moved to jobs_history."""
        return await self.act("delete", job_id)

    async def run_now(self, job_id: int) -> bool:
        """Make a scheduled pending job due now and wake its queue's workers."""
        return await self.act("run_now", job_id)

    async def set_priority(self, job_id: int, priority: int) -> bool:
        """Change a pending job's priority (higher runs first)."""
        return await self.act("set_priority", job_id, priority=priority)

    async def count_matching(self, action: str, job_filter: JobFilter) -> tuple[int, int]:
        """How many jobs of the filter `action` would change now, and the newest of
        their ids: pass it as `upto` to the *_matching action to act on exactly those
        (and older ones that entered the filter since, never newer ones)."""
        params = {**self._filter_params(job_filter),
                  "statuses": list(action_named(action).statuses)}
        (row,) = await self._fetch("job_count_matching", params)
        return int(row["count"]), int(row["upto"] or 0)

    async def retry_matching(self, job_filter: JobFilter, *, upto: int) -> int:
        """Send the failed and cancelled jobs of the filter back to pending."""
        return await self.act_matching("retry", job_filter, upto=upto)

    async def cancel_matching(self, job_filter: JobFilter, *, upto: int) -> int:
        """Cancel the pending, running and waiting jobs of the filter."""
        return await self.act_matching("cancel", job_filter, upto=upto)

    async def delete_matching(self, job_filter: JobFilter, *, upto: int) -> int:
        """Delete the jobs of the filter that are not running."""
        return await self.act_matching("delete", job_filter, upto=upto)

    async def run_now_matching(self, job_filter: JobFilter, *, upto: int) -> int:
        """Make the scheduled pending jobs of the filter due now."""
        return await self.act_matching("run_now", job_filter, upto=upto)

    # -- flow control (docs/flow_control.md) ----------------------------------------

    async def pause(self, queue: str) -> None:
        """Claims that begin from now on take none of this queue's jobs; running ones
        finish. Stays paused, across restarts, until resume()."""
        await self._set_paused(queue, True)

    async def resume(self, queue: str) -> None:
        """Let the queue's jobs be claimed again, and wake its workers."""
        await self._set_paused(queue, False)

    async def _set_paused(self, queue: str, paused: bool) -> None:
        params = {"name": check_name("queue", queue), "paused": paused,
                  "channel": self.channel}
        await self._fetch("queue_set_paused", params)
        self._flow_read_at = -math.inf

    async def set_concurrency(self, queue: str, concurrency: int | None) -> QueueSettings:
        """At most `concurrency` of the queue's jobs held at once, fleet-wide (None: no
        limit). Takes effect for the claims that begin after it, without restarts."""
        return await self._set_limits(
            queue, set_concurrency=True, concurrency=check_concurrency(concurrency)
        )

    async def set_rate(self, queue: str, rate: object) -> QueueSettings:
        """At most so many starts in any sliding window: "100/s", "10/min", a
        `(limit, seconds)` pair or a `Rate`; None removes the limit."""
        return await self._set_limits(queue, set_rate=True, rate=parse_rate(rate))

    async def set_key_concurrency(
        self, queue: str, concurrency: int | None
    ) -> QueueSettings:
        """At most `concurrency` jobs of each limit key (enqueue's `limit_key=`) of the
        queue held at once, fleet-wide; None removes the limit."""
        return await self._set_limits(
            queue, set_key_concurrency=True, key_concurrency=check_concurrency(concurrency)
        )

    async def set_key_rate(self, queue: str, rate: object) -> QueueSettings:
        """At most so many starts of each limit key of the queue per sliding window."""
        return await self._set_limits(queue, set_key_rate=True, key_rate=parse_rate(rate))

    async def _set_limits(
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
        await self._fetch("queue_set_limits", params)
        self._flow_read_at = -math.inf
        (settings,) = await self.queue_settings(queue)
        return settings

    async def apply_limits(
        self, limits: Mapping[str, tuple[int | None, Rate | None]]
    ) -> None:
        """Write the limits an App declares (App.limit), each only where named: what a
        worker does as it starts, so that code wins then (docs/flow_control.md)."""
        for name, (concurrency, rate) in limits.items():
            if concurrency is not None:
                await self.set_concurrency(name, concurrency)
            if rate is not None:
                await self.set_rate(name, rate)

    async def set_aging(
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
        await self._fetch("queue_set_aging", params)
        (settings,) = await self.queue_settings(queue)
        return settings

    async def age_priorities(self, *, limit: int = 10_000) -> int:
        """One aging pass (the leader runs it): how many jobs gained priority."""
        rows = await self._fetch("job_age_priority", {"limit": check_limit(limit)})
        return int(rows[0]["aged"])

    async def queue_settings(self, queue: str | None = None) -> list[QueueSettings]:
        """Every queue that has a setting or a pending or held job (or just `queue`),
        with its settings and how many of its jobs are held now."""
        name = None if queue is None else check_name("queue", queue)
        rows = await self._fetch("queue_settings_list", {"name": name})
        return [QueueSettings.from_row(row) for row in rows]

    async def set_priority_matching(
        self, job_filter: JobFilter, priority: int, *, upto: int
    ) -> int:
        """Change the priority of the pending jobs of the filter."""
        return await self.act_matching("set_priority", job_filter, upto=upto,
                                       priority=priority)

    def _matching(self, job_filter: JobFilter, upto: int) -> dict[str, Any]:
        return {**self._filter_params(job_filter), "upto": check_upto(upto)}

    @staticmethod
    def _filter_params(job_filter: JobFilter) -> dict[str, Any]:
        if not isinstance(job_filter, JobFilter):
            raise InvalidArgument(
                f"job_filter must be a pgbaton.JobFilter, got {type(job_filter).__name__}"
            )
        return job_filter.params()
