"""The failover run: producers and workers on a primary with a streaming standby, the
primary SIGKILLed mid-run and the standby promoted; then what survived, counted in SQL."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tests.fleet.producer import TASK, idempotency_key
from tests.fleet.servers import ReplicatedPair

ROOT = Path(__file__).resolve().parents[2]

# Per job that ran more than once, each extra run must be accounted for: either by a
# repeated attempt number (the claim committed on the old primary was lost, and the job
# was claimed again at the same attempt) or by an error the job records (a handler that
# failed while the database was away, or "LeaseExpired" from the reaper).
DUPLICATES_SQL = """
WITH runs AS (
    SELECT job_id, count(*) AS runs, count(DISTINCT attempt) AS attempts_seen
    FROM "{schema}".effects WHERE what = 'start' GROUP BY job_id
), repeated AS (
    SELECT r.*, j.errors,
           jsonb_path_exists(j.errors, '$[*] ? (@.type == "LeaseExpired")') AS reaped
    FROM runs AS r JOIN "{schema}".jobs AS j ON j.id = r.job_id
    WHERE r.runs > 1
)
SELECT count(*) AS jobs_run_twice,
       coalesce(sum(runs - 1), 0) AS extra_runs,
       coalesce(sum(runs - attempts_seen), 0) AS extra_runs_of_a_lost_claim,
       count(*) FILTER (WHERE reaped) AS jobs_reaped,
       count(*) FILTER (WHERE jsonb_path_exists(
           errors, '$[*] ? (@.type != "LeaseExpired")')) AS jobs_with_a_handler_error,
       count(*) FILTER (
           WHERE runs - 1 > (runs - attempts_seen) + jsonb_array_length(errors)
       ) AS unexplained
FROM repeated
"""


@dataclass
class FailoverReport:
    """What one failover run measured."""

    replication: str
    jobs: int
    acknowledged_enqueues: int
    acknowledged_but_lost: int
    failover_seconds: float
    recovery_seconds: float
    done: int
    not_done: int
    effects_lost: int
    duplicates: dict[str, int]
    worker_pids_before: set[int]
    worker_pids_after: set[int]
    supervisor_restarts: int
    leader_before: str
    leader_after: str

    def table(self) -> str:
        rows = [
            ("replication", self.replication),
            ("jobs intended", self.jobs),
            ("enqueues acknowledged", self.acknowledged_enqueues),
            ("acknowledged but missing after failover", self.acknowledged_but_lost),
            ("SIGKILL to promoted standby (s)", f"{self.failover_seconds:.1f}"),
            ("SIGKILL to every job done (s)", f"{self.recovery_seconds:.1f}"),
            ("jobs done", self.done),
            ("jobs not done", self.not_done),
            ("done jobs with no 'end' effect (effect lost)", self.effects_lost),
            *((f"duplicates: {name}", value) for name, value in self.duplicates.items()),
            ("worker processes before / after", f"{len(self.worker_pids_before)} / "
             f"{len(self.worker_pids_after)}"),
            ("worker processes restarted", self.supervisor_restarts),
            ("maintenance leader before (old primary)", self.leader_before),
            ("maintenance leader after (new primary)", self.leader_after),
        ]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def _acknowledged(ack_path: Path) -> dict[int, int]:
    if not ack_path.exists():
        return {}
    pairs = (line.split() for line in ack_path.read_text().splitlines() if line.strip())
    return {int(number): int(job_id) for number, job_id in pairs}


def _leaders(dsn: str) -> list[str]:
    """The sessions that hold the leader's advisory lock, by application_name."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
        return [str(row[0]) for row in conn.execute(
            "SELECT a.application_name FROM pg_locks AS l JOIN pg_stat_activity AS a"
            " USING (pid) WHERE l.locktype = 'advisory' AND l.granted"
            " AND a.application_name LIKE 'pgbaton worker%'")]


def _count(dsn: str, query: str, *params: Any) -> int:
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
            row = conn.execute(query, params).fetchone()
    except psycopg.OperationalError:
        return -1
    assert row is not None
    return int(row[0])


def run_failover(
    pair: ReplicatedPair, schema: str, start_worker: Callable[..., Any], tmp_path: Path,
    *, jobs: int, pause: float, kill_after_done: int,
) -> FailoverReport:
    """Produce `jobs` jobs while workers run them; kill the primary once
    `kill_after_done` are done; promote the standby; wait until every job is done."""
    ack_path = tmp_path / "acknowledged.txt"
    producer_log = (tmp_path / "producer.log").open("wb")
    producer = subprocess.Popen(
        [sys.executable, "-m", "tests.fleet.producer", pair.dsn, schema, str(jobs),
         str(ack_path), str(pause)],
        stdout=producer_log, stderr=subprocess.STDOUT, cwd=ROOT,
    )
    try:
        worker = start_worker("--processes", "2", "--lease", "3", "--poll-interval", "0.2",
                              "--concurrency", "5", "--connect-timeout", "120")
        done_sql = f"SELECT count(*) FROM \"{schema}\".jobs WHERE status = 'done'"
        wait_until(lambda: _count(pair.primary.dsn, done_sql) >= kill_after_done, 120,
                   f"{kill_after_done} jobs done before the failover")
        # Both processes have run jobs before the kill, so that a pid seen only after it
        # means a restarted process, not one that had not yet been handed a job.
        processes_sql = f'SELECT count(DISTINCT worker_pid) FROM "{schema}".effects'
        wait_until(lambda: _count(pair.primary.dsn, processes_sql) >= 2, 120,
                   "both worker processes running jobs before the failover")
        pids_sql = f'SELECT DISTINCT worker_pid FROM "{schema}".effects'
        with pair.primary.connect() as conn:
            before = {int(row[0]) for row in conn.execute(pids_sql)}
            killed_at_row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert killed_at_row is not None
        leaders_before = _leaders(pair.primary.dsn)
        killed_at = time.monotonic()
        failover_seconds = pair.fail_over()
        assert producer.wait(300) == 0, (tmp_path / "producer.log").read_text()
        acknowledged = _acknowledged(ack_path)
        new = pair.standby.dsn
        all_done = (f"SELECT count(*) FROM \"{schema}\".jobs"
                    f" WHERE status <> 'done' AND task = '{TASK}'")
        wait_until(lambda: _count(new, all_done) == 0, 300, "every job done on the new primary")
        recovery_seconds = time.monotonic() - killed_at
        wait_until(lambda: len(_leaders(new)) == 1, 60, "a leader on the new primary")
        leader_after = _leaders(new)[0]
        with psycopg.connect(new, autocommit=True, row_factory=dict_row) as conn:
            # By idempotency key, not by id: after an asynchronous failover the new primary
            # can hand out again an id whose job was lost with the old primary (the sequence's
            # own WAL did not reach the standby either), so a lost job's id may be present.
            present = {str(row["idempotency_key"]) for row in conn.execute(
                f'SELECT idempotency_key FROM "{schema}".jobs WHERE task = %s', (TASK,))}
            counts = conn.execute(
                f"SELECT count(*) FILTER (WHERE status = 'done') AS done,"
                f" count(*) FILTER (WHERE status <> 'done') AS not_done,"
                f" count(*) FILTER (WHERE status = 'done' AND NOT EXISTS ("
                f"   SELECT 1 FROM \"{schema}\".effects AS e"
                f"   WHERE e.job_id = j.id AND e.what = 'end')) AS effects_lost"
                f' FROM "{schema}".jobs AS j WHERE task = %s', (TASK,)).fetchone()
            duplicates = conn.execute(
                DUPLICATES_SQL.format(schema=schema)).fetchone()
            after = {int(row["worker_pid"]) for row in conn.execute(
                f'SELECT DISTINCT worker_pid FROM "{schema}".effects WHERE at > %s',
                killed_at_row)}
        assert counts is not None and duplicates is not None
        log = worker.log()
        return FailoverReport(
            replication="synchronous" if pair.synchronous else "asynchronous",
            jobs=jobs,
            acknowledged_enqueues=len(acknowledged),
            acknowledged_but_lost=sum(idempotency_key(number) not in present
                                      for number in acknowledged),
            failover_seconds=failover_seconds,
            recovery_seconds=recovery_seconds,
            done=int(counts["done"]),
            not_done=int(counts["not_done"]),
            effects_lost=int(counts["effects_lost"]),
            duplicates={name: int(value) for name, value in duplicates.items()},
            worker_pids_before=before,
            worker_pids_after=after,
            supervisor_restarts=log.count("restarted worker process"),
            leader_before=", ".join(leaders_before) or "none",
            leader_after=leader_after,
        )
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait(10)
        producer_log.close()
