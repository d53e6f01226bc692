"""The App that the durable-steps chaos runs in `pgbaton worker` processes, and the
driver that runs it: workers SIGKILLed at random while jobs of five steps, a sleep and
(for even jobs) a wait for an event run; the invariants are counted in SQL afterwards.

Each step writes a row with its step key into `step_effects` (a table of the test's
own) on a connection of its own, committed before the step's result is stored: a
worker killed between the two leaves the effect without the step, and the step runs
again with the same key. That is the only duplicate the test allows.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

import pgbaton

SCHEMA = os.environ.get("PGBATON_TEST_SCHEMA", "pgbaton")
app = pgbaton.App(schema=SCHEMA)
ROOT = Path(__file__).resolve().parents[3]
APP_SPEC = "tests.steps.processes.steps_app:app"
STEPS = 5
SLEEP_SECONDS = 0.3

EFFECTS_DDL = """
CREATE TABLE "{schema}".step_effects (
    id       bigserial PRIMARY KEY,
    job_id   bigint NOT NULL,
    step     int    NOT NULL,
    step_key text   NOT NULL,
    payload  jsonb,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE "{schema}".step_wakes (
    job_id   bigint NOT NULL,
    slept_at timestamptz NOT NULL,
    woke_at  timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

_connection: psycopg.AsyncConnection[Any] | None = None


async def _db() -> psycopg.AsyncConnection[Any]:
    global _connection  # noqa: PLW0603 - one connection per worker process, made on first use
    if _connection is None or _connection.closed:
        _connection = await psycopg.AsyncConnection.connect(app.dsn, autocommit=True)
    return _connection


async def _effect(job_id: int, step: int, key: str, payload: Any) -> int:
    db = await _db()
    try:
        await db.execute(
            f'INSERT INTO "{SCHEMA}".step_effects (job_id, step, step_key, payload) '
            "VALUES (%s, %s, %s, %s)", [job_id, step, key, Jsonb(payload)])
    except psycopg.OperationalError:
        await db.close()  # the server restarted: the next attempt connects again
        raise
    return step


@app.task(pass_context=True, max_attempts=1000, retry=lambda attempt: 0.1, lease=3.0)
async def five_steps(ctx: pgbaton.JobContext, n: int) -> int:
    payload: Any = None
    for step in range(STEPS):
        if step == 2:
            slept = await ctx.step("before-sleep", time.time)
            await ctx.sleep(SLEEP_SECONDS)
            db = await _db()
            await db.execute(f'INSERT INTO "{SCHEMA}".step_wakes (job_id, slept_at) '
                             "VALUES (%s, to_timestamp(%s))", [ctx.job_id, slept])
        if step == 3 and n % 2 == 0:
            payload = await ctx.wait_for("go", timeout=600)
        name = f"s{step}"
        await ctx.step(name, _step, ctx, step, payload)
    return n


async def _step(ctx: pgbaton.JobContext, step: int, payload: Any) -> int:
    return await _effect(ctx.job_id, step, ctx.step_key, payload)


# -- the driver --------------------------------------------------------------------------


class Fleet:
    """`pgbaton worker` processes of this App, SIGKILLed and replaced at random."""

    def __init__(self, dsn: str, schema: str, logs: Path, options: tuple[str, ...]) -> None:
        self.dsn, self.schema, self.logs, self.options = dsn, schema, logs, options
        self.processes: list[subprocess.Popen[bytes]] = []
        self.kills = 0
        self.started = 0

    def start_one(self) -> None:
        env = {**os.environ, "PGBATON_DSN": self.dsn, "PGBATON_TEST_SCHEMA": self.schema,
               "PYTHONPATH": str(ROOT)}
        with (self.logs / f"steps-worker-{self.started}.log").open("wb") as log:
            self.processes.append(subprocess.Popen(
                [sys.executable, "-m", "pgbaton", "worker", APP_SPEC, "--schema", self.schema,
                 *self.options], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT))
        self.started += 1

    def kill_one(self, rng: random.Random) -> None:
        alive = [p for p in self.processes if p.poll() is None]
        if alive:
            victim = rng.choice(alive)
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            self.kills += 1
        self.start_one()

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(10)


def run(dsn: str, schema: str, logs: Path, *, jobs: int, workers: int, kill_every: float,
        timeout: float, restart: Callable[[], None] | None = None) -> dict[str, Any]:
    """Enqueue `jobs` jobs, run them on `workers` processes killed every `kill_every`
    seconds (on average) until every job is done, restart the database once midway
    when `restart` is given, send each even job its event at a random moment; then
    return the counts the test asserts on."""
    replay = random.randrange(1_000_000)
    rng = random.Random(replay)
    with pgbaton.Queue(dsn, schema=schema) as queue:
        queue.migrate()
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute(EFFECTS_DDL.format(schema=schema))  # type: ignore[arg-type]
        ids = queue.enqueue_many(
            [{"task": "five_steps", "args": {"n": n}, "max_attempts": 1000}
             for n in range(jobs)])
    even = [job_id for n, job_id in enumerate(ids) if n % 2 == 0]
    rng.shuffle(even)
    fleet = Fleet(dsn, schema, logs, ("--concurrency", "25", "--lease", "3",
                                      "--poll-interval", "0.1", "--shutdown-grace", "1"))
    for _ in range(workers):
        fleet.start_one()
    deadline = time.monotonic() + timeout
    restarted = restart is None
    sent: set[int] = set()
    # The first kill comes early, and the events trickle in (two a tick on average):
    # the run lasts long enough for kills to land even when the jobs are fast.
    next_kill = time.monotonic() + rng.uniform(0.2, 0.5)
    sender = pgbaton.Queue(dsn, schema=schema, pool_size=1)
    try:
        while True:
            now = time.monotonic()
            done = _count(dsn, schema, "SELECT count(*) FROM {s}.jobs WHERE status = 'done'")
            if not restarted and done >= jobs // 3:
                restart()  # type: ignore[misc]
                restarted = True
                continue
            if done == jobs and len(sent) == len(even):
                break
            if now > deadline:
                raise AssertionError(
                    f"replay={replay}: {done} of {jobs} jobs done after {timeout:g} s "
                    f"({fleet.kills} kills); logs in {logs}")
            if now >= next_kill:
                fleet.kill_one(rng)
                next_kill = now + rng.uniform(0.2, 2 * kill_every)
            for job_id in even[len(sent):len(sent) + rng.randrange(0, 5)]:
                try:
                    sender.send_event(job_id, "go", {"for": job_id})
                    sent.add(job_id)
                except (pgbaton.ConnectionFailed, psycopg.OperationalError):
                    break  # the server is restarting: later
            time.sleep(0.1)
    finally:
        fleet.stop()
        sender.close()
    return {"replay": replay, "kills": fleet.kills, "even": len(even),
            "restarted": restart is not None and restarted, **_invariants(dsn, schema)}


def _count(dsn: str, schema: str, query: str) -> int:
    for _ in range(100):
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as db:
                row = db.execute(query.format(s=f'"{schema}"')).fetchone()  # type: ignore[arg-type]
                assert row is not None
                return int(row[0])
        except psycopg.OperationalError:
            time.sleep(0.2)  # the server is restarting
    raise AssertionError("the database did not come back")


def _invariants(dsn: str, schema: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as db:
        db.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
        row = db.execute("""
            SELECT
              (SELECT count(*) FROM jobs) AS jobs,
              (SELECT count(*) FROM jobs WHERE status = 'done') AS done,
              (SELECT count(*) FROM job_steps WHERE kind = 'step' AND name LIKE 's%%')
                  AS committed_steps,
              (SELECT count(DISTINCT (job_id, step)) FROM step_effects) AS distinct_effects,
              (SELECT count(*) FROM step_effects) AS effects,
              -- Each committed step: its effects all carry its one step key.
              (SELECT count(*) FROM (SELECT job_id, step FROM step_effects
                                     GROUP BY job_id, step
                                     HAVING count(DISTINCT step_key) > 1) AS k) AS mixed_keys,
              (SELECT count(*) FROM step_effects AS e JOIN jobs AS j ON j.id = e.job_id
               WHERE e.step_key <> coalesce(j.idempotency_key, 'pgbaton-job-' || j.id)
                                    || ':step:s' || e.step) AS wrong_keys,
              -- Every even job's step 3 saw its own event's payload.
              (SELECT count(DISTINCT j.id) FROM step_effects AS e
               JOIN jobs AS j ON j.id = e.job_id
               WHERE e.step = 3 AND (j.args ->> 'n')::int %% 2 = 0
                 AND e.payload = jsonb_build_object('for', j.id)) AS events_received,
              (SELECT count(DISTINCT job_id) FROM step_effects AS e
               WHERE e.step = 3 AND e.payload <> 'null') AS jobs_with_event,
              (SELECT count(*) FROM job_events) AS events_left,
              -- Every sleep resumed after its time.
              (SELECT count(*) FROM step_wakes
               WHERE woke_at < slept_at + make_interval(secs => %s)) AS early_wakes,
              (SELECT count(DISTINCT job_id) FROM step_wakes) AS jobs_woken,
              (SELECT count(*) FROM jobs WHERE result IS DISTINCT FROM args -> 'n')
                  AS wrong_results,
              (SELECT count(*) FROM jobs AS j WHERE (SELECT count(*) FROM job_steps AS s
                                                     WHERE s.job_id = j.id) <> 8
                                                - ((j.args ->> 'n')::int %% 2)) AS odd_steps
        """, [SLEEP_SECONDS]).fetchone()
    assert row is not None
    return dict(row)
