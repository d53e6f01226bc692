"""The dashboard's reads: each a named statement of sql/dashboard.sql, on a pool of
its own whose statements time out, so that a slow filter is a clear error, not a hang."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import DictRow, dict_row

from .. import _sql
from ..dsn import CLIENT_ENCODING
from ..job_filter import JobFilter

Row = dict[str, Any]
Pool = psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]
STATEMENT_TIMEOUT_MS = 10_000
SAME_KEY_LIMIT = 20
# A state tab counts at most this many jobs ("10,000+"): a count reads what it counts.
STATE_COUNT_CAP = 10_000


@dataclass
class Overview:
    """What the overview page shows, read in one go."""

    queues: list[Row]
    minutes: dict[str, list[Row]]  # queue -> its minutes of the last hour
    workers: list[Row]
    leader: Row | None
    at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))


# How long a page waits for a connection before it is a 503.
CONNECTION_WAIT_SECONDS = 10.0


class Store:
    def __init__(self, dsn: str, schema: str, pool_size: int = 4) -> None:
        self.schema = schema
        self._sql = _sql.queries(schema)
        self._pool = Pool(
            dsn,
            connection_class=psycopg.AsyncConnection[DictRow],
            min_size=1,
            max_size=pool_size,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "application_name": "pgbaton dashboard",
                "client_encoding": CLIENT_ENCODING,
                # Filters are optional (`%(task)s IS NULL OR task = %(task)s`): a plan
                # made for the values at hand drops the absent ones and can use an
                # index for the present ones; a generic plan could do neither.
                # JIT compiles for the estimated cost of scanning a large table, and
                # cost a third of a second of the overview's counts on 10 million rows.
                "options": f"-c statement_timeout={STATEMENT_TIMEOUT_MS} "
                           "-c plan_cache_mode=force_custom_plan -c jit=off",
            },
            open=False,
        )
        self._opened = False
        # Finished minutes of the last hour, read once: a minute that is over does not
        # change, so each render reads only the minutes since the newest one kept.
        self._past_minutes: dict[dt.datetime, list[Row]] = {}

    async def open(self) -> None:
        # Not wait=True: a pool whose first wait timed out is open and cannot be opened
        # again, so a dashboard started while the database was away would answer 503
        # for good. Open, the pool keeps reconnecting; a page waits for a connection
        # (at most 10 s) and is a 503 while none comes.
        if not self._opened:
            await self._pool.open(wait=False)
            self._opened = True

    async def close(self) -> None:
        if self._opened:
            await self._pool.close()
            self._opened = False

    async def fetch(self, name: str, params: dict[str, Any] | None = None) -> list[Row]:
        await self.open()
        async with self._pool.connection(timeout=CONNECTION_WAIT_SECONDS) as conn:
            cursor = await conn.execute(self._sql[name], params)
            return await cursor.fetchall() if cursor.description else []

    async def fetch_plan(self, name: str, params: dict[str, Any]) -> list[str]:
        """EXPLAIN (ANALYZE, BUFFERS) of a named read, for benchmarks/dashboard_paging.py."""
        rows = await self.fetch_explained(name, params)
        return [str(next(iter(row.values()))) for row in rows]

    async def fetch_explained(self, name: str, params: dict[str, Any]) -> list[Row]:
        await self.open()
        async with self._pool.connection(timeout=CONNECTION_WAIT_SECONDS) as conn:
            cursor = await conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS) " + self._sql[name], params
            )
            return await cursor.fetchall()

    async def ping(self) -> bool:
        return bool(await self.fetch("dashboard_ping"))

    async def overview(self) -> Overview:
        queues = await self.fetch("dashboard_queue_counts")
        minutes: dict[str, list[Row]] = {}
        for row in await self.last_hour():
            minutes.setdefault(row["queue"], []).append(row)
        workers = await self.fetch("dashboard_workers")
        leaders = await self.fetch("dashboard_leader", {"schema": self.schema})
        return Overview(queues, minutes, workers, leaders[0] if leaders else None)

    async def last_hour(self) -> list[Row]:
        """The dashboard_minutes rows of the last hour, the finished minutes from memory."""
        since = max(self._past_minutes) + dt.timedelta(minutes=1) if self._past_minutes else None
        rows = await self.fetch("dashboard_minutes", {"since": since})
        fresh = []
        if rows:
            current = rows[0]["current_minute"]
            first = current - dt.timedelta(minutes=59)
            for minute in [m for m in self._past_minutes if m < first]:
                del self._past_minutes[minute]
            for row in rows:
                if row["minute"] < current:
                    self._past_minutes.setdefault(row["minute"], []).append(row)
                else:
                    fresh.append(row)
        kept = [row for minute in sorted(self._past_minutes) for row in self._past_minutes[minute]]
        return kept + fresh

    async def job_page(self, job_filter: JobFilter, before: int | None, limit: int) -> list[Row]:
        params = {**job_filter.params(), "before": before, "limit": limit}
        return await self.fetch("dashboard_job_page", params)

    async def state_counts(self, job_filter: JobFilter) -> dict[str, int]:
        """The job list's tabs: jobs of the filter, its status aside, per state (each
        at most STATE_COUNT_CAP)."""
        params = {**job_filter.params(), "status": None, "cap": STATE_COUNT_CAP}
        rows = await self.fetch("dashboard_state_counts", params)
        return {row["state"]: row["count"] for row in rows}

    async def workers(self, stale_after: float) -> list[Row]:
        """The workers table (worker_list): live ones first, then those not seen for
        stale_after seconds, each with the jobs it holds now."""
        return await self.fetch("worker_list", {"stale_after": stale_after})

    async def jobs_of_key(self, key: str, job_id: int) -> list[Row]:
        return await self.fetch(
            "dashboard_jobs_of_key", {"key": key, "id": job_id, "limit": SAME_KEY_LIMIT}
        )
