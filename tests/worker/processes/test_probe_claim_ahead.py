"""Hostile probes of claiming ahead and of sync handlers past their timeout (issue 25):
jobs claimed ahead that are cancelled and retried, or whose lease runs out and is
reaped, while they wait in their worker; workers killed again and again by jobs that
end them at their start; handlers raising BaseException subclasses from the buffer;
a stop while a thread never returns.

Real `pgbaton worker` processes run the App defined here (`PROBE_SPEC`); every
handler start and end is a row of the effects table, written on its own connection,
and every claim is judged afterwards in SQL."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgbaton
from tests.worker_processes import ROOT, WorkerProcess, scalar, wait_until

PROBE_SPEC = "tests.worker.processes.test_probe_claim_ahead:app"
SCHEMA = os.environ.get("PGBATON_TEST_SCHEMA", "pgbaton")
app = pgbaton.App(schema=SCHEMA)


def _record(context: pgbaton.JobContext, what: str) -> None:
    # Straight to the server, even when the worker reaches it through a proxy.
    dsn = os.environ.get("PGBATON_EFFECTS_DSN") or os.environ["PGBATON_DSN"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{SCHEMA}".effects (job_id, attempt, worker_pid, what)'
            " VALUES (%s, %s, %s, %s)",
            (context.job_id, context.attempt, os.getpid(), what),
        )


class HandlerAbort(BaseException):
    """Neither an Exception nor one of Python's own: a library's private abort."""


@app.task(pass_context=True)
async def step(context: pgbaton.JobContext, seconds: float = 0.0) -> str:
    await asyncio.to_thread(_record, context, "start")
    await asyncio.sleep(seconds)
    await asyncio.to_thread(_record, context, "end")
    return "ok"


@app.task(pass_context=True, max_attempts=1)
async def freeze(context: pgbaton.JobContext, seconds: float) -> None:
    """Blocks the worker's loop (heartbeats included), as a long GC pause would."""
    await asyncio.to_thread(_record, context, "start")
    time.sleep(seconds)
    _record(context, "woke")


@app.task(pass_context=True, max_attempts=2)
async def ends_worker(context: pgbaton.JobContext) -> None:
    await asyncio.to_thread(_record, context, "start")
    os._exit(70)


def _raise_generator_exit() -> None:
    raise GeneratorExit


@app.task(pass_context=True, max_attempts=1)
async def awaits_a_raising_thread(context: pgbaton.JobContext) -> None:
    """A GeneratorExit that reaches the handler through a future, not raised by it."""
    await asyncio.to_thread(_record, context, "start")
    await asyncio.to_thread(_raise_generator_exit)


@app.task(pass_context=True, max_attempts=1)
async def raises_async(context: pgbaton.JobContext, what: str) -> None:
    await asyncio.to_thread(_record, context, "start")
    raise {"exit": SystemExit(4), "interrupt": KeyboardInterrupt(),
           "abort": HandlerAbort("private"), "generator": GeneratorExit()}[what]


@app.task(pass_context=True, max_attempts=1)
def raises_sync(context: pgbaton.JobContext, what: str) -> None:
    _record(context, "start")
    raise {"exit": SystemExit(4), "interrupt": KeyboardInterrupt(),
           "abort": HandlerAbort("private"), "generator": GeneratorExit()}[what]


@app.task(pass_context=True, timeout=0.2, max_attempts=3)
def hangs(context: pgbaton.JobContext, seconds: float = 600.0) -> None:
    """Past its timeout for good, never looking at should_stop."""
    _record(context, "start")
    time.sleep(seconds)
    _record(context, "end")


@app.task(pass_context=True, max_attempts=1)
def sync_sleeps(context: pgbaton.JobContext, seconds: float) -> None:
    """A sync handler that never looks at should_stop."""
    _record(context, "start")
    time.sleep(seconds)
    _record(context, "end")


@pytest.fixture
def run_worker(
    dsn: str, app_schema: str, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """`pgbaton worker` processes of this module's App; each killed at teardown."""
    started: list[WorkerProcess] = []

    def start(*options: str, through: str | None = None) -> WorkerProcess:
        log_path = tmp_path / f"probe-worker-{len(started)}.log"
        env = {**os.environ, "PGBATON_DSN": through or dsn, "PGBATON_EFFECTS_DSN": dsn,
               "PGBATON_TEST_SCHEMA": app_schema, "PYTHONPATH": str(ROOT),
               "PYTHONFAULTHANDLER": "1"}
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "pgbaton", "worker", PROBE_SPEC,
                 "--schema", app_schema, "--no-maintenance",
                 "--stats-file", str(log_path.with_suffix(".stats.json")), *options],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
            )
        worker = WorkerProcess(process, log_path)
        started.append(worker)
        worker.wait_for_log("started:")
        return worker

    yield start
    for worker in started:
        worker.kill()


def _effects(db: psycopg.Connection[Any], schema: str, job_id: int,
             what: str = "start") -> list[dict[str, Any]]:
    return db.execute(
        f'SELECT attempt, worker_pid FROM "{schema}".effects WHERE job_id = %s'
        " AND what = %s ORDER BY id", (job_id, what)).fetchall()


def _held(db: psycopg.Connection[Any]) -> int:
    return scalar(db, "SELECT count(*) FROM jobs WHERE status = 'running'")


def test_a_job_cancelled_then_retried_while_claimed_ahead_runs_once_later(
    run_worker, db, app_schema, queue
):
    """Cancelled and at once retried while it waits in its worker (claim-ahead 3, a
    60 s lease: no heartbeat comes between): its start is refused when the slot frees,
    the worker lets go of it, and it then runs exactly once, on a fresh attempt, rather
    than waiting out the old holder's lease."""
    first = queue.enqueue("step", {"seconds": 1.5})
    behind = queue.enqueue("step", {"seconds": 0})
    worker = run_worker("--concurrency", "1", "--claim-ahead", "3", "--lease", "60",
                        "--poll-interval", "0.2")
    wait_until(lambda: _held(db) == 2, what="both jobs held")
    assert _effects(db, app_schema, behind) == []
    assert queue.cancel(behind) is True
    assert queue.retry(behind) is True
    wait_until(lambda: scalar(db, "SELECT status FROM jobs WHERE id = %s", behind)
               == "done", timeout=20, what="the retried job done well before the lease")
    assert worker.stop() == 0
    starts = _effects(db, app_schema, behind)
    assert [s["attempt"] for s in starts] == [1], starts
    row = db.execute("SELECT attempts, claim_token, errors FROM jobs WHERE id = %s",
                     (behind,)).fetchone()
    assert row == {"attempts": 1, "claim_token": None, "errors": []}
    assert scalar(db, "SELECT status FROM jobs WHERE id = %s", first) == "done"


def test_jobs_claimed_ahead_whose_leases_are_reaped_while_their_worker_is_frozen(
    run_worker, db, app_schema, queue
):
    """A worker's loop freezes (no heartbeat) with three jobs claimed ahead behind the
    frozen one; their leases run out and are reaped, their attempts given back, and
    another worker runs them. When the frozen worker wakes it must start none of them:
    each ran once, by the other worker, on its first attempt."""
    frozen_job = queue.enqueue("freeze", {"seconds": 8.0}, max_attempts=1)
    waiting = [queue.enqueue("step", {"seconds": 0}) for _ in range(3)]
    frozen = run_worker("--concurrency", "1", "--claim-ahead", "3", "--lease", "1.5")
    wait_until(lambda: _effects(db, app_schema, frozen_job) != [], what="the freeze began")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE status = 'running'"
                              " AND lease_until < now()") == 4, timeout=10,
               what="the four leases past")
    assert queue.reap() == 4
    rows = {r["id"]: r for r in db.execute(
        "SELECT id, status, attempts, errors FROM jobs WHERE id = ANY(%s)",
        ([*waiting, frozen_job],))}
    assert rows[frozen_job]["status"] == "failed"
    for job in waiting:
        assert (rows[job]["status"], rows[job]["attempts"]) == ("pending", 0)
        assert [e["started"] for e in rows[job]["errors"]] == [False]
    other = run_worker("--concurrency", "3", "--poll-interval", "0.2")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s)"
                              " AND status = 'done'", waiting) == 3,
               timeout=20, what="the three done by the other worker")
    wait_until(lambda: _effects(db, app_schema, frozen_job, "woke") != [], timeout=20,
               what="the frozen worker woke")
    assert frozen.stop() == 0
    assert other.stop() == 0
    for job in waiting:
        starts = _effects(db, app_schema, job)
        assert [(s["attempt"], s["worker_pid"]) for s in starts] == [(1, other.pid)], (
            job, starts)
    assert scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND attempts = 1",
                  waiting) == 3


def test_workers_killed_again_and_again_by_jobs_that_end_them_from_the_buffer(
    run_worker, db, app_schema, queue
):
    """Three jobs that os._exit() their worker as they start (2 attempts each),
    between ordinary jobs, all claimed ahead by one-slot workers. Every worker
    dies or drains; each killer ends failed after exactly its two started attempts,
    each ordinary job runs once with its one attempt (every death gave back the
    attempts of the jobs that had not started), and no more workers die than the
    killers have attempts and holds: a killer started from the buffer dies before its
    start is recorded, so that death counts a hold, and from its third hold it is
    started at its claim. An ordinary job that three dying workers held ahead is
    started at its claim from then on (jobs.holds, migration 21): a later death then
    spends one of its attempts, never before its third hold."""
    jobs: list[int] = []
    killers: list[int] = []
    for _ in range(3):
        jobs += [queue.enqueue("step", {"seconds": 0.1}) for _ in range(2)]
        killers.append(queue.enqueue("ends_worker", max_attempts=2))
    jobs.append(queue.enqueue("step", {"seconds": 0.1}))
    deaths = 0
    for _ in range(20):
        if scalar(db, "SELECT count(*) FROM jobs WHERE status IN ('pending', 'running')"
                  ) == 0:
            break
        worker = run_worker("--concurrency", "1", "--claim-ahead", "4", "--lease", "1",
                            "--poll-interval", "0.2")
        wait_until(lambda w=worker: w.process.poll() is not None or scalar(
            db, "SELECT count(*) FROM jobs WHERE status IN ('pending', 'running')") == 0,
            timeout=30, what="the worker killed, or every job ended")
        if worker.process.poll() is None:
            assert worker.stop() == 0
            break
        deaths += 1
        assert worker.process.returncode == 70
        wait_until(lambda: queue.reap() >= 0 and _held(db) == 0, timeout=30,
                   what="the dead worker's leases reaped")
    assert 2 * len(killers) <= deaths <= (2 + 3) * len(killers)
    for killer in killers:
        row = db.execute("SELECT status, attempts, holds, errors FROM jobs WHERE id = %s",
                         (killer,)).fetchone()
        assert (row["status"], row["attempts"]) == ("failed", 2), row
        # A killer claimed ahead when another one ended the worker, or that ended it
        # before its start was recorded, was given its attempt back (a hold counted);
        # the two it spent are the two whose start was recorded.
        assert {e["type"] for e in row["errors"]} == {"LeaseExpired"}
        assert [e["attempt"] for e in row["errors"] if e["started"]] == [1, 2], (
            row["errors"])
        assert row["holds"] <= 3
        runs = [s["attempt"] for s in _effects(db, app_schema, killer)]
        assert sorted(set(runs)) == [1, 2] and len(runs) <= 2 + row["holds"], runs
    for job in jobs:
        row = db.execute("SELECT status, attempts, errors FROM jobs WHERE id = %s",
                         (job,)).fetchone()
        held_by_the_dead = [e["started"] for e in row["errors"]]
        spent = held_by_the_dead.count(True)
        assert (row["status"], row["attempts"]) == ("done", 1 + spent), (job, row)
        if spent:
            assert held_by_the_dead.index(True) >= 3, row["errors"]
        assert len(_effects(db, app_schema, job, "end")) == 1


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_base_exceptions_of_handlers_claimed_ahead_fail_their_attempt_only(
    run_worker, db, app_schema, queue, kind: str
):
    """SystemExit, KeyboardInterrupt, GeneratorExit and a private BaseException from
    handlers that waited in the buffer (one slot, claim-ahead 8): each fails its one
    attempt with HandlerExit, the worker runs on to the ordinary job behind them and
    stops cleanly."""
    whats = ["exit", "interrupt", "abort", "generator"]
    raising = [queue.enqueue(f"raises_{kind}", {"what": w}, max_attempts=1) for w in whats]
    if kind == "async":
        raising.append(queue.enqueue("awaits_a_raising_thread", max_attempts=1))
    last = queue.enqueue("step", {"seconds": 0})
    worker = run_worker("--concurrency", "1", "--claim-ahead", "8", "--poll-interval",
                        "0.2")
    wait_until(lambda: scalar(db, "SELECT status FROM jobs WHERE id = %s", last) == "done",
               timeout=30, what="the ordinary job done after the raising ones")
    assert worker.stop() == 0
    for job in raising:
        row = db.execute("SELECT status, attempts, errors FROM jobs WHERE id = %s",
                         (job,)).fetchone()
        assert (row["status"], row["attempts"]) == ("failed", 1), row
        [error] = row["errors"]
        assert error["type"] == "HandlerExit", error
        assert len(_effects(db, app_schema, job)) == 1


def test_a_stop_with_a_hung_thread_and_jobs_claimed_ahead_ends_in_bounded_time(
    run_worker, db, app_schema, queue
):
    """A sync handler past its timeout for good holds the only slot, four jobs wait
    claimed ahead behind it: SIGTERM stops the worker within the grace and a few
    seconds; the hung job's timeout is written (attempt spent, not released), the four
    go back pending with no attempt spent and never started."""
    hung = queue.enqueue("hangs", max_attempts=3)
    behind = [queue.enqueue("step", {"seconds": 0}) for _ in range(4)]
    worker = run_worker("--concurrency", "1", "--claim-ahead", "4", "--lease", "3",
                        "--shutdown-grace", "1")
    worker.wait_for_log(f"job {hung}: the sync handler of task 'hangs' ran past its "
                        "timeout", timeout=10)
    # Held past its lease by the heartbeat, with its four behind it.
    wait_until(lambda: scalar(db, "SELECT clock_timestamp() - started_at > interval"
                              " '4 s' FROM jobs WHERE id = %s", hung), timeout=10,
               what="the hung job past its lease")
    assert queue.reap() == 0
    assert _held(db) == 5
    began = time.monotonic()
    assert worker.stop(timeout=15) == 0
    assert time.monotonic() - began < 10
    row = db.execute("SELECT status, attempts, claim_token, errors FROM jobs"
                     " WHERE id = %s", (hung,)).fetchone()
    assert (row["status"], row["attempts"], row["claim_token"]) == ("pending", 1, None)
    assert [e["type"] for e in row["errors"]] == ["JobTimeout"]
    for job in behind:
        row = db.execute("SELECT status, attempts, started_at, claim_token FROM jobs"
                         " WHERE id = %s", (job,)).fetchone()
        assert row == {"status": "pending", "attempts": 0, "started_at": None,
                       "claim_token": None}
        assert _effects(db, app_schema, job) == []



def test_sigkilled_workers_claiming_ahead_never_run_a_job_twice_or_lose_attempts(
    run_worker, db, app_schema, queue
):
    """Three workers claiming ahead (two slots, six ahead, a 1 s lease), one of them
    SIGKILLed and replaced every half second a dozen times, the leases reaped all
    along, over 150 short jobs. Afterwards, in SQL: every job done; no attempt number
    of a job started twice unless the reaper recorded that attempt as not counted (a
    handler started from the jobs ahead whose worker died before its start was
    recorded: a hold, and the number is handed out again); each done job's attempts
    are its started attempts the reaper charged plus the one that finished, every
    attempt whose start a dead worker had not recorded given back."""
    jobs = [queue.enqueue("step", {"seconds": 0.05 * (n % 5)}, max_attempts=50)
            for n in range(400)]
    options = ("--concurrency", "2", "--claim-ahead", "6", "--lease", "1",
               "--poll-interval", "0.2")
    workers = [run_worker(*options) for _ in range(3)]
    kills = 0
    for round_ in range(12):
        if scalar(db, "SELECT count(*) FROM jobs WHERE status <> 'done'") == 0:
            break
        victim = workers[round_ % 3]
        # Killed while it holds claims it has not started, so every kill leaves some;
        # unless the queue has drained to the last few meanwhile.
        def ready(v: WorkerProcess = victim) -> bool:
            queue.reap()
            return bool(scalar(db, """
                SELECT count(*) FILTER (WHERE status = 'running' AND started_at IS NULL
                                          AND worker_id LIKE %s) > 0
                    OR count(*) FILTER (WHERE status = 'pending') = 0
                FROM jobs""", f"%:{v.pid}:%"))

        wait_until(ready, timeout=20, what="the victim holding jobs claimed ahead")
        if not scalar(db, "SELECT count(*) FROM jobs WHERE status = 'pending'"):
            break
        victim.kill()
        kills += 1
        workers[round_ % 3] = run_worker(*options)
    wait_until(lambda: queue.reap() >= 0 and scalar(
        db, "SELECT count(*) FROM jobs WHERE status <> 'done'") == 0, timeout=90,
        what="every job done")
    for worker in workers:
        assert worker.stop() == 0
    assert kills >= 3
    twice = db.execute(f"""
        SELECT s.job_id, s.attempt, s.starts FROM (
            SELECT job_id, attempt, count(*) AS starts FROM "{app_schema}".effects
            WHERE what = 'start' GROUP BY job_id, attempt) AS s
        JOIN jobs AS j ON j.id = s.job_id
        WHERE s.starts > 1 + (
            SELECT count(*) FROM jsonb_array_elements(j.errors) AS e
            WHERE e ->> 'type' = 'LeaseExpired' AND e -> 'started' = 'false'::jsonb
              AND (e ->> 'attempt')::integer = s.attempt)
        ORDER BY s.job_id LIMIT 10""").fetchall()
    assert twice == [], f"an attempt number started twice: {twice}"
    wrong = db.execute("""
        SELECT id, attempts, errors FROM jobs
        WHERE id = ANY(%s) AND attempts <> 1 + (
            SELECT count(*) FROM jsonb_array_elements(errors) AS e
            WHERE (e ->> 'started')::boolean)
        LIMIT 5""", (jobs,)).fetchall()
    assert wrong == [], f"attempts that are not the started ones: {wrong}"
    assert scalar(db, f"""
        SELECT count(*) FROM jobs AS j WHERE j.id = ANY(%s) AND j.attempts <> (
            SELECT max(e.attempt) FROM "{app_schema}".effects AS e
            WHERE e.job_id = j.id AND e.what = 'end')""", jobs) == 0
    # The kills left claims never started behind, given back by the reaper.
    assert scalar(db, "SELECT count(*) FROM jobs, jsonb_array_elements(errors) AS e"
                  " WHERE e ->> 'type' = 'LeaseExpired' AND e ->> 'started' = 'false'"
                  ) >= kills


def test_a_rate_limited_queue_never_starts_more_handlers_than_its_rate_with_claim_ahead(
    run_worker, db, app_schema, queue
):
    """2/s on queue 'r', two slots and two claimed ahead: two 3 s jobs, then short
    ones. The short jobs claimed during the long ones wait, and start when the long
    ones end, right beside the next ones claimed: in SQL, no 0.8 s of handler starts
    may hold more than two (the 0.2 s short of the window allow for the time from a
    claim to its handler's start row). A worker serving a rate-limited queue claims
    none of its jobs ahead: the claim logs their starts."""
    queue.set_rate("r", "2/s")
    queue.enqueue_many([{"task": "step", "args": {"seconds": 3.0}, "queue": "r"}] * 2
                       + [{"task": "step", "args": {"seconds": 0.1}, "queue": "r"}] * 8)
    worker = run_worker("--concurrency", "2", "--claim-ahead", "2", "--poll-interval",
                        "0.1")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE status = 'done'") == 10,
               timeout=60, what="every job done")
    assert worker.stop() == 0
    busiest = scalar(db, f"""
        SELECT max((SELECT count(*) FROM "{app_schema}".effects AS other
                    WHERE other.what = 'start' AND other.at >= s.at
                      AND other.at < s.at + interval '0.8 s'))
        FROM "{app_schema}".effects AS s WHERE s.what = 'start'""")
    assert busiest <= 2, f"{busiest} handlers of a 2/s queue started within 0.8 s"
