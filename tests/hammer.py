"""Worker processes for the hammers (the slow tests in processes/ folders that race OS
processes): each is its own OS process with its own Queue.

Workers write what they saw into effects tables that the test created in its schema,
so that the test can check the invariants in SQL once every process has exited.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.synchronize
import queue as stdlib_queue
import random
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

import pgbaton

# Spawned processes share nothing with the test process: no inherited connections,
# pools or locks, exactly like separate worker hosts.
SPAWN = multiprocessing.get_context("spawn")

# A spawned process imports psycopg and pgbaton afresh; on a loaded 2-core CI machine
# that takes seconds, so the start line waits generously.
START_TIMEOUT_SECONDS = 60.0
# Far above a healthy run (a few seconds); a worker that is still going by then is
# stuck, and the test fails instead of hanging.
RUN_TIMEOUT_SECONDS = 120.0

Worker = Callable[..., dict[str, Any]]


def run_workers(target: Worker, count: int, *args: Any) -> list[dict[str, Any]]:
    """Run `count` spawned processes of target(index, start, *args) and return their
    summaries, in worker order. Any worker's exception fails the caller with its traceback."""
    start = SPAWN.Barrier(count)
    reports = SPAWN.Queue()
    processes = [
        SPAWN.Process(
            target=_worker_main,
            args=(target, index, start, reports, *args),
            name=f"pgbaton-hammer-{index}",
        )
        for index in range(count)
    ]
    for process in processes:
        process.start()
    summaries: list[dict[str, Any]] = []
    try:
        for _ in range(count):
            try:
                summaries.append(reports.get(timeout=START_TIMEOUT_SECONDS + RUN_TIMEOUT_SECONDS))
            except stdlib_queue.Empty:
                codes = {process.name: process.exitcode for process in processes}
                raise AssertionError(f"a worker never reported; exit codes: {codes}") from None
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()
    errors = [summary["error"] for summary in summaries if "error" in summary]
    assert not errors, "worker(s) failed:\n" + "\n".join(errors)
    assert [process.exitcode for process in processes] == [0] * count
    return sorted(summaries, key=lambda summary: summary["worker"])


def _worker_main(
    target: Worker,
    index: int,
    start: multiprocessing.synchronize.Barrier,
    reports: multiprocessing.Queue[dict[str, Any]],
    *args: Any,
) -> None:
    try:
        summary = target(index, start, *args)
        reports.put({"worker": index, **summary})
    except BaseException:
        # Release the others from the start line at once instead of at its timeout.
        start.abort()
        reports.put({"worker": index, "error": f"worker {index}:\n{traceback.format_exc()}"})


def _effects_connection(dsn: str, schema: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
    return conn


def _count_pending(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM jobs WHERE status = 'pending'").fetchone()
    assert row is not None
    return int(row[0])


@contextlib.contextmanager
def _racing(
    start: multiprocessing.synchronize.Barrier, dsn: str, schema: str, worker: str
) -> Iterator[tuple[pgbaton.Queue, psycopg.Connection[Any], Callable[[], None]]]:
    """A worker's queue and effects connection, opened before the start line so that
    the race begins at the first claim; and a check that raises once time is up."""
    with (
        pgbaton.Queue(dsn, schema=schema) as queue,
        _effects_connection(dsn, schema) as effects,
    ):
        queue.stats()  # opens the pool
        start.wait(timeout=START_TIMEOUT_SECONDS)
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS

        def check_time() -> None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{worker} still claiming after {RUN_TIMEOUT_SECONDS} s")

        yield queue, effects, check_time


def claim_until_empty(
    index: int, start: multiprocessing.synchronize.Barrier, dsn: str, schema: str, replay: int
) -> dict[str, Any]:
    """Claim in random batches of 1..20 and complete at once, until nothing is pending.

    Every claim received and whether its completion was accepted go to claims_log.
    """
    rng = random.Random(replay * 1000 + index)
    worker = f"w{index}"
    began = time.monotonic()
    with _racing(start, dsn, schema, worker) as (queue, effects, check_time):
        claims_received = empty_claims = 0
        while True:
            check_time()
            claims = queue.claim(worker, limit=rng.randint(1, 20), lease=60)
            if not claims:
                empty_claims += 1
                # Empty while jobs are pending means every pending row was locked by
                # another claim at that instant: claim again, the race is the point.
                if _count_pending(effects) == 0:
                    break
                continue
            claims_received += len(claims)
            # Both completion paths must be fenced alike; one job per statement is the
            # slow one, so it gets a quarter of the batches.
            if rng.random() < 0.25:
                accepted = [queue.complete(claim, {"by": worker}) for claim in claims]
            else:
                accepted = queue.complete_many([(claim, {"by": worker}) for claim in claims])
            effects.execute(
                "INSERT INTO claims_log (job_id, token, worker, attempts, completed)"
                " SELECT * FROM unnest(%s::bigint[], %s::uuid[], %s::text[], %s::int[],"
                " %s::bool[])",
                (
                    [claim.id for claim in claims],
                    [claim.token for claim in claims],
                    [worker] * len(claims),
                    [claim.attempts for claim in claims],
                    accepted,
                ),
            )
    return {
        "claims": claims_received,
        "empty_claims": empty_claims,
        "seconds": round(time.monotonic() - began, 2),
    }


def work_keyed_jobs(
    index: int, start: multiprocessing.synchronize.Barrier, dsn: str, schema: str, replay: int
) -> dict[str, Any]:
    """Claim in random batches of 1..10, work a few milliseconds, complete, until
    nothing is pending.

    Each claim's handler interval goes to effects, timed by the server's clock_timestamp():
    `began` after the claim has committed, `ended` before the completion is sent, so the
    interval lies strictly inside the time the worker held the job.
    """
    rng = random.Random(replay * 1000 + index)
    worker = f"w{index}"
    began = time.monotonic()
    with _racing(start, dsn, schema, worker) as (queue, effects, check_time):
        claims_received = waits = 0
        while True:
            check_time()
            claims = queue.claim(worker, limit=rng.randint(1, 10), lease=60)
            if not claims:
                if _count_pending(effects) == 0:
                    break
                # What is pending waits behind a running job of its key, held by
                # another worker; give that worker a moment to finish it.
                waits += 1
                time.sleep(0.002)
                continue
            claims_received += len(claims)
            ids = [claim.id for claim in claims]
            tokens = [claim.token for claim in claims]
            effects.execute(
                "INSERT INTO effects (job_id, token, key, worker, began)"
                " SELECT held.id, held.token, held.key, %s, clock_timestamp()"
                " FROM unnest(%s::bigint[], %s::uuid[], %s::text[]) AS held(id, token, key)",
                (worker, ids, tokens, [claim.key for claim in claims]),
            )
            time.sleep(rng.uniform(0.002, 0.008))  # the handler's work
            effects.execute(
                "UPDATE effects SET ended = clock_timestamp() WHERE token = ANY(%s::uuid[])",
                (tokens,),
            )
            accepted = queue.complete_many([(claim, None) for claim in claims])
            effects.execute(
                "UPDATE effects AS e SET completed = r.completed"
                " FROM unnest(%s::uuid[], %s::bool[]) AS r(token, completed)"
                " WHERE e.token = r.token",
                (tokens, accepted),
            )
    return {
        "claims": claims_received,
        "waits": waits,
        "seconds": round(time.monotonic() - began, 2),
    }


# The keyed jobs under an operator: leases far longer than any handler, so that only the
# holds of cancelled jobs, never an expired lease, keep two handlers of a key apart.
OPERATOR_LEASE_SECONDS = 60.0
OPERATOR_ACTIONS = 60


def _unfinished(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM jobs WHERE status IN ('pending', 'running')"
    ).fetchone()
    assert row is not None
    return int(row[0])


def _operator_done(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT count(*) FROM operator_done").fetchone()
    assert row is not None
    return int(row[0]) > 0


def keyed_jobs_under_an_operator(
    index: int, start: multiprocessing.synchronize.Barrier, dsn: str, schema: str, replay: int
) -> dict[str, Any]:
    """Process 0 is an operator who cancels running keyed jobs and often retries them a
    moment later; the others work keyed jobs as work_keyed_jobs does, heartbeat once
    mid-handler, and on a lost claim either stop at once or (a handler that ignores
    should_stop) run to its end, then release the lost claim. Handler intervals go to
    effects, timed by the server's clock inside the time each worker held the job."""
    rng = random.Random(replay * 1000 + index)
    worker = f"w{index}"
    began = time.monotonic()
    with _racing(start, dsn, schema, worker) as (queue, effects, check_time):
        if index == 0:
            return _operate(queue, effects, check_time, rng, began)
        claims_received = lost = 0
        while True:
            check_time()
            claims = queue.claim(worker, limit=rng.randint(1, 4), lease=OPERATOR_LEASE_SECONDS)
            if not claims:
                if _operator_done(effects) and _unfinished(effects) == 0:
                    break
                time.sleep(0.005)
                continue
            claims_received += len(claims)
            effects.execute(
                "INSERT INTO effects (job_id, token, key, worker, began)"
                " SELECT held.id, held.token, held.key, %s, clock_timestamp()"
                " FROM unnest(%s::bigint[], %s::uuid[], %s::text[]) AS held(id, token, key)",
                (worker, [c.id for c in claims], [c.token for c in claims],
                 [c.key for c in claims]),
            )
            time.sleep(rng.uniform(0.005, 0.02))
            held = queue.heartbeat(claims, lease=OPERATOR_LEASE_SECONDS)
            stopping = [
                c for c, h in zip(claims, held, strict=True) if not h and rng.random() < 0.5
            ]
            _end(effects, stopping)
            queue.release_many(stopping)  # lost claims: let go once the handler stopped
            rest = [c for c in claims if c not in stopping]
            time.sleep(rng.uniform(0.005, 0.02))
            _end(effects, rest)
            accepted = queue.complete_many([(c, None) for c in rest])
            refused = [c for c, ok in zip(rest, accepted, strict=True) if not ok]
            queue.release_many(refused)
            lost += len(stopping) + len(refused)
    return {
        "claims": claims_received,
        "lost": lost,
        "seconds": round(time.monotonic() - began, 2),
    }


def _end(effects: psycopg.Connection[Any], claims: list[pgbaton.Claim]) -> None:
    if claims:
        effects.execute(
            "UPDATE effects SET ended = clock_timestamp() WHERE token = ANY(%s::uuid[])",
            ([c.token for c in claims],),
        )


def _operate(
    queue: pgbaton.Queue,
    effects: psycopg.Connection[Any],
    check_time: Callable[[], None],
    rng: random.Random,
    began: float,
) -> dict[str, Any]:
    cancelled = retried = 0
    while cancelled < OPERATOR_ACTIONS:
        check_time()
        row = effects.execute(
            "SELECT id FROM jobs WHERE status = 'running' AND key IS NOT NULL"
            " ORDER BY random() LIMIT 1"
        ).fetchone()
        if row is None:
            if _unfinished(effects) == 0:
                break
            time.sleep(0.002)
            continue
        if queue.cancel(row[0]):
            cancelled += 1
            # `pgbaton retry` a moment later, while the handler may still run.
            if rng.random() < 0.6:
                time.sleep(rng.uniform(0, 0.01))
                retried += queue.retry(row[0])
        time.sleep(rng.uniform(0.002, 0.01))
    effects.execute("INSERT INTO operator_done VALUES (true)")
    seconds = round(time.monotonic() - began, 2)
    return {"cancelled": cancelled, "retried": retried, "seconds": seconds}


# Idempotency keys per task that the racing producers all enqueue.
RACED_KEYS = 300


def enqueue_keys_once(
    index: int, start: multiprocessing.synchronize.Barrier, dsn: str, schema: str, replay: int
) -> dict[str, Any]:
    """Enqueue every idempotency key of two tasks, in the order all processes share (so
    that they meet on each key at the same moment), one at a time (enqueue_once) or in
    small batches (enqueue_many) as this process draws; every answer goes to outcomes,
    so the test can check in SQL that all processes were told the same job."""
    rng = random.Random(replay * 1000 + index)
    worker = f"p{index}"
    began = time.monotonic()
    with _racing(start, dsn, schema, worker) as (queue, effects, check_time):
        # While the previous release's global index stands, the two tasks use keys of
        # their own; once it is gone, they share them.
        row = effects.execute(
            "SELECT to_regclass('jobs_idempotency_key_unique') IS NULL AS per_task"
        ).fetchone()
        assert row is not None
        wanted = [
            (task, f"order-{n}" if row[0] else f"{task}-{n}")
            for task in ("charge_card", "send_receipt")
            for n in range(RACED_KEYS)
        ]
        random.Random(replay).shuffle(wanted)
        answers: list[tuple[str, str, int, bool | None]] = []
        position = 0
        while position < len(wanted):
            check_time()
            if rng.random() < 0.5:
                task, key = wanted[position]
                outcome = queue.enqueue_once(task, {"by": worker}, idempotency_key=key)
                answers.append((task, key, outcome.id, outcome.created))
                position += 1
            else:
                batch = wanted[position:position + rng.randint(2, 10)]
                ids = queue.enqueue_many(
                    [{"task": task, "idempotency_key": key} for task, key in batch]
                )
                answers += [(t, k, i, None) for (t, k), i in zip(batch, ids, strict=True)]
                position += len(batch)
        effects.execute(
            "INSERT INTO outcomes (process, task, idempotency_key, job_id, created)"
            " SELECT %s, * FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::bool[])",
            (worker, [a[0] for a in answers], [a[1] for a in answers],
             [a[2] for a in answers], [a[3] for a in answers]),
        )
    return {"answers": len(answers), "seconds": round(time.monotonic() - began, 2)}
