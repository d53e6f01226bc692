"""The ceiling: psycopg 3 loops running the bare SKIP LOCKED claim and fenced completion,
and nothing else.

The table is a minimal jobs table (plus an args column so that jobs carry the same payload as
everywhere else). A loop claims with the bare SKIP LOCKED CTE (LIMIT 1 or LIMIT 100, FOR UPDATE
SKIP LOCKED), calls the same no-op handler for each job, then completes the whole batch
in one statement fenced by each job's claim token. New jobs send one NOTIFY per
inserting statement (as pgbaton's trigger does) so that an idle loop wakes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from typing import Any, ClassVar

import psycopg

from ..common import PROBE
from .base import ALL_CASES, System, cancel_quietly

CHANNEL = "raw_jobs"
POLL_SECONDS = 1.0
BATCH = 100  # the batched loops' largest claim
# The most loops (connections) raw100 opens: the server allows 100 connections.
MAX_BATCH_LOOPS = 32
FILL_CHUNK = 1_000_000

SCHEMA_SQL = f"""
CREATE TABLE jobs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status      text        NOT NULL DEFAULT 'pending',
    args        jsonb       NOT NULL DEFAULT '{{}}',
    claim_token uuid,
    lease_until timestamptz,
    attempts    integer     NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_claimable ON jobs (created_at, id) WHERE status = 'pending';
CREATE FUNCTION jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_notify AFTER INSERT ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify();
"""

# The bare SKIP LOCKED claim, with the LIMIT as a parameter and the args returned.
CLAIM = """
WITH candidate AS (
  SELECT id
  FROM jobs
  WHERE status = 'pending'
  ORDER BY created_at, id
  LIMIT %(limit)s
  FOR UPDATE SKIP LOCKED
)
UPDATE jobs AS j
SET status      = 'running',
    claim_token = gen_random_uuid(),
    lease_until = now() + interval '30 seconds',
    attempts    = j.attempts + 1
FROM candidate AS c
WHERE j.id = c.id
RETURNING j.id, j.claim_token, j.attempts, j.args
"""

# The token-fenced completion, for a whole batch in one statement.
COMPLETE = """
UPDATE jobs AS j
SET status = 'done', claim_token = NULL, lease_until = NULL
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS held(id, token)
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
"""

INSERT_ONE = "INSERT INTO jobs (args) VALUES (%s::jsonb)"
# The bulk ceiling: COPY, psycopg's fastest way in (about twice the rows per second of
# one INSERT ... SELECT FROM unnest(%s::jsonb[]) on this machine).
COPY_MANY = "COPY jobs (args) FROM STDIN"


async def noop(seq: int) -> None:
    PROBE.hit(seq)


class RawSQL(System):
    role = "ceiling"
    busy_poll: ClassVar[bool] = False
    settings = (
        "no library: the bare SKIP LOCKED claim CTE and fenced completion on a minimal jobs "
        "table with its partial index; LISTEN/NOTIFY wake-up with a 1 s poll fallback; psycopg "
        "prepares the statements after 5 uses (its default); one INSERT per single "
        "enqueue, COPY for bulk."
    )
    unfinished_sql = "SELECT count(*) FROM jobs WHERE status IN ('pending', 'running')"

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.producer: psycopg.AsyncConnection[Any] | None = None
        self.claimer: psycopg.AsyncConnection[Any] | None = None
        self._stopping = asyncio.Event()
        self._notified = asyncio.Event()
        self._generation = 0
        self._loops: list[asyncio.Task[None]] = []
        self._listener: asyncio.Task[None] | None = None

    async def install(self) -> None:
        assert self.db is not None
        await self.db.execute(SCHEMA_SQL)  # type: ignore[arg-type]

    async def connect(self) -> None:
        self.producer = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)

    async def close(self) -> None:
        for conn in (self.producer, self.claimer):
            if conn is not None:
                await conn.close()
        await super().close()

    async def enqueue_one(self, seq: int) -> None:
        assert self.producer is not None
        await self.producer.execute(INSERT_ONE, (json.dumps({"seq": seq}),))

    async def enqueue_batch(self, seqs: Sequence[int]) -> None:
        assert self.producer is not None
        async with self.producer.cursor() as cursor, cursor.copy(COPY_MANY) as copy:
            for seq in seqs:
                await copy.write_row((json.dumps({"seq": seq}),))

    # -- the worker: N loops, each on its own connection --------------------------------

    def loop_limits(self, concurrency: int) -> list[int]:
        """The LIMIT of each claim loop for "concurrency N": one entry per loop."""
        return [1] * concurrency

    async def start_worker(self, concurrency: int) -> None:
        self._stopping.clear()
        if not self.busy_poll:
            listening = asyncio.Event()
            self._listener = asyncio.create_task(self._listen(listening), name="raw listener")
            await listening.wait()
        self._loops = [
            asyncio.create_task(self._loop(limit), name=f"raw loop {n}")
            for n, limit in enumerate(self.loop_limits(concurrency))
        ]
        self.worker_task = asyncio.create_task(self._supervise(), name="raw worker")

    async def _supervise(self) -> None:
        await asyncio.gather(*self._loops)

    async def stop_worker(self) -> None:
        self._stopping.set()
        self._wake()
        await asyncio.gather(*self._loops)
        await cancel_quietly(self._listener)

    def _wake(self) -> None:
        self._generation += 1
        event, self._notified = self._notified, asyncio.Event()
        event.set()

    async def _listen(self, listening: asyncio.Event) -> None:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            await conn.execute(f"LISTEN {CHANNEL}")  # type: ignore[arg-type]
            listening.set()
            async for _ in conn.notifies():
                self._wake()

    async def _loop(self, limit: int) -> None:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            while not self._stopping.is_set():
                generation, notified = self._generation, self._notified
                cursor = await conn.execute(CLAIM, {"limit": limit})
                rows = await cursor.fetchall()
                if not rows:
                    if self.busy_poll:
                        await asyncio.sleep(0)  # let the producer run, then claim again
                    elif generation == self._generation:
                        # Nothing arrived since the claim began: sleep until a NOTIFY.
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(notified.wait(), POLL_SECONDS)
                    continue
                for _id, _token, _attempts, args in rows:
                    await noop(args["seq"])
                done = await conn.execute(
                    COMPLETE,
                    {"ids": [row[0] for row in rows], "tokens": [row[1] for row in rows]},
                )
                if done.rowcount != len(rows):
                    raise RuntimeError(
                        f"fenced completion changed {done.rowcount} of {len(rows)} rows"
                    )

    # -- the claim-time case ------------------------------------------------------------

    async def fill_done(self, rows: int) -> None:
        assert self.db is not None
        for start in range(1, rows + 1, FILL_CHUNK):
            end = min(start + FILL_CHUNK - 1, rows)
            await self.db.execute(
                """
                INSERT INTO jobs (status, args, attempts, created_at)
                SELECT 'done', jsonb_build_object('seq', g), 1,
                       now() - make_interval(secs => (%(rows)s - g) / 1000.0)
                FROM generate_series(%(start)s::bigint, %(end)s::bigint) AS g
                """,
                {"start": start, "end": end, "rows": rows},
            )

    async def claim_one(self) -> int:
        if self.claimer is None:
            self.claimer = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        cursor = await self.claimer.execute(CLAIM, {"limit": 1})
        return len(await cursor.fetchall())

    async def table_bytes(self) -> int:
        assert self.db is not None
        cursor = await self.db.execute("SELECT pg_total_relation_size('jobs')")
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


class RawSQL1(RawSQL):
    name = "raw1"
    label = "raw SQL, LIMIT 1"
    # One connection per loop: 128 loops would pass the server's max_connections (100).
    max_concurrency = 64
    concurrency_meaning = (
        "N asyncio loops in one process, each on its own connection, each claiming "
        "LIMIT 1 and completing it before claiming again: at most N jobs in flight. Not "
        "run above N = 64: it needs N connections, and the server allows 100."
    )
    cases: ClassVar[frozenset[str]] = ALL_CASES


class RawSQL100(RawSQL):
    """The batched ceiling: the most the raw loop drains here."""

    name = "raw100"
    label = "raw SQL, LIMIT 100"
    concurrency_meaning = (
        f"min(N, {MAX_BATCH_LOOPS}) asyncio loops in one process, each on its own "
        "connection, each claiming LIMIT 100 and completing the batch in one fenced "
        f"statement: up to 100*min(N, {MAX_BATCH_LOOPS}) jobs in flight. It is the "
        "batched ceiling, not a worker bounded by N: on this 2-core machine more loops "
        "drained faster (their commits share WAL flushes), 32 loops of 100 more than 1, "
        "2, 4, 6 or 8, and more than 1 loop claiming 32 (benchmarks/README.md, \"The "
        f"raw-SQL ceiling\"). At most {MAX_BATCH_LOOPS} loops: one connection each, and "
        "the server allows 100."
    )
    # Enqueue, latency and claim time do not depend on the claim's LIMIT: raw1 measures them.
    cases: ClassVar[frozenset[str]] = frozenset({"drain"})

    def loop_limits(self, concurrency: int) -> list[int]:
        return [BATCH] * min(concurrency, MAX_BATCH_LOOPS)


class RawSQLInFlight(RawSQL):
    """Batched claims with at most N jobs in flight: the raw-SQL counterpart of a worker
    that claims only for its N free slots (pgbaton at its defaults)."""

    name = "raw100n"
    label = "raw SQL, LIMIT \u2264 100, N in flight"
    concurrency_meaning = (
        "ceil(N/100) asyncio loops in one process, each on its own connection, claiming "
        "N jobs between them (at most LIMIT 100 each) and completing each batch in one "
        "fenced statement: at most N jobs in flight, as N handler slots would hold. At "
        "N = 1 it is raw SQL, LIMIT 1."
    )
    cases: ClassVar[frozenset[str]] = frozenset({"drain"})

    def loop_limits(self, concurrency: int) -> list[int]:
        loops = -(-concurrency // BATCH)
        return [concurrency // loops + (n < concurrency % loops) for n in range(loops)]


class RawSQLBusyPoll(RawSQL):
    """The latency floor of a polling design: no LISTEN, no pause, one core spent on it."""

    name = "rawpoll"
    label = "raw SQL, busy poll"
    busy_poll = True

    def loop_limits(self, concurrency: int) -> list[int]:
        return [1]

    concurrency_meaning = (
        "one asyncio loop on one connection, whatever N: it claims LIMIT 1 again the "
        "moment a claim comes back empty (no LISTEN, no sleep), so it keeps a core and a "
        "server backend busy while idle. Not a way to run a queue: the floor for latency."
    )
    cases: ClassVar[frozenset[str]] = frozenset({"latency"})
