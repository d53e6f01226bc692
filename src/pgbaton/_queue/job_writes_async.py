"""How an enqueue's jobs are written (async source): its statements, on a pooled
connection or the caller's.

One job (job_insert; the idempotent and the unique inserts, run again or looked up
when the job that blocked them committed after their snapshot), a batch by one INSERT
or by COPY (and, when a COPY's connection was lost, whether it was written), unique
jobs one at a time in one transaction, and a graph of jobs with their edges and batch.
The enqueue family (the enqueueing part) checks the arguments, builds the parameters
and holds the enqueue hook's span around these.
"""

from __future__ import annotations

import asyncio  # sync: skip (its twin sleeps with time.sleep)
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

import psycopg
from psycopg.adapt import PyFormat
from psycopg.rows import dict_row

from .. import dependencies
from .._copy_rows import CopyRows
from .._queue_base import unique_enqueued
from ..errors import ConnectionFailed, IdempotencyKeyTaken, UniqueJobUnseen
from ..events import Event
from ..integrations.connections import AsyncCallerConnection
from ..models import Enqueued
from .core_async import AsyncQueueCore

# How long a COPY batch whose connection was lost waits for the backend that ran it to
# end, so that whether it was written can be told (_copy_outcome).
COPY_OUTCOME_WAIT_SECONDS = 5.0
# How many times a unique enqueue runs again when the job that blocked it was committed
# after its statement's snapshot (_insert_unique): each run needs a new such job.
UNIQUE_ATTEMPTS = 5


class AsyncJobWrites(AsyncQueueCore):
    """The statements that write jobs, for the enqueue family."""

    async def _insert_one(
        self, params: dict[str, Any], conn: AsyncCallerConnection | None
    ) -> int:
        if params["idempotency_key"] is None:
            job_id = int((await self._fetch("job_insert", params, conn))[0]["id"])
            self._enqueued(job_id, params["task"], params["queue"])
            return job_id
        return (await self._insert_idempotent(params, conn)).id

    def _enqueued(self, job_id: int, task: str, queue: str) -> None:
        if self.events.active:
            self.events.emit(Event("job.enqueued", job_id=job_id, task=task, queue=queue))

    async def _insert_unique(
        self, params: Mapping[str, Any], conn: AsyncCallerConnection | None
    ) -> Enqueued:
        """job_insert_unique, again while the job that blocked it is one this statement's
        snapshot could not see (committed since): each run sees what committed before it,
        so another only follows a job that ended or was written in the meantime."""
        for _ in range(UNIQUE_ATTEMPTS):
            rows = await self._fetch("job_insert_unique", params, conn)
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
            enqueued = unique_enqueued(rows[0])
            self._unique_enqueued(enqueued, job["task"], job["queue"])
            done.append(enqueued)
        return done

    async def _copy_many(
        self, rows: CopyRows, meta: str | None, conn: AsyncCallerConnection | None
    ) -> list[int]:
        """A large batch by COPY: the ids (and now()) first, then every row in one COPY
        statement, all or nothing. A savepoint in the caller's transaction; on a pooled
        connection a transaction only when some job's run_at is reckoned from now().
        On its own connection, a lost connection's outcome is found out (_copy_outcome)."""
        if conn is not None:
            async with self._transaction(conn) as held:
                return await self._copy_rows(rows, meta, held)
        sent: list[Any] = []
        try:
            if not rows.scheduled:
                # The table's defaults give every job the COPY's own now(), as the
                # INSERT's transaction gives it: two round trips fewer than BEGIN ... COMMIT.
                async with self._connection() as pooled:
                    return await self._copy_rows(rows, meta, pooled, sent)
            async with self._transaction(None) as held:
                return await self._copy_rows(rows, meta, held, sent)
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
        rows: CopyRows,
        meta: str | None,
        conn: psycopg.AsyncConnection[Any],
        sent: list[Any] | None = None,
    ) -> list[int]:
        """`sent`: filled with the reserved ids and the connection's backend pid."""
        (reserved,) = await self._fetch("job_ids_reserve", {"count": len(rows)}, conn)
        ids: list[int] = reserved["ids"] or list(
            range(reserved["first"], reserved["first"] + len(rows)))
        if sent is not None:
            sent[:] = [ids, conn.info.backend_pid]
        statement = self._sql["job_copy_scheduled" if rows.scheduled else "job_copy"]
        lines = 0
        async with conn.cursor() as cursor, cursor.copy(statement) as copy:
            # The text in the bytes psycopg sends for a str parameter (the INSERT's):
            # under SQL_ASCII that is UTF-8, where Copy.write(str) encodes to ASCII.
            dump = cursor.adapters.get_dumper(str, PyFormat.TEXT)(str, cursor).dump
            for text in rows.text(ids, meta, reserved["now"] if rows.scheduled else None):
                lines += text.count("\n")  # a field's newline is escaped: one a row
                data = dump(text)
                assert data is not None  # a dumper's None is a NULL
                await copy.write(data)
            if lines != len(ids):
                # Raised inside the COPY, which it fails: nothing is written.
                raise RuntimeError(f"the COPY text held {lines} rows for {len(ids)} jobs")
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
                if moved:  # done parents moved to jobs_history (docs/explanation/retention.md)
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
