"""The lab's worker processes: each claim strategy as a loop over one connection.

These functions run in processes spawned by the lab (lab_runner.py): they import only
what a strategy needs, count their own round trips and lost races, and keep each job's
external effect to be written after the run.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import DictRow

from .. import _database, _sql

SPAWN = multiprocessing.get_context("spawn")

BATCH_SIZE = 10
# A spawned worker imports psycopg afresh; on a busy 2-core machine that takes seconds.
START_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class Strategy:
    number: int
    name: str  # short, for the table and the chart
    description: str


STRATEGIES = (
    Strategy(1, "SELECT+UPDATE",
             "SELECT the oldest pending id, then UPDATE ... WHERE id = $1, unchecked"),
    Strategy(2, "SELECT+guarded UPDATE",
             "the same, the UPDATE guarded by AND status = 'pending', row count checked"),
    Strategy(3, "FOR UPDATE, held",
             "BEGIN; SELECT ... FOR UPDATE; work; UPDATE; COMMIT (the practice question)"),
    Strategy(4, "SKIP LOCKED",
             "pgbaton's one-statement SKIP LOCKED claim; work; complete with its token"),
    Strategy(5, f"SKIP LOCKED x{BATCH_SIZE}",
             f"the same, claiming and completing {BATCH_SIZE} jobs at a time"),
)


@dataclass(frozen=True)
class WorkerTask:
    """What one worker process runs for one strategy."""

    strategy: int
    dsn: str
    schema: str
    application_name: str
    work_seconds: float
    race_gap_seconds: float
    lease_seconds: float
    timeout_seconds: float


@dataclass
class _Session:
    """One worker's connection and its own counts of what it did."""

    conn: psycopg.Connection[DictRow]
    sql: dict[str, str]
    task: WorkerTask
    worker: str
    deadline: float
    round_trips: int = 0
    lost_races: int = 0
    effects: list[tuple[int, float]] = field(default_factory=list)

    def run(self, name: str, **params: Any) -> psycopg.Cursor[DictRow]:
        if time.monotonic() > self.deadline:
            raise TimeoutError(
                f"{self.worker} still working after {self.task.timeout_seconds:.0f} s"
            )
        self.round_trips += 1
        return self.conn.execute(self.sql[name], params)

    def perform(self, job_id: int) -> None:
        """The job's work, then its external effect (an email, say).

        The effect is kept here and written to the effects table after the run: like an
        email it must not roll back with the claim's transaction, and writing it must
        not add a round trip that the strategies would be measured on.
        """
        if self.task.work_seconds:
            time.sleep(self.task.work_seconds)
        self.effects.append((job_id, time.time()))

    def race_gap(self) -> None:
        """The application's time between reading an id and updating its row."""
        if self.task.race_gap_seconds:
            time.sleep(self.task.race_gap_seconds)

    def jobs_left(self) -> bool:
        row = self.run("lab_pending_exists").fetchone()
        return bool(row and row["pending"])


def _select_then_update(session: _Session, *, guarded: bool) -> None:
    update = "lab_guarded_update" if guarded else "lab_naive_update"
    while True:
        row = session.run("lab_naive_select").fetchone()
        if row is None:
            return
        job_id = row["id"]
        session.race_gap()
        if session.run(update, id=job_id, worker=session.worker).rowcount == 0:
            session.lost_races += 1
            continue
        session.perform(job_id)
        session.run("lab_job_finish", id=job_id)


def _naive(session: _Session) -> None:
    _select_then_update(session, guarded=False)


def _guarded(session: _Session) -> None:
    _select_then_update(session, guarded=True)


def _for_update_held(session: _Session) -> None:
    while True:
        with session.conn.transaction():
            session.round_trips += 2  # BEGIN and COMMIT
            row = session.run("lab_locking_select").fetchone()
            if row is not None:
                session.perform(row["id"])
                session.run("lab_job_finish", id=row["id"])
        if row is None:
            if not session.jobs_left():
                return
            session.lost_races += 1


def _skip_locked(session: _Session, batch: int) -> None:
    while True:
        claimed = session.run(
            "lab_skip_locked_claim", limit=batch, lease=session.task.lease_seconds,
            worker=session.worker,
        ).fetchall()
        if not claimed:
            if not session.jobs_left():
                return
            session.lost_races += 1
            continue
        for row in claimed:
            session.perform(row["id"])
        session.run(
            "lab_skip_locked_complete",
            ids=[row["id"] for row in claimed], tokens=[row["claim_token"] for row in claimed],
        )


def _skip_locked_one(session: _Session) -> None:
    _skip_locked(session, 1)


def _skip_locked_batch(session: _Session) -> None:
    _skip_locked(session, BATCH_SIZE)


_LOOPS: dict[int, Callable[[_Session], None]] = {
    1: _naive, 2: _guarded, 3: _for_update_held, 4: _skip_locked_one, 5: _skip_locked_batch,
}


def _run_task(
    index: int, start: multiprocessing.synchronize.Barrier, task: WorkerTask
) -> dict[str, Any]:
    worker = f"w{index}"
    with _database.connect(
        task.dsn, autocommit=True, application_name=f"{task.application_name}{index}"
    ) as conn:
        session = _Session(
            conn, _sql.queries(task.schema), task, worker,
            deadline=time.monotonic() + START_TIMEOUT_SECONDS + task.timeout_seconds,
        )
        start.wait(timeout=START_TIMEOUT_SECONDS)
        started = time.time()
        _LOOPS[task.strategy](session)
        finished = time.time()
    return {
        "worker": worker, "started": started, "finished": finished,
        "round_trips": session.round_trips, "lost_races": session.lost_races,
        "effects": session.effects,
    }


def worker_main(
    index: int,
    start: multiprocessing.synchronize.Barrier,
    tasks: multiprocessing.Queue[WorkerTask | None],
    reports: multiprocessing.Queue[dict[str, Any]],
) -> None:
    """A lab worker process: runs one task per strategy until it is sent None."""
    while True:
        try:
            task = tasks.get()
        except KeyboardInterrupt:
            return  # the lab process cleans up
        if task is None:
            return
        try:
            reports.put(_run_task(index, start, task))
        except KeyboardInterrupt:
            return
        except BaseException:
            # Release the others from the start line at once instead of at its timeout.
            start.abort()
            reports.put({"worker": f"w{index}", "error": traceback.format_exc()})
            return
