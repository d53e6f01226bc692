"""The narrow claim table of docs/explanation/claim-table.md, tried in the real worker's
drain before it is built: today's schema against a prototype of the chosen layout,
taking turns round by round. Prints figures; run it alone on a quiet machine.

    .venv/bin/python -m benchmarks.claim_table_drain --dsn DSN [--jobs 10000]
        [--rounds 5] [--concurrency 32] [--claim-ahead auto] [--args-bytes 0]
        [--arms today,split]

`benchmarks/claim_tables.py` priced the layouts in raw SQL on one connection. This runs
the real Worker in this process (its producer, sizer, executor and completer), as `make
bench`'s drain case does, on each arm:

- `today`: the schema as migrated.
- `split`: the same schema, then the prototype: a table `job_state` holding the claim
  state of the live jobs (the layout's columns, CHECKs and indexes: the claim's two, the
  held jobs', the per-key ones), the wide `jobs` stripped of every index and CHECK that
  names a column of the claim state (so that a job's completion to `done` can be a HOT
  update) and at fillfactor 50, and the worker's hot-path statements rewritten for it:
  the claim (job_claim_many, derived from today's text: the same candidates, marks,
  per-key probes and write, on job_state, the payload joined from jobs), the start
  (job_start_many), the heartbeat (job_heartbeat_many) and the completion
  (job_complete_many: the state row deleted, fenced by its token, and the wide row's
  update to `done` for the ids deleted only).

`--args-bytes N` pads each job's args by N bytes (the bench's jobs carry `{"seq": n}`;
claim_tables.py's, 230 bytes): a wide row's new version copies its args.

`--arms` chooses the arms, the first the reference. Two more, not layouts but prices of
what pgbaton keeps: `unguarded`, today's schema without its six CHECKs and its status
trigger, which guard the state machine and tell dependencies, batches, waits and
cancels that a job ended; `deleting`, a job deleted when it ends, as Graphile Worker
does, where pgbaton keeps the finished job (its status, result and history). And one
change that keeps them: `moving`, a done job moved to `jobs_history` as it ends (the
history mode's move, which today comes `history_after` later).

What the prototype leaves out, which the drain of no-op jobs does not reach: the enqueue
writing both rows (the state rows are copied from jobs after the bulk enqueue, outside
the timed drain), failures, releases, cancels, the reaper, flow control, unique jobs
and waits; every other statement of pgbaton's reads a stale `jobs.status` on it. A
measurement, not a build.

Each round drops and migrates the schema `pgbaton` of the database it is given (give it
one of its own). Per arm, medians over the rounds: the rate (from the first handler
start to the last job done), the worker's and the server's CPU and WAL per job (the
bench's own readings), and the `jobs` table's updates and HOT updates in the drain (on
the layout, the claim's updates are `job_state`'s, not counted there). The drain's end
is found as the bench finds it, by counting unfinished jobs in `jobs` every 5 ms, which
on the layout (no status index left on `jobs`) reads the table: a little against it.
Then, when the arms hold `today` and `split`, each statement alone: on one connection
and nothing else running, 20,000 jobs claimed 270 a claim (the size of a drain's
claims) and each claim's jobs completed in one statement, prepared with a generic plan
as the worker's are; the wall time of each call per job, median of the calls (the
first five left out), per layout and round.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import statistics
import time
from collections.abc import Iterator
from typing import Any

import psycopg

from pgbaton import _sql
from pgbaton.worker import loop

from . import case
from .common import PROBE
from .drain_timeline import TimedSystem, setting
from .profile_drain import fresh
from .systems import pgbaton_system

SCHEMA = "pgbaton"


@pgbaton_system.app.task(name="padded")
async def padded(seq: int, pad: str) -> None:
    """A no-op job whose args carry `--args-bytes` of padding."""
    PROBE.hit(seq)


LAYOUT = """
CREATE TABLE {s}.job_state (
    id           bigint      PRIMARY KEY,
    queue        text        NOT NULL,
    task         text        NOT NULL,
    priority     integer     NOT NULL,
    run_at       timestamptz NOT NULL,
    key          text,
    limit_key    text,
    status       text        NOT NULL DEFAULT 'pending',
    claim_token  uuid,
    lease_until  timestamptz,
    attempts     integer     NOT NULL DEFAULT 0,
    max_attempts integer     NOT NULL,
    holds        smallint    NOT NULL DEFAULT 0,
    started_at   timestamptz,
    worker_id    text,
    -- 'cancelled': a job cancelled while its handler ran keeps its row (its key held)
    -- until the handler lets go, as today's claim probes expect.
    CONSTRAINT job_state_status_known CHECK (
        status IN ('pending', 'running', 'waiting', 'cancelled')),
    CONSTRAINT job_state_token_while_held CHECK (
        CASE status WHEN 'running' THEN claim_token IS NOT NULL AND lease_until IS NOT NULL
                    ELSE (claim_token IS NULL) = (lease_until IS NULL) END),
    CONSTRAINT job_state_attempts_in_range CHECK (
        attempts >= 0 AND max_attempts >= 1 AND attempts <= max_attempts)
) WITH (fillfactor = 70);
CREATE INDEX job_state_claimable ON {s}.job_state (priority DESC, run_at, id)
    WHERE status = 'pending';
CREATE INDEX job_state_queue_claimable ON {s}.job_state (queue, priority DESC, run_at, id)
    WHERE status = 'pending' AND queue <> '';
CREATE INDEX job_state_held ON {s}.job_state (queue, lease_until)
    WHERE lease_until IS NOT NULL;
CREATE UNIQUE INDEX job_state_one_running_per_key ON {s}.job_state (key)
    WHERE key IS NOT NULL AND status = 'running';
CREATE INDEX job_state_key_unfinished ON {s}.job_state (key, id) WHERE key IS NOT NULL;
CREATE INDEX job_state_key_held_after_cancel ON {s}.job_state (key)
    WHERE key IS NOT NULL AND claim_token IS NOT NULL AND status IN ('cancelled', 'pending');
CREATE INDEX job_state_limit_key_held ON {s}.job_state (queue, limit_key)
    WHERE lease_until IS NOT NULL AND limit_key IS NOT NULL AND queue <> '';

-- The HOT rule: no index of jobs may name a column that the completion changes.
DROP INDEX {s}.jobs_claimable, {s}.jobs_queue_claimable, {s}.jobs_held,
    {s}.jobs_one_running_per_key, {s}.jobs_key_unfinished, {s}.jobs_key_held_after_cancel,
    {s}.jobs_limit_key_held, {s}.jobs_finished, {s}.jobs_key_waiting, {s}.jobs_unique_key,
    {s}.jobs_failed;
ALTER TABLE {s}.jobs ADD COLUMN failed_at timestamptz;
CREATE INDEX jobs_failed ON {s}.jobs (id) INCLUDE (queue) WHERE failed_at IS NOT NULL;
-- Moved to job_state with the columns they guard.
ALTER TABLE {s}.jobs DROP CONSTRAINT jobs_token_while_held,
    DROP CONSTRAINT jobs_attempts_in_range;
ALTER TABLE {s}.jobs SET (fillfactor = 50);
"""
# Not a layout: what the drain would gain by dropping what guards the state machine
# and tells dependencies, batches, waits and cancels that a job ended (a measurement of
# what those promises cost, never a change to make).
UNGUARDED = """
ALTER TABLE {s}.jobs DROP CONSTRAINT jobs_attempts_in_range,
    DROP CONSTRAINT jobs_status_known, DROP CONSTRAINT jobs_token_while_held,
    DROP CONSTRAINT jobs_unique_whole, DROP CONSTRAINT jobs_waiting_event_only_pending,
    DROP CONSTRAINT jobs_waiting_for_parents;
DROP TRIGGER jobs_status_changed ON {s}.jobs;
"""
STATE_ROWS = """
INSERT INTO {s}.job_state (id, queue, task, priority, run_at, key, limit_key, max_attempts)
SELECT id, queue, task, priority, run_at, key, limit_key, max_attempts
FROM {s}.jobs WHERE status = 'pending'
"""
COMPLETE = """
WITH gone AS (
    DELETE FROM {s}.job_state AS st
    USING unnest((SELECT %(ids)b::bigint[]), %(tokens)b::uuid[], %(results)b::jsonb[],
                 %(ran)b::float8[])
          WITH ORDINALITY AS held(id, token, result, ran, position)
    WHERE st.id = held.id AND st.claim_token = held.token AND st.status = 'running'
    RETURNING st.id, held.result, held.ran, held.position, st.started_at, st.attempts,
              st.holds, st.worker_id
)
UPDATE {s}.jobs AS j
SET status      = 'done',
    result      = gone.result,
    finished_at = now(),
    started_at  = coalesce(gone.started_at, now() - make_interval(secs => gone.ran)),
    attempts    = gone.attempts,
    holds       = CASE WHEN gone.started_at IS NULL THEN greatest(gone.holds - 1, 0)
                       ELSE gone.holds END,
    worker_id   = gone.worker_id,
    waiting_event = NULL  -- the wide row's, which the claim on job_state no longer clears
FROM gone
WHERE j.id = gone.id
RETURNING gone.position
"""
# Not a layout either: the completion as Graphile Worker's, a DELETE of the row (what
# keeping the finished job, its result and its history, costs the drain).
DELETING_COMPLETE = """
DELETE FROM {s}.jobs AS j
USING unnest((SELECT %(ids)b::bigint[]), %(tokens)b::uuid[], %(results)b::jsonb[],
             %(ran)b::float8[])
      WITH ORDINALITY AS held(id, token, result, ran, position)
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
RETURNING held.position
"""
# A layout's worth of change without a new table: the completion moves a done job to
# jobs_history at once (the history mode's move, which today comes history_after
# later), a DELETE and an INSERT where today an UPDATE writes the finished version.
MOVING_HISTORY = """
CREATE TABLE {s}.jobs_history_all PARTITION OF {s}.jobs_history DEFAULT;
"""
MOVED_COLUMNS = (
    "id, queue, task, args, status, priority, run_at, attempts, max_attempts, key, "
    "idempotency_key, claim_token, lease_until, worker_id, errors, result, created_at, "
    "started_at, finished_at, limit_key, has_dependents, waiting_for, batch_id, meta, "
    "unique_key, unique_states, awaited, snoozes, progress, progress_note, progress_at, "
    "has_steps, waiting_event, holds")
MOVING_COMPLETE = """
WITH held AS (
    SELECT * FROM unnest((SELECT %(ids)b::bigint[]), %(tokens)b::uuid[],
                         %(results)b::jsonb[], %(ran)b::float8[])
                  WITH ORDINALITY AS held(id, token, result, ran, position)
), gone AS (
    DELETE FROM {s}.jobs AS j USING held
    WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
    RETURNING j.*, held.result AS outcome, held.ran, held.position
), moved AS (
    INSERT INTO {s}.jobs_history ({columns})
    SELECT id, queue, task, args, 'done', priority, run_at, attempts, max_attempts, key,
           idempotency_key, NULL, NULL, worker_id, errors, outcome, created_at,
           coalesce(started_at, now() - make_interval(secs => ran)), now(), limit_key,
           has_dependents, waiting_for, batch_id, meta, unique_key, unique_states, awaited,
           snoozes, progress, progress_note, progress_at, has_steps, waiting_event,
           CASE WHEN started_at IS NULL THEN greatest(holds - 1, 0) ELSE holds END
    FROM gone
)
SELECT position FROM gone
"""
# The claim's payload, read from the wide row in the claim's write.
RETURNING_TODAY = re.compile(
    r"RETURNING j\.id, j\.claim_token, j\.attempts, j\.max_attempts, j\.task, j\.args, "
    r"j\.key,\s+j\.queue, j\.priority, j\.run_at, j\.lease_until, j\.idempotency_key, "
    r"j\.created_at,\s+j\.meta, j\.started_at IS NOT NULL AS started")
RETURNING_SPLIT = (
    "RETURNING j.id, j.claim_token, j.attempts, j.max_attempts, j.task, w.args, j.key, "
    "j.queue, j.priority, j.run_at, j.lease_until, w.idempotency_key, w.created_at, "
    "w.meta, j.started_at IS NOT NULL AS started")


def _replaced(text: str, old: str, new: str, count: int = 1) -> str:
    if text.count(old) != count:
        raise RuntimeError(f"today's statement changed: {old!r} found {text.count(old)} "
                           f"times, not {count}")
    return text.replace(old, new)


def split_statements(today: dict[str, str], s: str) -> dict[str, str]:
    """The hot path's statements on the prototype, derived from today's texts where
    they keep their shape."""
    claim = today["job_claim_many"]
    for alias in ("c", "running", "held", "older", "parked"):
        claim = _replaced(claim, f"FROM {s}.jobs AS {alias}\n",
                          f"FROM {s}.job_state AS {alias}\n")
    claim = _replaced(claim, f"UPDATE {s}.jobs AS j", f"UPDATE {s}.job_state AS j")
    claim, waiting_event = re.subn(r"\n\s*waiting_event = NULL,[^\n]*", "", claim)
    if waiting_event != 1:
        raise RuntimeError("today's claim no longer clears waiting_event as expected")
    claim = _replaced(claim, "FROM per_claim, (SELECT",
                      f"FROM per_claim, {s}.jobs AS w, (SELECT")
    claim = _replaced(claim, "WHERE j.id = ANY(per_claim.ids)",
                      "WHERE j.id = ANY(per_claim.ids) AND w.id = j.id")
    if not RETURNING_TODAY.search(claim):
        raise RuntimeError("today's claim returns other columns: update RETURNING_TODAY")
    claim = RETURNING_TODAY.sub(RETURNING_SPLIT, claim)
    return {
        "job_claim_many": claim,
        "job_start_many": _replaced(today["job_start_many"], f"UPDATE {s}.jobs AS j",
                                    f"UPDATE {s}.job_state AS j"),
        "job_heartbeat_many": _replaced(today["job_heartbeat_many"],
                                        f"UPDATE {s}.jobs AS j", f"UPDATE {s}.job_state AS j"),
        "job_complete_many": COMPLETE.format(s=s),  # s: the schema as the texts quote it
    }


@contextlib.contextmanager
def statements(replacing: dict[str, str]) -> Iterator[None]:
    """The schema's named statements with some replaced, for the length of a drain (the
    engine reads the cached dict that _sql.queries returns)."""
    named = _sql.queries(SCHEMA)
    saved = {name: named[name] for name in replacing}
    named.update(replacing)
    try:
        yield
    finally:
        named.update(saved)


class PaddedSystem(TimedSystem):
    """The bench adapter, its jobs' args padded to about `args_bytes` (0: the bench's
    own no-op jobs, args {"seq": n})."""

    args_bytes = 0

    async def enqueue_batch(self, seqs: Any) -> None:
        if not self.args_bytes:
            await super().enqueue_batch(seqs)
            return
        pad = "x" * self.args_bytes
        await pgbaton_system.app.async_queue.enqueue_many(
            [{"task": "padded", "args": {"seq": s, "pad": pad}} for s in seqs])


class UnguardedSystem(PaddedSystem):
    """The bench adapter on today's schema without its CHECKs and its status trigger."""

    async def install(self) -> None:
        await super().install()
        assert self.db is not None
        await self.db.execute(UNGUARDED.format(s=SCHEMA))


class SplitSystem(PaddedSystem):
    """The bench adapter on the prototype: the layout made after the migration, the
    state rows copied after the bulk enqueue (before the worker starts)."""

    async def install(self) -> None:
        await super().install()
        assert self.db is not None
        await self.db.execute(LAYOUT.format(s=SCHEMA))

    async def analyze(self) -> None:
        assert self.db is not None
        await self.db.execute(STATE_ROWS.format(s=SCHEMA))
        await super().analyze()


class DeletingSystem(PaddedSystem):
    """The bench adapter on today's schema, a finished job deleted: the drain is over
    when no job is left, done or not."""

    unfinished_sql = f"SELECT count(*) FROM {SCHEMA}.jobs"


class MovingSystem(PaddedSystem):
    """The bench adapter on today's schema, a done job moved to the history as it ends
    (into one default partition)."""

    async def install(self) -> None:
        await super().install()
        assert self.db is not None
        await self.db.execute(MOVING_HISTORY.format(s=SCHEMA))


ARMS: dict[str, type[PaddedSystem]] = {
    "today": PaddedSystem, "split": SplitSystem, "unguarded": UnguardedSystem,
    "deleting": DeletingSystem, "moving": MovingSystem}
COMPLETIONS = {"deleting": DELETING_COMPLETE, "moving": MOVING_COMPLETE}

HOT_COUNTS = """
SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
WHERE schemaname = %s AND relname = 'jobs'
"""


async def drain(dsn: str, arm: str, claim_ahead: int | str, jobs: int, concurrency: int
                ) -> dict[str, Any]:
    system_class = ARMS[arm]
    replacing = (
        split_statements(_sql.queries(SCHEMA), f'"{SCHEMA}"') if arm == "split"
        else {"job_complete_many": COMPLETIONS[arm].format(s=f'"{SCHEMA}"',
                                                          columns=MOVED_COLUMNS)}
        if arm in COMPLETIONS else {})
    system = system_class(dsn, claim_ahead)
    await fresh(dsn, system)
    try:
        with statements(replacing):
            result = await case.drain(system, {
                "jobs": jobs, "batch": 1_000, "concurrency": concurrency,
                "time_cap": 120.0, "timeout": 120.0,
            })
        assert system.db is not None
        # The statistics collector reports a backend's counts when it goes idle.
        await system.db.execute("SELECT pg_stat_clear_snapshot()")
        cursor = await system.db.execute(HOT_COUNTS, (SCHEMA,))
        updates, hot = await cursor.fetchone() or (0, 0)
    finally:
        await system.close()
    if result["info"]["capped"] or result["info"]["ran_twice"]:
        raise RuntimeError(f"the drain did not run every job once: {result['info']}")
    metrics = result["metrics"]
    return {
        "jobs_per_s": metrics["jobs_per_s"], "worker_us": metrics["cpu_us_per_job"],
        "server_us": metrics["server_cpu_us_per_job"],
        "wal_bytes": metrics["wal_bytes_per_job"],
        "idle": system.idle_share(), "updates": updates / jobs, "hot": hot / jobs,
    }


ALONE_JOBS, ALONE_CLAIM = 20_000, 270


async def alone(dsn: str, arm: str) -> tuple[float, float]:
    """The claim's and the completion's wall time per job, each statement alone."""
    system = await fresh(dsn, (SplitSystem if arm == "split" else PaddedSystem)(dsn, 0))
    named = _sql.queries(SCHEMA)
    if arm == "split":
        named = {**named, **split_statements(named, f'"{SCHEMA}"')}
    claims: list[float] = []
    completions: list[float] = []
    try:
        for first in range(0, ALONE_JOBS, 1_000):
            await system.enqueue_batch(range(first, first + 1_000))
        await system.analyze()
        async with await psycopg.AsyncConnection.connect(
                dsn, autocommit=True, options="-c plan_cache_mode=force_generic_plan") as conn:
            for _ in range(ALONE_JOBS // ALONE_CLAIM):
                began = time.perf_counter()
                cursor = await conn.execute(named["job_claim_many"], {
                    "after": None, "tasks": None, "limit": ALONE_CLAIM,
                    "starting": ALONE_CLAIM, "lease": 30.0, "worker_id": "alone",
                    "queues": None}, prepare=True)
                rows = await cursor.fetchall()
                claims.append((time.perf_counter() - began) / len(rows))
                began = time.perf_counter()
                cursor = await conn.execute(named["job_complete_many"], {
                    "ids": [row[0] for row in rows], "tokens": [row[1] for row in rows],
                    "results": [None] * len(rows), "ran": [0.001] * len(rows)},
                    prepare=True)
                if len(await cursor.fetchall()) != len(rows):
                    raise RuntimeError(f"{arm}: a completion missed jobs it held")
                completions.append((time.perf_counter() - began) / len(rows))
    finally:
        await system.close()
    return statistics.median(claims[5:]) * 1e6, statistics.median(completions[5:]) * 1e6


async def main_async(args: argparse.Namespace) -> None:
    arms = tuple(args.arms.split(","))
    if unknown := set(arms) - set(ARMS):
        raise SystemExit(f"unknown arms {sorted(unknown)}: the arms are {', '.join(ARMS)}")
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    claim_ahead = setting(args.claim_ahead)
    for number in range(args.rounds):
        # Turns rotate, so neither arm always runs first in a round.
        for arm in arms[number % len(arms):] + arms[:number % len(arms)]:
            run = await drain(args.dsn, arm, claim_ahead, args.jobs, args.concurrency)
            runs[arm].append(run)
            print(f"round {number + 1}, {arm}: {run['jobs_per_s']:,.0f} jobs/s, "
                  f"server {run['server_us']:.1f} µs/job, WAL {run['wal_bytes']:.0f} B/job",
                  flush=True)
    print(f"\nDrain of {args.jobs:,} no-op jobs (args padded by {args.args_bytes} bytes) at "
          f"concurrency {args.concurrency}, "
          f"claim_ahead {args.claim_ahead}, median of {args.rounds} rounds (spread: "
          "lowest to highest):\n")
    print("| layout | jobs/s | worker CPU µs/job | server CPU µs/job | WAL B/job "
          "| machine idle | jobs: updates a job, HOT |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for arm, rounds in runs.items():
        def median(key: str, rounds: list[dict[str, Any]] = rounds) -> float:
            return statistics.median(r[key] for r in rounds)
        rates = [r["jobs_per_s"] for r in rounds]
        print(f"| {arm} | {median('jobs_per_s'):,.0f} ({min(rates):,.0f} to "
              f"{max(rates):,.0f}) | {median('worker_us'):.1f} | {median('server_us'):.1f} "
              f"| {median('wal_bytes'):.0f} | {median('idle'):.0%} "
              f"| {median('updates'):.2f}, {median('hot'):.2f} |")
    for arm in arms[1:]:
        ratios = [o["jobs_per_s"] / t["jobs_per_s"]
                  for t, o in zip(runs[arms[0]], runs[arm], strict=True)]
        print(f"\n{arm} / {arms[0]}, round by round: "
              f"{', '.join(f'{r:.2f}' for r in ratios)}; median {statistics.median(ratios):.2f}")
    if "split" not in arms or "today" not in arms:
        return
    print(f"\nEach statement alone ({ALONE_CLAIM} jobs a claim, its jobs completed in one "
          "statement, one connection), wall time per job, µs:\n")
    print("| round | today: claim | today: completion | split: claim | split: completion |")
    print("|---|--:|--:|--:|--:|")
    for number in range(args.rounds):
        today, split = await alone(args.dsn, "today"), await alone(args.dsn, "split")
        print(f"| {number + 1} | {today[0]:.1f} | {today[1]:.1f} | {split[0]:.1f} "
              f"| {split[1]:.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True,
                        help="a database of its own: each round drops its schema pgbaton")
    parser.add_argument("--claim-ahead", default="auto", help="N or auto (the default)")
    parser.add_argument("--arms", default="today,split",
                        help="comma-separated, the first the reference: " + ", ".join(ARMS))
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--args-bytes", type=int, default=0,
                        help="pad each job's args by this many bytes (0: the bench's jobs)")
    args = parser.parse_args()
    PaddedSystem.args_bytes = args.args_bytes
    logging.basicConfig(level=logging.WARNING)
    loop.run(main_async(args), "auto")


if __name__ == "__main__":
    main()
