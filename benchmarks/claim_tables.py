"""What each candidate table layout costs the server for a job's whole life, in raw SQL.

    python -m benchmarks.claim_tables --dsn DSN [--jobs 20000] [--rounds 3]

Each arm, in a schema of its own made afresh every round, runs a job's life with no
worker around it: enqueue (1,000 jobs a call), claims of 32 by one connection, each
claim's jobs completed in one statement fenced by (id, claim_token), until all are
done. Every job is in queue 'default', task 'noop', args {"payload": "x" * 230}.

Arms:

- `pgbaton`: pgbaton's migrated schema and statements: enqueue_many (job_ids_reserve,
  then COPY: job_copy), job_claim_many with the default worker's parameters (queues
  None, tasks ['noop'], starting = limit, no mark), job_complete_many (the row stays,
  `done`);
- `split-state`: a narrow job_state table holding the claim state (its claim index
  partial on pending, a lease index) beside a wide jobs table with the payload and
  outcome, whose only indexes are the primary key and a partial unique idempotency key,
  fillfactor 90: enqueue inserts both rows (one INSERT ... SELECT FROM unnest with a
  CTE), the claim updates job_state and joins the wide row, completion deletes the
  job_state row and updates the wide row (which can be HOT: no indexed column changes);
- `split-state, ff 100` and `split-state, ff 50`: the same with the wide table at the
  default fillfactor, and at 50;
- `split-state, keep state`: as `split-state`, but completion updates the job_state row
  to `done` instead of deleting it;
- `ready-table` (Solid Queue's shape): pgbaton's migrated jobs table with its two claim
  indexes (jobs_claimable, jobs_queue_claimable) dropped and a narrow jobs_ready(id,
  queue, priority, run_at) table to claim from instead: enqueue inserts both rows, the
  claim deletes from jobs_ready (SKIP LOCKED there) and marks the wide row running,
  completion is pgbaton's job_complete_many;
- `graphile-like`: row_shapes.py's table shaped like Graphile Worker's (a generated
  is_available column, one partial index) with its claim (no queue filter, as there)
  and its DELETE completion; enqueue by INSERT ... SELECT FROM unnest.

The parts arms take pgbaton's claim cost apart. Each is pgbaton's migrated schema with
pgbaton's enqueue (enqueue_many) and completion (job_complete_many); only the claim or
the table differs:

- `pgbaton table, simple claim`: SIMPLE_CLAIM, a claim as plain as split-state's (no
  queues subquery, task filter, key probes, marks, CASE arms, set_config; started_at =
  now()) on pgbaton's table, returning the columns job_claim_many returns;
- `simple claim, small args`: the same with args {} (a narrow row; the payload differs);
- `simple claim, no CHECKs`: the same with every CHECK constraint of jobs dropped;
- `simple claim, no triggers`: the same with every row trigger of jobs dropped;
- `simple claim, only the claim's indexes`: the same with every index of jobs dropped but
  jobs_pkey, jobs_claimable and jobs_held;
- `pgbaton claim, only the claim's indexes`: job_claim_many on that table (its key
  probes find no index; the jobs have no key), its worker's connection set to
  plan_cache_mode force_generic_plan: left to choose, the plan cache prices the generic
  plan (whose unused `named` arm has no jobs_queue_claimable left) above the custom
  ones and plans every claim afresh, which pgbaton's own claim (generic from the sixth
  claim on) does not; and jit off, as that generic plan's estimate (~830,000 at 20,000
  jobs) is past jit_above_cost and each claim would be JIT-compiled (1.5 s). Its plan
  (auto_explain, after the drain, first round) is printed with the figures;
- `simple claim, no disk wait`: SIMPLE_CLAIM with job_claim_many's set_config (its commit
  does not wait for the disk), which sets the simple claim's commit apart from the rest.

The raw arms enqueue by INSERT ... SELECT FROM unnest(jsonb[]), pgbaton (and the parts
arms) by COPY. Only job_claim_many and SIMPLE_CLAIM_NO_DISK_WAIT commit with
synchronous_commit off (their own set_config); every other statement of every arm waits
for the disk as the server is set.

Measured per phase (enqueue; claim and completion, which alternate): server CPU, from
/proc/PID/schedstat (the server must run on this machine): the enqueue phase's as
job_cost.reading() sums it over the database's backends, each claim's and each
completion's from the working backend's figure before and after the statement; WAL
from pg_current_wal_insert_lsn() before and after (a CHECKPOINT before each phase, so
each writes the full-page images of a fresh checkpoint; an ANALYZE of the arm's tables
between the two, unmeasured); heap rows written and index
entries inserted, counted from the WAL records themselves with pg_waldump (heap
INSERT/MULTI_INSERT tuples, UPDATE, HOT_UPDATE, DELETE, LOCK; btree INSERT_LEAF,
INSERT_POST and leaf-level SPLIT records, each of which inserts one entry; a heap LOCK
is a row lock: FOR UPDATE's, or an update's whose new version goes to another page),
read right after each phase, so the server's pg_wal must be readable here (--waldir). The
pg_stat_user_tables counters are read at the end of each arm as a check. The WAL and
the counts are the whole server's: nothing else may write meanwhile, and the CPU wants
a quiet machine. Give it a database of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import subprocess
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

import pgbaton
from benchmarks.job_cost import reading
from benchmarks.row_shapes import GRAPHILE_CLAIM, GRAPHILE_COMPLETE, GRAPHILE_LIKE
from pgbaton import _sql

BATCH = 1_000
CLAIM = 32
QUEUE = "default"
ARGS = {"payload": "x" * 230}
PG_WALDUMP = "/usr/lib/postgresql/15/bin/pg_waldump"

# The parts arms: pgbaton's schema, and of each its claim ("pgbaton": job_claim_many,
# "simple": SIMPLE_CLAIM, "simple, no disk wait": SIMPLE_CLAIM_NO_DISK_WAIT), the args
# enqueued, and what is dropped from jobs ("checks", "triggers", "indexes": all but
# CLAIM_INDEXES).
PARTS: dict[str, tuple[str, dict[str, str], str | None]] = {
    "pgbaton table, simple claim": ("simple", ARGS, None),
    "simple claim, small args": ("simple", {}, None),
    "simple claim, no CHECKs": ("simple", ARGS, "checks"),
    "simple claim, no triggers": ("simple", ARGS, "triggers"),
    "simple claim, only the claim's indexes": ("simple", ARGS, "indexes"),
    "pgbaton claim, only the claim's indexes": ("pgbaton", ARGS, "indexes"),
    "simple claim, no disk wait": ("simple, no disk wait", ARGS, None),
}
ARMS = ("pgbaton", "split-state", "split-state, ff 100", "split-state, ff 50",
        "split-state, keep state", "ready-table", "graphile-like", *PARTS)
SCHEMAS = {"pgbaton": "ct_pgbaton", "split-state": "ct_split",
           "split-state, ff 100": "ct_split_ff100", "split-state, ff 50": "ct_split_ff50",
           "split-state, keep state": "ct_split_keep", "ready-table": "ct_ready",
           "graphile-like": "rs_graphile",
           **{name: f"ct_parts_{number}" for number, name in enumerate(PARTS, 1)}}
# The wide table's fillfactor in the split-state arms: room on its pages for HOT updates.
FILLFACTORS = {"split-state": 90, "split-state, ff 100": 100, "split-state, ff 50": 50,
               "split-state, keep state": 90}

# -- split-state ------------------------------------------------------------------------

SPLIT_TABLES = """
DROP SCHEMA IF EXISTS {s} CASCADE;
CREATE SCHEMA {s};
CREATE TABLE {s}.jobs (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    queue text NOT NULL, task text NOT NULL, args jsonb NOT NULL DEFAULT '{{}}', meta jsonb,
    created_at timestamptz NOT NULL DEFAULT now(), idempotency_key text, result jsonb,
    errors jsonb NOT NULL DEFAULT '[]', status text NOT NULL DEFAULT 'pending',
    finished_at timestamptz
) WITH (fillfactor = {fillfactor});
CREATE UNIQUE INDEX jobs_idempotency_key_unique ON {s}.jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE TABLE {s}.job_state (
    id bigint PRIMARY KEY, queue text NOT NULL, priority int NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now(), key text, limit_key text,
    status text NOT NULL DEFAULT 'pending', claim_token uuid, lease_until timestamptz,
    attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL DEFAULT 5,
    holds smallint NOT NULL DEFAULT 0, started_at timestamptz, worker_id text);
CREATE INDEX job_state_claimable ON {s}.job_state (queue, priority DESC, run_at, id)
    WHERE status = 'pending';
CREATE INDEX job_state_held ON {s}.job_state (queue, lease_until)
    WHERE lease_until IS NOT NULL;
"""
SPLIT_ENQUEUE = """
WITH wide AS (
    INSERT INTO {s}.jobs (queue, task, args)
    SELECT %(queue)s, 'noop', a FROM unnest(%(args)s::jsonb[]) AS a
    RETURNING id, queue)
INSERT INTO {s}.job_state (id, queue) SELECT id, queue FROM wide"""
SPLIT_CLAIM = f"""
WITH c AS (
    SELECT id FROM {{s}}.job_state
    WHERE status = 'pending' AND queue = %(queue)s AND run_at <= now()
    ORDER BY priority DESC, run_at, id LIMIT {CLAIM} FOR UPDATE SKIP LOCKED),
s AS (
    UPDATE {{s}}.job_state SET status = 'running', claim_token = gen_random_uuid(),
        lease_until = now() + interval '30 s', attempts = attempts + 1,
        started_at = now(), worker_id = 'w'
    FROM c WHERE job_state.id = c.id RETURNING job_state.*)
SELECT s.*, j.task, j.args, j.meta FROM s JOIN {{s}}.jobs AS j USING (id)"""
SPLIT_COMPLETE = """
WITH gone AS (
    DELETE FROM {s}.job_state AS st
    USING unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(results)s::jsonb[])
        AS held(id, token, result)
    WHERE st.id = held.id AND st.claim_token = held.token AND st.status = 'running'
    RETURNING st.id, held.result)
UPDATE {s}.jobs AS j SET status = 'done', finished_at = now(), result = gone.result
FROM gone WHERE j.id = gone.id"""
SPLIT_COMPLETE_KEEP = """
WITH kept AS (
    UPDATE {s}.job_state AS st
    SET status = 'done', claim_token = NULL, lease_until = NULL
    FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(results)s::jsonb[])
        AS held(id, token, result)
    WHERE st.id = held.id AND st.claim_token = held.token AND st.status = 'running'
    RETURNING st.id, held.result)
UPDATE {s}.jobs AS j SET status = 'done', finished_at = now(), result = kept.result
FROM kept WHERE j.id = kept.id"""

# -- ready-table (on a migrated pgbaton schema) ----------------------------------------

READY_TABLE = """
DROP INDEX {s}.jobs_claimable;
DROP INDEX {s}.jobs_queue_claimable;
CREATE TABLE {s}.jobs_ready (
    id bigint PRIMARY KEY, queue text NOT NULL, priority int NOT NULL,
    run_at timestamptz NOT NULL);
CREATE INDEX jobs_ready_claim ON {s}.jobs_ready (queue, priority DESC, run_at, id);
"""
READY_ENQUEUE = """
WITH wide AS (
    INSERT INTO {s}.jobs (queue, task, args)
    SELECT %(queue)s, 'noop', a FROM unnest(%(args)s::jsonb[]) AS a
    RETURNING id, queue, priority, run_at)
INSERT INTO {s}.jobs_ready (id, queue, priority, run_at)
SELECT id, queue, priority, run_at FROM wide"""
READY_CLAIM = f"""
WITH c AS (
    SELECT id FROM {{s}}.jobs_ready
    WHERE queue = %(queue)s AND run_at <= now()
    ORDER BY priority DESC, run_at, id LIMIT {CLAIM} FOR UPDATE SKIP LOCKED),
r AS (DELETE FROM {{s}}.jobs_ready AS r USING c WHERE r.id = c.id RETURNING r.id)
UPDATE {{s}}.jobs AS j
SET status = 'running', claim_token = gen_random_uuid(),
    lease_until = now() + interval '30 s', attempts = j.attempts + 1,
    started_at = now(), worker_id = 'w'
FROM r WHERE j.id = r.id AND j.status = 'pending'
RETURNING j.id, j.claim_token, j.attempts, j.max_attempts, j.task, j.args, j.key,
          j.queue, j.priority, j.run_at, j.lease_until, j.idempotency_key, j.created_at,
          j.meta"""

# -- the parts arms (on a migrated pgbaton schema) --------------------------------------

SIMPLE_CLAIM = f"""
WITH c AS (
    SELECT id FROM {{s}}.jobs
    WHERE status = 'pending' AND run_at <= now()
    ORDER BY priority DESC, run_at, id LIMIT {CLAIM} FOR UPDATE SKIP LOCKED)
UPDATE {{s}}.jobs AS j
SET status = 'running', claim_token = gen_random_uuid(),
    lease_until = now() + interval '30 s', attempts = j.attempts + 1,
    started_at = now(), worker_id = 'w'
FROM c WHERE j.id = c.id
RETURNING j.id, j.claim_token, j.attempts, j.max_attempts, j.task, j.args, j.key,
          j.queue, j.priority, j.run_at, j.lease_until, j.idempotency_key, j.created_at,
          j.meta, j.started_at IS NOT NULL AS started"""
SIMPLE_CLAIM_NO_DISK_WAIT = SIMPLE_CLAIM.replace(
    "FROM c WHERE",
    "FROM c, (SELECT set_config('synchronous_commit', 'off', true)) AS no_disk_wait\nWHERE")
CLAIM_INDEXES = ("jobs_pkey", "jobs_claimable", "jobs_held")
# What a parts arm drops from its jobs table, listed from the catalogue: name, statement.
DROPPED = {
    "checks": """
        SELECT conname, format('ALTER TABLE %%I.jobs DROP CONSTRAINT %%I', %(s)s::text, conname)
        FROM pg_constraint
        WHERE conrelid = format('%%I.jobs', %(s)s::text)::regclass AND contype = 'c'
        ORDER BY conname""",
    "triggers": """
        SELECT tgname, format('DROP TRIGGER %%I ON %%I.jobs', tgname, %(s)s::text)
        FROM pg_trigger
        WHERE tgrelid = format('%%I.jobs', %(s)s::text)::regclass AND NOT tgisinternal
          AND tgtype & 1 = 1  -- TRIGGER_TYPE_ROW
        ORDER BY tgname""",
    "indexes": """
        SELECT c.relname, format('DROP INDEX %%I.%%I', %(s)s::text, c.relname)
        FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
        WHERE i.indrelid = format('%%I.jobs', %(s)s::text)::regclass
          AND c.relname <> ALL(%(keep)s::text[])
        ORDER BY c.relname""",
}

# -- graphile-like (row_shapes.py's table, claim and completion) ------------------------

GRAPHILE_ENQUEUE = """
INSERT INTO rs_graphile.jobs (queue, task, args)
SELECT %(queue)s, 'noop', a FROM unnest(%(args)s::jsonb[]) AS a"""

# -- measuring ----------------------------------------------------------------------------

INSERT_LSN = "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"
FLUSHED = "SELECT pg_current_wal_flush_lsn() - '0/0'::pg_lsn >= %s"
RELATIONS = """
SELECT c.relfilenode::text, c.relname FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind IN ('r', 'i') AND c.relfilenode <> 0"""
TABLES = """
SELECT format('%%I.%%I', schemaname, relname) FROM pg_stat_user_tables
WHERE schemaname = %s"""
TABLE_COUNTERS = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
FROM pg_stat_user_tables WHERE schemaname = %s AND n_tup_ins > 0 ORDER BY relname"""
BACKENDS_LEFT = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND backend_type = 'client backend'"""
RECORD = re.compile(
    r"rmgr: (?P<rmgr>\w+)\s+len \(rec/tot\):\s*(?P<rec>\d+)/\s*(?P<tot>\d+), .*?"
    r"lsn: (?P<hi>[0-9A-F]+)/(?P<lo>[0-9A-F]+), .*?desc: (?P<kind>[A-Z_0-9]+)(?P<rest>.*)")
REL = re.compile(r"blkref #0: rel \d+/\d+/(\d+)")
PHASES = ("enqueue", "claim", "complete")


@dataclass
class Run:
    """One arm's figures for one round: per phase, CPU µs and WAL bytes (totals), and
    what the WAL records wrote (per relation and kind)."""

    cpu: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    wal: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    fpi: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    writes: dict[str, Counter[str]] = field(
        default_factory=lambda: {phase: Counter() for phase in PHASES})
    counters: list[tuple[Any, ...]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    plan: list[str] = field(default_factory=list)


def count_records(waldir: str, windows: list[tuple[int, int, str]],
                  relations: dict[str, str], run: Run) -> None:
    """Count the heap and btree records in the windows (start and end LSN, phase) of WAL
    still on disk, each by the phase whose window holds it, and the bytes of page images
    in each."""
    starts = [w[0] for w in windows]
    text = subprocess.run(
        [PG_WALDUMP, "-p", waldir, "-s", lsn_text(starts[0]), "-e", lsn_text(windows[-1][1])],
        capture_output=True, text=True, check=False).stdout
    for line in text.splitlines():
        record = RECORD.match(line)
        if record is None:
            continue
        lsn = (int(record["hi"], 16) << 32) | int(record["lo"], 16)
        at = bisect_right(starts, lsn) - 1
        if at < 0 or lsn >= windows[at][1]:
            continue  # between statements: a running-xacts record, say
        phase = windows[at][2]
        run.fpi[phase] += int(record["tot"]) - int(record["rec"])
        rel = REL.search(record["rest"])
        name = relations.get(rel[1]) if rel else None
        if name is None:
            continue
        kind, rmgr, rest = record["kind"], record["rmgr"], record["rest"]
        if rmgr in ("Heap", "Heap2"):
            if kind.startswith("MULTI_INSERT"):
                tuples = re.search(r"(\d+) tuples", rest)
                run.writes[phase][f"{name} INSERT"] += int(tuples[1]) if tuples else 1
            elif kind.split("+")[0] in ("INSERT", "UPDATE", "HOT_UPDATE", "DELETE", "LOCK"):
                run.writes[phase][f"{name} {kind.split('+')[0]}"] += 1
        elif rmgr == "Btree" and (kind in ("INSERT_LEAF", "INSERT_POST") or (
                kind.startswith("SPLIT") and re.search(r"level:? 0\b", rest))):
            run.writes[phase][f"{name} entry"] += 1


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


async def lsn(reader: psycopg.AsyncConnection[Any]) -> int:
    row = await (await reader.execute(INSERT_LSN)).fetchone()
    assert row is not None
    return int(row[0])


async def flushed(reader: psycopg.AsyncConnection[Any], end: int) -> None:
    """Wait for the WAL up to `end` to be on disk (claims commit without waiting)."""
    for _ in range(100):
        row = await (await reader.execute(FLUSHED, [end])).fetchone()
        if row is not None and row[0]:
            return
        await asyncio.sleep(0.05)


def cpu_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


class Arm:
    """An arm's schema, made afresh, and its three phases' statements."""

    def __init__(self, name: str, dsn: str) -> None:
        self.name, self.dsn, self.schema = name, dsn, SCHEMAS[name]
        self.queue: pgbaton.AsyncQueue | None = None
        self.sql = _sql.queries(self.schema)
        self.dropped: list[str] = []  # what make() dropped (parts arms)
        self.plan: list[str] = []  # the claim's plan, when explain() was asked
        # A parts arm's claim, args and drop; every other arm's name stands for itself.
        self.claim_kind, self.args, self.drop_kind = PARTS.get(
            name, ("pgbaton" if name == "pgbaton" else name, ARGS, None))
        self.pgbaton_schema = name in ("pgbaton", "ready-table") or name in PARTS

    async def make(self, conn: psycopg.AsyncConnection[Any]) -> None:
        s = self.schema
        if self.pgbaton_schema:
            await conn.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
            self.queue = pgbaton.AsyncQueue(self.dsn, schema=s, pool_size=1)
            await self.queue.migrate()
            if self.name == "ready-table":
                await conn.execute(READY_TABLE.format(s=s))
            if self.drop_kind is not None:
                rows = await (await conn.execute(
                    DROPPED[self.drop_kind], {"s": s, "keep": list(CLAIM_INDEXES)})
                ).fetchall()
                if not rows:
                    raise RuntimeError(f"{self.name}: nothing to drop")
                for name, statement in rows:
                    await conn.execute(statement)
                    self.dropped.append(name)
        elif self.name == "graphile-like":
            await conn.execute(GRAPHILE_LIKE)
        else:
            await conn.execute(SPLIT_TABLES.format(s=s, fillfactor=FILLFACTORS[self.name]))

    async def drop(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self.queue is not None:
            await self.queue.close()
            self.queue = None
        await conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")

    async def enqueue(self, worker: psycopg.AsyncConnection[Any], count: int) -> None:
        if self.name == "pgbaton" or self.name in PARTS:
            assert self.queue is not None
            await self.queue.enqueue_many(
                [{"task": "noop", "args": self.args, "queue": QUEUE} for _ in range(count)])
            return
        statement = {"ready-table": READY_ENQUEUE, "graphile-like": GRAPHILE_ENQUEUE}.get(
            self.name, SPLIT_ENQUEUE)
        await worker.execute(statement.format(s=self.schema),
                             {"queue": QUEUE, "args": [json.dumps(ARGS)] * count},
                             prepare=True)

    async def claim(self, worker: psycopg.AsyncConnection[Any]) -> tuple[list[int], list[Any]]:
        if self.claim_kind == "pgbaton":
            cursor = await worker.execute(self.sql["job_claim_many"], {
                "queues": None, "tasks": ["noop"], "after": None, "limit": CLAIM,
                "lease": 30.0, "worker_id": "w", "starting": CLAIM, "finished": None},
                prepare=True)
        elif self.claim_kind.startswith("simple"):
            statement = (SIMPLE_CLAIM if self.claim_kind == "simple"
                         else SIMPLE_CLAIM_NO_DISK_WAIT)
            cursor = await worker.execute(statement.format(s=self.schema), prepare=True)
        elif self.name == "graphile-like":
            cursor = await worker.execute(GRAPHILE_CLAIM, prepare=True)
        else:
            statement = READY_CLAIM if self.name == "ready-table" else SPLIT_CLAIM
            cursor = await worker.execute(statement.format(s=self.schema), {"queue": QUEUE},
                                          prepare=True)
        rows = await cursor.fetchall()
        assert cursor.description is not None
        names = [column.name for column in cursor.description]
        token = names.index("claim_token") if "claim_token" in names else None
        return ([row[names.index("id")] for row in rows],
                [None if token is None else row[token] for row in rows])

    async def complete(self, worker: psycopg.AsyncConnection[Any], ids: list[int],
                       tokens: list[Any]) -> None:
        params = {"ids": ids, "tokens": tokens, "results": [None] * len(ids)}
        if self.pgbaton_schema:
            cursor = await worker.execute(self.sql["job_complete_many"], params, prepare=True)
        elif self.name == "graphile-like":
            cursor = await worker.execute(GRAPHILE_COMPLETE, {"ids": ids}, prepare=True)
        else:
            statement = (SPLIT_COMPLETE_KEEP if self.name == "split-state, keep state"
                         else SPLIT_COMPLETE)
            cursor = await worker.execute(statement.format(s=self.schema), params,
                                          prepare=True)
        if cursor.rowcount != len(ids):
            raise RuntimeError(f"{self.name}: completed {cursor.rowcount} of {len(ids)}")

    async def explain(self, worker: psycopg.AsyncConnection[Any]) -> None:
        """The plan the worker's claim runs on: one more claim (nothing left to claim)
        under auto_explain, whose plan comes back as a notice; and how the worker's
        prepared claim was planned (generic or custom) so far."""
        notices: list[str] = []
        worker.add_notice_handler(lambda diagnostic: notices.append(
            diagnostic.message_primary or ""))
        for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                        "SET auto_explain.log_level = notice",
                        "SET auto_explain.log_nested_statements = on"):
            await worker.execute(setting)
        ids, _ = await self.claim(worker)
        await worker.execute("SET auto_explain.log_min_duration = -1")
        plans = await (await worker.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s", ["%RETURNING j.id, j.claim_token%"])).fetchall()
        self.plan = [f"claimed {len(ids)}; prepared claim: generic, custom plans {plans}"]
        # Of the plan, the nodes that read a table.
        self.plan += [line for notice in notices for line in notice.splitlines()
                      if " Scan " in line or line.lstrip().startswith("Scan ")]


async def enqueue_phase(arm: Arm, conn: psycopg.AsyncConnection[Any],
                        worker: psycopg.AsyncConnection[Any], *, jobs: int,
                        waldir: str | None, relations: dict[str, str], run: Run) -> None:
    """Enqueue: the CPU of every backend of the database (pgbaton's is its pool's)."""
    await conn.execute("CHECKPOINT")
    cpu_before, _ = await reading(conn)
    start = await lsn(conn)
    for first in range(0, jobs, BATCH):
        await arm.enqueue(worker, min(BATCH, jobs - first))
    end = await lsn(conn)
    cpu_after, _ = await reading(conn)
    run.cpu["enqueue"], run.wal["enqueue"] = (cpu_after - cpu_before) * 1e6, end - start
    if waldir:
        await flushed(conn, end)
        count_records(waldir, [(start, end, "enqueue")], relations, run)


async def drain_phase(arm: Arm, conn: psycopg.AsyncConnection[Any],
                      worker: psycopg.AsyncConnection[Any], *, jobs: int,
                      waldir: str | None, relations: dict[str, str], run: Run) -> None:
    """Claims and completions, each statement's CPU (the worker's backend) and WAL its
    own."""
    pid = worker.info.backend_pid
    await conn.execute("CHECKPOINT")
    windows: list[tuple[int, int, str]] = []
    at = await lsn(conn)
    done = 0
    while done < jobs:
        before = cpu_ns(pid)
        ids, tokens = await arm.claim(worker)
        middle, claimed_at = cpu_ns(pid), await lsn(conn)
        if not ids:
            raise RuntimeError(f"{arm.name}: claimed nothing with {jobs - done} left")
        await arm.complete(worker, ids, tokens)
        after, completed_at = cpu_ns(pid), await lsn(conn)
        run.cpu["claim"] += (middle - before) / 1e3
        run.cpu["complete"] += (after - middle) / 1e3
        windows += [(at, claimed_at, "claim"), (claimed_at, completed_at, "complete")]
        at = completed_at
        done += len(ids)
    for start, end, phase in windows:
        run.wal[phase] += end - start
    if waldir:
        await flushed(conn, at)
        count_records(waldir, windows, relations, run)


async def run_arm(arm: Arm, conn: psycopg.AsyncConnection[Any], jobs: int,
                  waldir: str | None, *, explain: bool = False) -> Run:
    """One life of `jobs` jobs on an arm's fresh schema."""
    run = Run()
    await arm.make(conn)
    relations = {node: name for node, name in
                 await (await conn.execute(RELATIONS, [arm.schema])).fetchall()}
    async with await psycopg.AsyncConnection.connect(arm.dsn, autocommit=True) as worker:
        if arm.queue is not None:
            await arm.queue.ping()  # the pool's connection, open before the reading
        if arm.claim_kind == "pgbaton" and arm.drop_kind == "indexes":
            await worker.execute("SET plan_cache_mode = force_generic_plan")
            await worker.execute("SET jit = off")
        phase = {"jobs": jobs, "waldir": waldir, "relations": relations, "run": run}
        await enqueue_phase(arm, conn, worker, **phase)
        # What autovacuum would have done by then (it is off on the server measured): with
        # no statistics, ready-table's claim sorts the whole of jobs_ready every time.
        for (table,) in await (await conn.execute(TABLES, [arm.schema])).fetchall():
            await conn.execute(f"ANALYZE {table}")
        await drain_phase(arm, conn, worker, **phase)
        if explain:
            await arm.explain(worker)
    if arm.queue is not None:
        await arm.queue.close()
        arm.queue = None
    # The backends' counters reach pg_stat_user_tables when they end.
    for _ in range(50):
        left = await (await conn.execute(BACKENDS_LEFT)).fetchone()
        if left is not None and left[0] == 0:
            break
        await asyncio.sleep(0.05)
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    run.counters = list(await (await conn.execute(TABLE_COUNTERS, [arm.schema])).fetchall())
    run.dropped, run.plan = arm.dropped, arm.plan
    for phase in PHASES:
        run.cpu[phase] /= jobs
        run.wal[phase] /= jobs
        run.fpi[phase] /= jobs
    return run


def median(values: list[float]) -> float:
    return statistics.median(values)


def report(figures: dict[str, list[Run]], options: argparse.Namespace) -> None:
    jobs = options.jobs
    print(f"\nA job's life, {jobs:,} jobs: enqueue {BATCH:,} a call, claims of {CLAIM} by "
          f"one connection, one completion a claim; median of {options.rounds} rounds "
          "(range of the totals)\n")
    print("| arm | CPU µs/job enqueue | claim | complete | total | WAL B/job enqueue | claim "
          "| complete | total | of which page images |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for arm, runs in figures.items():
        cpu = [median([r.cpu[p] for r in runs]) for p in PHASES]
        wal = [median([r.wal[p] for r in runs]) for p in PHASES]
        cpu_totals = [sum(r.cpu.values()) for r in runs]
        wal_totals = [sum(r.wal.values()) for r in runs]
        fpi = median([sum(r.fpi.values()) for r in runs])
        print(f"| {arm} | " + " | ".join(f"{c:.1f}" for c in cpu)
              + f" | **{median(cpu_totals):.1f}** ({min(cpu_totals):.1f} to "
              f"{max(cpu_totals):.1f}) | " + " | ".join(f"{w:.0f}" for w in wal)
              + f" | **{median(wal_totals):.0f}** ({min(wal_totals):.0f} to "
              f"{max(wal_totals):.0f}) | {fpi:.0f} |")
    if not options.waldir:
        return
    print("\nWhat each phase wrote per job, counted from its WAL records (first round):"
          " heap rows (INSERT, UPDATE, HOT_UPDATE, DELETE; LOCK: row locks) and index"
          " entries inserted, by relation\n")
    print("| arm | phase | heap rows | index entries | by relation |")
    print("|---|---|--:|--:|---|")
    for arm, runs in figures.items():
        for phase in PHASES:
            writes = runs[0].writes[phase]
            heap = sum(n for key, n in writes.items()
                       if key.split()[-1] in ("INSERT", "UPDATE", "HOT_UPDATE", "DELETE"))
            entries = sum(n for key, n in writes.items() if key.endswith(" entry"))
            detail = ", ".join(f"{key} {n / jobs:.2f}" for key, n in sorted(writes.items()))
            print(f"| {arm} | {phase} | {heap / jobs:.2f} | {entries / jobs:.2f} "
                  f"| {detail} |")
    print("\npg_stat_user_tables at each arm's end (first round), per job: "
          "ins / upd / hot_upd / del\n")
    for arm, runs in figures.items():
        cells = "; ".join(f"{name} {ins / jobs:.2f} / {upd / jobs:.2f} / {hot / jobs:.2f}"
                          f" / {dele / jobs:.2f}"
                          for name, ins, upd, hot, dele in runs[0].counters)
        print(f"- {arm}: {cells}")
    parts_report(figures, options)


def entries(run: Run, phase: str) -> int:
    return sum(n for key, n in run.writes[phase].items() if key.endswith(" entry"))


def parts_report(figures: dict[str, list[Run]], options: argparse.Namespace) -> None:
    """The parts arms beside pgbaton: the claim's CPU (every round), the completion's,
    the claim's WAL and the index entries each phase wrote (first round)."""
    arms = [arm for arm in figures if arm == "pgbaton" or arm in PARTS]
    if not any(arm in PARTS for arm in arms):
        return
    jobs = options.jobs
    print(f"\nThe claim's parts, per job (median of {options.rounds} rounds; claim CPU of "
          "every round in brackets)\n")
    print("| arm | claim CPU µs | complete CPU µs | claim WAL B | index entries enq / "
          "claim / complete |")
    print("|---|--:|--:|--:|---|")
    for arm in arms:
        runs = figures[arm]
        claim = [r.cpu["claim"] for r in runs]
        counts = " / ".join(f"{entries(runs[0], phase) / jobs:.2f}"
                            for phase in PHASES) if options.waldir else "-"
        print(f"| {arm} | {median(claim):.1f} ({', '.join(f'{c:.1f}' for c in claim)}) "
              f"| {median([r.cpu['complete'] for r in runs]):.1f} "
              f"| {median([r.wal['claim'] for r in runs]):.0f} | {counts} |")
    for arm in arms:
        run = figures[arm][0]
        if run.dropped:
            print(f"\n{arm}: dropped {', '.join(run.dropped)}")
        if run.plan:
            print(f"\n{arm}: the claim's plan (auto_explain, first round)\n")
            print("\n".join(f"    {line}" for line in run.plan))


async def main_async(options: argparse.Namespace) -> None:
    arms = [name for name in ARMS if not options.arms or name in options.arms]
    figures: dict[str, list[Run]] = {name: [] for name in arms}
    async with await psycopg.AsyncConnection.connect(options.dsn, autocommit=True) as conn:
        for number in range(options.rounds):
            order = list(arms)
            random.shuffle(order)
            for name in order:
                arm = Arm(name, options.dsn)
                try:
                    figures[name].append(await run_arm(
                        arm, conn, options.jobs, options.waldir,
                        explain=number == 0 and arm.claim_kind == "pgbaton"
                        and any(part in arms for part in PARTS)))
                finally:
                    await arm.drop(conn)
            print(f"round {number + 1} of {options.rounds} done: {', '.join(order)}",
                  flush=True)
    report(figures, options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a database of its own")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--waldir", default="/var/lib/postgresql/15/main/pg_wal",
                        help="the server's pg_wal, for pg_waldump ('' to count nothing)")
    parser.add_argument("--arms", nargs="*", choices=ARMS, help="only these arms")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
