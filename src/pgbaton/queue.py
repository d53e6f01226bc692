# WARNING: generated from queue_async.py by tools/async_to_sync.py: DO NOT EDIT.
# Change queue_async.py and run `make generate`.
"""The data plane of pgbaton: enqueue, claim, lease and fence (generated sync twin).

Every method is one statement from sql/queries.sql. Claims run on autocommit
connections, so each claim is its own short transaction: claim, commit, then work.
"""

from __future__ import annotations

import threading
import datetime as dt
from collections.abc import Iterator, Iterable, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

import psycopg
import psycopg_pool
from psycopg.rows import DictRow, dict_row

from . import _database as database
from . import _sql
from ._base import (
    Claim,
    Job,
    QueueStats,
    as_claim_list,
    check_lease,
    check_limit,
    check_queues,
    check_seconds,
    check_status,
    check_text,
    error_json,
    held_params,
    is_connection_loss,
    job_params,
    many_job_params,
    notify_channel,
    retry_delay,
    to_json,
)
from .dsn import merge_options, redact_dsn, resolve_dsn
from .errors import ConnectionFailed, InvalidArgument
from .integrations.connections import psycopg_connection

Row = dict[str, Any]
Pool = psycopg_pool.ConnectionPool[psycopg.Connection[DictRow]]


def _changed(rows: list[Row], count: int) -> list[bool]:
    """For each input position of a *_many statement, whether its row was changed."""
    positions = {row["position"] for row in rows}
    return [position in positions for position in range(1, count + 1)]


class Queue:
    """A handle on one pgbaton schema in one database.

    Connections come from a small pool, opened on first use after checking that the
    server is reachable, new enough, and migrated to this version of pgbaton.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str = "pgbaton",
        pool_size: int = 4,
    ) -> None:
        self.dsn = resolve_dsn(dsn)
        self.schema = _sql.check_schema_name(schema)
        self.channel = notify_channel(schema)
        self._sql = _sql.queries(schema)
        self._pool_size = pool_size
        self._pool: Pool | None = None
        self._opening = threading.Lock()
        self._schema_checked = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {redact_dsn(self.dsn)} schema={self.schema!r}>"

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def open(self) -> None:
        """Check the server and schema and open the pool now, rather than on first use."""
        if self._pool is None:
            self._open_pool()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    # -- connections ----------------------------------------------------------------

    def connect(self, **kwargs: Any) -> psycopg.Connection[DictRow]:
        """A new connection of this queue's own (for LISTEN, or a caller's transaction)."""
        return database.connect(self.dsn, **kwargs)

    def _open_pool(self) -> Pool:
        with self._opening:
            if self._pool is None:
                conn = database.connect(self.dsn, autocommit=True)
                try:
                    database.check_schema(conn, self.schema)
                    self._schema_checked = True
                finally:
                    conn.close()
                pool = Pool(
                    self.dsn,
                    connection_class=psycopg.Connection[DictRow],
                    min_size=1,
                    max_size=self._pool_size,
                    kwargs={
                        "autocommit": True,
                        "row_factory": dict_row,
                        # Every statement here has one good plan whatever its values
                        # (tests/integration/test_claim_index.py checks the claim's), so
                        # plan each once per connection instead of at every call.
                        "options": merge_options(
                            self.dsn, "-c plan_cache_mode=force_generic_plan"
                        ),
                    },
                    open=False,
                )
                pool.open(wait=True, timeout=database.CONNECT_TIMEOUT_SECONDS)
                self._pool = pool
            return pool

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[DictRow]]:
        pool = self._pool or self._open_pool()
        try:
            with pool.connection(timeout=database.CONNECT_TIMEOUT_SECONDS) as conn:
                yield conn
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as error:
            if not is_connection_loss(error):
                raise
            # The server may have restarted: drop every dead idle connection now, so the
            # caller's retry gets a fresh one instead of the next corpse.
            pool.check()
            raise ConnectionFailed(
                f"lost the connection to PostgreSQL at {redact_dsn(self.dsn)}: {error}"
            ) from error

    def _fetch(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        conn: psycopg.Connection[Any] | None = None,
    ) -> list[Row]:
        query = self._sql[name]
        if conn is not None:
            conn = psycopg_connection(conn, psycopg.Connection)
            if not isinstance(conn, psycopg.Connection):
                raise InvalidArgument(
                    f"conn must be a psycopg.Connection, got {type(conn).__name__}"
                )
            if not self._schema_checked:
                database.check_schema(conn, self.schema)
                self._schema_checked = True
            with conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(query, params)
                return cursor.fetchall() if cursor.description else []
        with self._connection() as pooled:
            cursor = pooled.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    # -- schema ---------------------------------------------------------------------

    def migrate(self) -> list[int]:
        """Bring the schema up to date; returns the versions applied (none if current)."""
        conn = database.connect(self.dsn, autocommit=True)
        try:
            return database.migrate(conn, self.schema)
        finally:
            conn.close()

    def schema_version(self) -> int:
        conn = database.connect(self.dsn, autocommit=True)
        try:
            return database.schema_version(conn, self.schema)
        finally:
            conn.close()

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
        conn: psycopg.Connection[Any] | None = None,
    ) -> int:
        """Add one job; returns its id. With conn=, it is written in the caller's
        transaction. An idempotency key already present returns that job's id."""
        params = job_params(
            task, args, queue=queue, priority=priority, run_at=run_at, delay=delay,
            key=key, idempotency_key=idempotency_key, max_attempts=max_attempts,
        )
        if idempotency_key is None:
            return int((self._fetch("job_insert", params, conn))[0]["id"])
        rows = self._fetch("job_insert_idempotent", params, conn)
        if not rows:
            # The key was inserted by a transaction that committed after this
            # statement's snapshot: a fresh statement sees it.
            return (self._ids_by_idempotency_key([idempotency_key], conn))[
                idempotency_key
            ]
        return int(rows[0]["id"])

    def enqueue_many(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        conn: psycopg.Connection[Any] | None = None,
    ) -> list[int]:
        """Add many jobs in one statement; ids come back in input order."""
        params = many_job_params(jobs)
        if not params["count"]:
            return []
        (row,) = self._fetch("job_insert_many", {"jobs": params["jobs"]}, conn)
        ids: list[int | None] = row["ids"]
        if None not in ids:
            return cast(list[int], ids)
        keys: list[str] = row["idempotency_keys"]
        missing = [key for job_id, key in zip(ids, keys, strict=True) if job_id is None]
        existing = self._ids_by_idempotency_key(missing, conn)
        return [
            job_id if job_id is not None else existing[key]
            for job_id, key in zip(ids, keys, strict=True)
        ]

    def _ids_by_idempotency_key(
        self, keys: Sequence[str | None], conn: psycopg.Connection[Any] | None
    ) -> dict[str, int]:
        rows = self._fetch("job_ids_by_idempotency_key", {"keys": list(keys)}, conn)
        return {row["idempotency_key"]: int(row["id"]) for row in rows}

    # -- consuming ------------------------------------------------------------------

    def claim(
        self,
        worker_id: str,
        *,
        limit: int = 1,
        lease: float = 30.0,
        queues: Iterable[str] | None = None,
    ) -> list[Claim]:
        """Claim up to `limit` claimable jobs in one statement, committed at once."""
        if not isinstance(worker_id, str) or not worker_id:
            raise InvalidArgument(f"worker_id must be a non-empty string, got {worker_id!r}")
        check_text("worker_id", worker_id)
        params = {
            "worker_id": worker_id,
            "limit": check_limit(limit),
            "lease": check_lease(lease),
            "queues": check_queues(queues),
        }
        for _ in range(3):
            try:
                rows = self._fetch("job_claim_many", params)
            except psycopg.errors.UniqueViolation:
                # jobs_one_running_per_key caught two claims racing for one key whose
                # jobs committed out of id order; the other claim won, try again.
                continue
            return [Claim.from_row(row) for row in rows]
        return []

    def heartbeat(
        self, claim_or_claims: Claim | Iterable[Claim], *, lease: float = 30.0
    ) -> list[bool]:
        """Extend the leases of claims still held, in one statement. Returns, for each
        claim in order, whether it is still held; held claims get their new lease_until."""
        claims = as_claim_list(claim_or_claims)
        if not claims:
            return []
        params = {**held_params(claims), "lease": check_lease(lease)}
        rows = self._fetch("job_heartbeat_many", params)
        extended = {row["position"]: row["lease_until"] for row in rows}
        for position, claim in enumerate(claims, start=1):
            if position in extended:
                claim.lease_until = extended[position]
        return _changed(rows, len(claims))

    def complete(self, claim: Claim, result: Any = None) -> bool:
        """Mark the job done. False: this claim was lost and nothing was changed."""
        return (self.complete_many([(claim, result)]))[0]

    def complete_many(self, outcomes: Iterable[tuple[Claim, Any]]) -> list[bool]:
        """Complete many jobs in one statement, each row fenced by its own token."""
        outcomes = list(outcomes)
        if not outcomes:
            return []
        claims = [claim for claim, _ in outcomes]
        params = {
            **held_params(claims),
            "results": [
                None if result is None else to_json(result, f"result of job {claim.id}")
                for claim, result in outcomes
            ],
        }
        return _changed(self._fetch("job_complete_many", params), len(claims))

    def fail(
        self, claim: Claim, error: BaseException | str, *, retry_in: float | None = None
    ) -> bool:
        """Record a failed attempt: retry later, or `failed` after the last attempt.
        False: this claim was lost and nothing was changed."""
        return (self.fail_many([(claim, error, retry_in)]))[0]

    def fail_many(
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
        return _changed(self._fetch("job_fail_many", params), len(claims))

    def release(self, claim: Claim) -> bool:
        """Hand a job back to pending without spending an attempt (a worker shutting
        down). False: this claim was lost and nothing was changed."""
        return (self.release_many([claim]))[0]

    def release_many(self, claims: Iterable[Claim]) -> list[bool]:
        """Release many jobs in one statement, each row fenced by its own token."""
        claims = list(claims)
        if not claims:
            return []
        rows = self._fetch("job_release_many", held_params(claims))
        return _changed(rows, len(claims))

    # -- maintenance and inspection -------------------------------------------------

    def reap(self) -> int:
        """Expired leases go back to pending, or to failed with no attempts left."""
        return len(self._fetch("job_reap"))

    def prune(self, *, retention: float, limit: int = 10_000) -> int:
        """Delete done, failed and cancelled jobs that finished more than `retention`
        seconds ago, at most `limit` of them; returns how many went."""
        params = {"retention": check_seconds("retention", retention), "limit": check_limit(limit)}
        return len(self._fetch("job_prune", params))

    def leader_try_acquire(self, conn: psycopg.Connection[Any]) -> bool:
        """Try to become the maintenance leader on `conn`, a connection kept open for as
        long as the leadership should last (the lock dies with the session)."""
        rows = self._fetch("leader_try_acquire", {"schema": self.schema}, conn)
        return bool(rows[0]["acquired"])

    def cancel(self, job_id: int) -> bool:
        """Cancel a pending or running job; a running holder loses its claim."""
        return bool(self._fetch("job_cancel", {"id": job_id}))

    def retry(self, job_id: int) -> bool:
        """Send a failed or cancelled job back to pending with a fresh set of attempts."""
        return bool(self._fetch("job_retry", {"id": job_id}))

    def get(self, job_id: int) -> Job | None:
        rows = self._fetch("job_get", {"id": job_id})
        return Job.from_row(rows[0]) if rows else None

    def jobs(
        self,
        *,
        status: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 100,
    ) -> list[Job]:
        """The newest jobs first, filtered by status, queue and task."""
        params = {
            "status": check_status(status),
            "queue": queue,
            "task": task,
            "limit": check_limit(limit),
        }
        return [Job.from_row(row) for row in self._fetch("job_list", params)]

    def stats(self) -> list[QueueStats]:
        """Per queue: jobs by status, expired leases, age of the oldest claimable job."""
        return [QueueStats.from_row(row) for row in self._fetch("queue_stats")]
