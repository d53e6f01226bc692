"""Worker processes for the dependency and batch hammers (test_flow_deps.py, beside).

Each process claims, "works" a few milliseconds, and completes or fails each job as its
args say, recording in the effects table when each handler began and ended by the
server's clock: `began` after the claim committed, `ended` before the outcome is sent.
"""

from __future__ import annotations

import multiprocessing.synchronize
import random
import time
from typing import Any

import psycopg

import pgbaton
from tests.hammer import _racing

UNFINISHED = "SELECT count(*) FROM jobs WHERE status IN ('pending', 'waiting', 'running')"


def _write(call: Any, *args: Any) -> tuple[Any, int]:
    """A completion or failure, written again after a deadlock (as the worker's
    completer does after any failed write): the statement was undone whole, and its
    rows are fenced by their tokens."""
    for deadlocks in range(20):
        try:
            return call(*args), deadlocks
        except psycopg.errors.DeadlockDetected:
            continue
    raise AssertionError("20 deadlocks in a row")


def work_until_nothing_is_left(
    index: int, start: multiprocessing.synchronize.Barrier, dsn: str, schema: str, replay: int
) -> dict[str, Any]:
    """Claim 1..4 jobs at a time until no job is pending, waiting or running."""
    rng = random.Random(replay * 1000 + index)
    worker = f"w{index}"
    claimed = idle = deadlocks = 0
    with _racing(start, dsn, schema, worker) as (queue, effects, check_time):
        while True:
            check_time()
            claims = queue.claim(worker, limit=rng.randint(1, 4), lease=60)
            if not claims:
                row = effects.execute(UNFINISHED).fetchone()
                if row is not None and row[0] == 0:
                    break
                # What is left waits for jobs another worker holds: give it a moment.
                idle += 1
                time.sleep(0.002)
                continue
            claimed += len(claims)
            effects.execute(
                "INSERT INTO effects (job_id, worker, began)"
                " SELECT id, %s, clock_timestamp() FROM unnest(%s::bigint[]) AS id",
                (worker, [claim.id for claim in claims]),
            )
            if rng.random() < 0.5:
                time.sleep(rng.random() * 0.003)
            effects.execute(
                "UPDATE effects SET ended = clock_timestamp() WHERE job_id = ANY(%s)",
                ([claim.id for claim in claims],),
            )
            failing = [c for c in claims if c.args.get("fail")]
            passing = [c for c in claims if not c.args.get("fail")]
            accepted: list[bool] = []
            if failing:
                written, retried = _write(
                    queue.fail_many, [(claim, "planned", 0.0) for claim in failing]
                )
                accepted += written
                deadlocks += retried
            if passing and rng.random() < 0.5:
                for claim in passing:  # one statement each: the last ends race more
                    written, retried = _write(queue.complete_many, [(claim, None)])
                    accepted += written
                    deadlocks += retried
            elif passing:
                written, retried = _write(
                    queue.complete_many, [(claim, None) for claim in passing]
                )
                accepted += written
                deadlocks += retried
            assert all(accepted), f"{worker} lost a claim nobody else could take"
    return {"claimed": claimed, "idle": idle, "deadlocks": deadlocks}


def enqueue_graph(queue: pgbaton.Queue, rng: random.Random, calls: int, per_call: int) -> None:
    """`calls` enqueue_many calls of `per_call` jobs, each job after 0..3 jobs chosen
    among the earlier jobs of its call (by label) and of earlier calls (by id); one job
    in 15 fails, one in 8 runs after a failed parent."""
    written: list[int] = []
    for call in range(calls):
        jobs: list[dict[str, Any]] = []
        for n in range(per_call):
            parents: list[int | str] = []
            for _ in range(rng.randint(0, 3)):
                if n and rng.random() < 0.6:
                    parents.append(f"c{call}-{rng.randrange(n)}")
                elif written:
                    parents.append(rng.choice(written[-3 * per_call:]))
            job: dict[str, Any] = {
                "task": "step", "label": f"c{call}-{n}", "after": parents,
                "args": {"fail": rng.random() < 1 / 15}, "max_attempts": 1,
                "priority": rng.randrange(3),
            }
            if rng.random() < 1 / 8:
                job["after_failure"] = "run"
            jobs.append(job)
        written += queue.enqueue_many(jobs)
