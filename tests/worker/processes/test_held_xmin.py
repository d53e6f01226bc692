"""A transaction that holds back vacuum must not collapse the claim (issue 27;
docs/explanation/scaling.md, "A held xmin"). While a session holds an old snapshot, no
VACUUM can remove the index entries of the jobs claimed since, and no index scan can
mark them dead: they pile up at the head of the claim's index, where every claim starts.

The cell: a paced producer offers RATE jobs a second (bulk enqueues every 50 ms), a real
`pgbaton worker` process drains them, and after a warm-up one session runs
`BEGIN; SELECT txid_current()` and sits idle for HOLD seconds (the other case: four
REPEATABLE READ sessions scanning the jobs table in a loop). Every 5 s the test reads,
from the jobs table's own timestamps, how many jobs finished in the last 5 s and how
long the ones started in them waited (started_at - created_at): during the hold the
completions stay at 90% of what was offered or more, and the wait's p99 under 1 s (no
two 5 s windows in a row short of either: a single one is seen without any hold, and
the next window catches it up), and at the end of the hold no more than one window's
offer waits.

RATE: half of what one worker process drained on this machine (545 to 600 jobs/s, 2 cores
shared with other suites) with nobody holding the horizon; PGBATON_XMIN_RATE overrides
it. At 300 and 450 the claim from the head held the targets here too (its dead head cost
5 ms a claim 60 s in): the collapse the issue saw at 2,000 jobs/s is past this machine.
So the test also EXPLAINs the claim 60 s into the hold, past the worker's mark and from
the head, and checks that the first does not read the dead head.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from benchmarks.held_xmin import WINDOW_SQL
from psycopg.rows import dict_row

import pgbaton
from pgbaton import _sql
from tests.worker_processes import WorkerProcess, scalar, wait_until

pytestmark = pytest.mark.slow

RATE = int(os.environ.get("PGBATON_XMIN_RATE", "300"))
HOLD = float(os.environ.get("PGBATON_XMIN_HOLD", "90"))
WARMUP = 15.0
SAMPLE = 5.0
TICK = 0.05  # the producer enqueues RATE * TICK jobs every TICK seconds

# The window the bench case reads too (make bench, held_xmin), on the test's schema.
WINDOW = WINDOW_SQL.format(jobs="jobs")


@dataclass
class Sample:
    at: float  # seconds since the producer started
    phase: str
    finished: int
    offered: int
    backlog: int
    wait_p50: float | None
    wait_p99: float | None
    dead: int

    def line(self) -> str:
        p50 = "-" if self.wait_p50 is None else f"{self.wait_p50 * 1000:.0f}"
        p99 = "-" if self.wait_p99 is None else f"{self.wait_p99 * 1000:.0f}"
        return (f"{self.at:6.1f}s {self.phase:7} done/s {self.finished / SAMPLE:7.0f} "
                f"offered/s {self.offered / SAMPLE:7.0f} backlog {self.backlog:7d} "
                f"wait p50 {p50:>6} ms p99 {p99:>6} ms dead {self.dead}")


class Producer(threading.Thread):
    """RATE jobs a second, in bulk every TICK, paced on the clock (a late tick catches up
    in its next enqueue rather than drifting)."""

    def __init__(self, dsn: str, schema: str) -> None:
        super().__init__(daemon=True)
        self.queue = pgbaton.Queue(dsn, schema=schema)
        self.stop = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        start = time.monotonic()
        try:
            while not self.stop.is_set():
                due = int((time.monotonic() - start) * RATE) - self.sent
                if due > 0:
                    self.queue.enqueue_many([{"task": "noop"} for _ in range(due)])
                    self.sent += due
                self.stop.wait(TICK)
        except BaseException as error:  # the test reports it
            self.error = error
        finally:
            self.queue.close()


@contextmanager
def held_xmin(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """The harness's holder: an xid taken and the session left idle in its transaction."""
    with psycopg.connect(dsn, application_name="xmin-holder") as holder:
        holder.execute("BEGIN")
        holder.execute("SELECT txid_current()")
        yield holder
        holder.rollback()


@contextmanager
def scanning_readers(dsn: str, schema: str, count: int = 4) -> Iterator[None]:
    """Analytics readers: REPEATABLE READ transactions scanning the jobs table over and
    over, one after the other on each session, so some snapshot is always held."""
    stop = threading.Event()

    def read() -> None:
        with psycopg.connect(dsn, application_name="xmin-reader") as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            while not stop.is_set():
                with conn.transaction():
                    conn.execute(f'SELECT count(*), sum(length(args::text)) FROM "{schema}".jobs')
                    conn.execute(f'SELECT status, count(*) FROM "{schema}".jobs GROUP BY 1')

    threads = [threading.Thread(target=read, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)


MARK = """
SELECT json_build_object('every', json_build_array(priority, run_at, id))::text AS mark
FROM jobs WHERE task = 'noop' AND status <> 'pending'
ORDER BY priority, run_at DESC, id DESC LIMIT 1
"""


def explain_claim(dsn: str, schema: str, after: str | None) -> tuple[str, int]:
    """EXPLAIN (ANALYZE, BUFFERS) of the claim as a worker runs it, rolled back: its
    plan, and the buffers it touched. `after`: the claim's marks (claim_marks.py)."""
    text = _sql.queries(schema)["job_claim_many"]
    params = {"worker_id": "explain", "limit": 32, "lease": 30.0, "queues": None,
              "tasks": None, "starting": 32, "after": after}
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {text}",  # type: ignore[arg-type]
                            params).fetchall()
        conn.rollback()
        [[plan]] = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {text}",  # type: ignore[arg-type]
                                params).fetchall()
        conn.rollback()
    scan = _candidate_scan(plan[0]["Plan"])
    assert scan, "the claim's plan has no `candidate` CTE:\n" + "\n".join(r[0] for r in rows)
    buffers = int(scan["Shared Hit Blocks"]) + int(scan["Shared Read Blocks"])
    return "\n".join(r[0] for r in rows), buffers


def _candidate_scan(node: dict[str, Any]) -> dict[str, Any]:
    """The plan node that finds and locks the jobs to claim (the statement's `candidate`
    CTE), where a dead head is read. Not the whole statement: its UPDATE of 32 rows and
    their index entries touch hundreds of buffers more, a number that grows with the
    table and the load of the machine and says nothing of the head."""
    if node.get("Subplan Name") == "CTE candidate":
        return node
    for child in node.get("Plans", []):
        found = _candidate_scan(child)
        if found:
            return found
    return {}


def run_cell(
    dsn: str, schema: str, start_worker: Callable[..., WorkerProcess],
    hold: Callable[[], Any], *, dead_head: bool,
) -> tuple[list[Sample], str]:
    """`dead_head`: whether the hold keeps one horizon all along (the readers' snapshots
    move on with each scan, so scans mark the head's entries dead and it stays short)."""
    worker = start_worker("--concurrency", "32")
    producer = Producer(dsn, schema)
    samples: list[Sample] = []
    plan = ""
    marked = head = 0
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as db:
        db.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
        began = time.monotonic()
        next_at = began + SAMPLE

        def sample(phase: str) -> None:
            nonlocal next_at
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at += SAMPLE
            row = db.execute(WINDOW, {"w": SAMPLE}).fetchone()
            assert row is not None
            dead = scalar(db, "SELECT n_dead_tup FROM pg_stat_user_tables"
                              " WHERE relid = 'jobs'::regclass")
            samples.append(Sample(time.monotonic() - began, phase, row["finished"],
                                  row["offered"], row["backlog"], row["wait_p50"],
                                  row["wait_p99"], dead))
            print(samples[-1].line(), flush=True)

        producer.start()
        try:
            while time.monotonic() - began < WARMUP:
                sample("warmup")
            with hold():
                hold_began = time.monotonic()
                while time.monotonic() - hold_began < HOLD:
                    sample("hold")
                    if not plan and time.monotonic() - hold_began >= HOLD * 2 / 3:
                        # The claim as the worker makes it (past its mark), and the
                        # claim from the head of the index that it makes as a rule.
                        mark = scalar(db, MARK)
                        plan, marked = explain_claim(dsn, schema, mark)
                        head_plan, head = explain_claim(dsn, schema, None)
                        plan = (f"past the mark {mark}: {marked} buffers\n{plan}\n\n"
                                f"from the head: {head} buffers\n{head_plan}")
            sample("after")
        finally:
            producer.stop.set()
            producer.join(30)
        assert producer.error is None, producer.error
        wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE task = 'noop'"
                                      " AND status <> 'done'") == 0,
                   timeout=300, what="every job done")
        # Each job ran once: no claim handed a job out twice while the head was dead.
        assert scalar(db, "SELECT count(*) FROM jobs WHERE task = 'noop'"
                                  " AND attempts <> 1") == 0
        assert scalar(db, "SELECT count(*) FROM jobs WHERE task = 'noop'") == producer.sent
    worker.stop()
    # The claim past its mark does not read the dead head; from the head it does.
    assert marked < 200, plan
    if dead_head:
        assert head > 5 * marked, plan
    return samples, plan


def check(samples: list[Sample], plan: str) -> None:
    held = [s for s in samples if s.phase == "hold"]
    report = "\n".join(s.line() for s in samples) + "\n\nclaim during the hold:\n" + plan
    print(report)
    assert held
    # A collapse lasts: one 5 s window short of its offer or with a p99 past 1 s happens
    # in the warm-up too (a checkpoint, another suite on the same two cores: CI's full
    # lane saw 251 of 300 a second once, and 349 in the window after); two windows in a
    # row do not, and what waits at the end of the hold is no more than one window's offer.
    short = [s.finished < 0.9 * s.offered for s in held]
    over = [s.wait_p99 is not None and s.wait_p99 >= 1.0 for s in held]
    slow = [held[i] for i in range(1, len(held)) if short[i - 1] and short[i]]
    late = [held[i] for i in range(1, len(held)) if over[i - 1] and over[i]]
    behind = held[-1].backlog > held[-1].offered
    assert not slow and not late and not behind, (
        f"the claim collapsed under the held xmin:\n{report}")


def test_a_held_xmin_does_not_collapse_the_claim(dsn: str, app_schema: str, start_worker):
    samples, plan = run_cell(dsn, app_schema, start_worker, lambda: held_xmin(dsn), dead_head=True)
    check(samples, plan)


def test_scanning_readers_do_not_collapse_the_claim(dsn: str, app_schema: str, start_worker):
    samples, plan = run_cell(dsn, app_schema, start_worker,
                             lambda: scanning_readers(dsn, app_schema), dead_head=False)
    check(samples, plan)
