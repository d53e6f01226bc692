"""The randomised chaos run: a fleet of worker hosts in network namespaces (each
`pgbaton worker --processes 2`) works N jobs while worker processes are SIGKILLed and
SIGSTOPped (for up to two and a half leases) at random every 0.5 to 3 s, PostgreSQL
crashes and restarts once, and one host is cut off for twice the lease and healed.
Afterwards every invariant is computed in SQL from what the server itself recorded
(chaos_app.py: the ledger of granted and ended claims, and the handlers' runs).

Replay a run with the random state it printed: PGBATON_CHAOS_RANDOM=<number>.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg
from psycopg.rows import dict_row

import pgbaton
from tests.fleet import netns, servers
from tests.worker_processes import ROOT, WorkerProcess

APP_SPEC = "tests.fleet.chaos_app:app"
LEASE = 3.0
# A child slot that dies five times in a minute stops its supervisor (processes.py): the
# run kills at most this many processes of one host per minute.
KILLS_PER_HOST_PER_MINUTE = 3
MEANT_TO_FAIL_EVERY = 100  # one job in this many raises on each of its two attempts

# Every number the run is judged by, from the server's own records.
#
# A claim commits without waiting for its WAL to be flushed (synchronous_commit off,
# docs/explanation/reliability.md), so the crash can take back a claim its worker was
# already told of: the handler runs with a token the server never kept, and the job is
# claimed again. Such a run is recorded after the restart (the handler's insert waits
# for the server); one recorded before the crash would have flushed the claim's WAL with
# its own, so a never-granted token outside the window from the crash to 15 s after the
# restart (the handler's connection timeout, and some) is unexplained.
INVARIANTS_SQL = """
WITH last_grant AS (
    SELECT DISTINCT ON (job_id) job_id, token FROM {s}.ledger
    WHERE event = 'granted' ORDER BY job_id, id DESC
), terminal AS (
    SELECT job_id, event, token FROM {s}.ledger WHERE event IN ('ended:done', 'ended:failed')
), ended AS (
    SELECT job_id, token, event, error FROM {s}.ledger WHERE event LIKE 'ended:%%'
), starts AS (
    SELECT r.job_id, r.token, r.worker_pid,
           (SELECT e.event || coalesce(':' || e.error, '') FROM ended AS e
            WHERE e.job_id = r.job_id AND e.token = r.token) AS how_it_ended,
           NOT EXISTS (SELECT 1 FROM {s}.ledger AS g WHERE g.event = 'granted'
                       AND g.job_id = r.job_id AND g.token = r.token) AS never_granted,
           r.at BETWEEN %(crash_at)s AND %(restarted_at)s::timestamptz + interval '15 s'
               AS after_the_crash
    FROM {s}.runs AS r WHERE r.what = 'start'
)
SELECT
  (SELECT count(*) FROM {s}.jobs WHERE task = 'chaos_work') AS jobs,
  (SELECT count(*) FROM {s}.jobs WHERE task = 'chaos_work' AND status = 'done') AS done,
  (SELECT count(*) FROM {s}.jobs WHERE task = 'chaos_work' AND status = 'failed')
      AS failed,
  (SELECT count(*) FROM {s}.jobs WHERE task = 'chaos_work' AND status = 'failed'
      AND NOT (args ? 'fail')) AS failed_not_meant_to,
  (SELECT count(*) FROM {s}.jobs WHERE task = 'chaos_work' AND status = 'failed'
      AND NOT errors @> '[{{"message": "meant to fail"}}]') AS failed_without_its_reason,
  (SELECT count(*) FROM {s}.jobs WHERE task = 'chaos_work'
      AND status IN ('running', 'pending')) AS not_ended,
  (SELECT count(*) FROM {s}.ledger WHERE event = 'granted') AS claims_granted,
  (SELECT count(*) FROM (SELECT job_id FROM terminal GROUP BY job_id
                         HAVING count(*) <> 1) AS t) AS jobs_not_ended_exactly_once,
  (SELECT count(*) FROM {s}.jobs AS j WHERE task = 'chaos_work'
      AND NOT EXISTS (SELECT 1 FROM terminal AS t WHERE t.job_id = j.id))
      AS jobs_with_no_terminal_record,
  (SELECT count(*) FROM terminal AS t JOIN last_grant AS l USING (job_id)
      WHERE t.token <> l.token) AS ends_accepted_from_a_token_not_the_last,
  (SELECT count(*) FROM {s}.jobs AS j JOIN terminal AS t ON t.job_id = j.id
      WHERE t.event = 'ended:done' AND j.result ->> 'token' IS DISTINCT FROM t.token::text)
      AS results_not_from_the_completing_token,
  (SELECT count(*) FROM starts WHERE never_granted AND after_the_crash)
      AS runs_of_a_claim_the_crash_lost,
  (SELECT count(*) FROM starts WHERE never_granted AND NOT after_the_crash)
      AS runs_of_a_token_never_granted,
  (SELECT count(*) FROM starts) AS handler_runs,
  (SELECT count(*) FROM starts WHERE how_it_ended LIKE 'ended:pending:LeaseExpired')
      AS reruns_after_an_expired_lease,
  (SELECT count(*) FROM starts WHERE how_it_ended = 'ended:pending')
      AS reruns_after_a_release,
  (SELECT count(*) FROM starts WHERE how_it_ended LIKE 'ended:pending:%%'
      AND how_it_ended <> 'ended:pending:LeaseExpired') AS reruns_after_a_failed_attempt,
  (SELECT count(*) FROM starts WHERE how_it_ended IS NULL
      AND NOT (never_granted AND after_the_crash)) AS runs_unexplained
"""


def _scalar(dsn: str, query: str, *params: Any) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row[0]


def start_host(fleet: netns.Fleet, number: int, database: servers.Server, schema: str,
               log_path: Path, *, concurrency: int = 10) -> WorkerProcess:
    """`pgbaton worker --processes 2` of the chaos app inside host `number`'s namespace."""
    host_dsn = (f"host={fleet.database_address(number)} port={database.port} user=postgres"
                " dbname=postgres connect_timeout=2")
    env = {**os.environ, "PGBATON_DSN": host_dsn, "PGBATON_TEST_SCHEMA": schema,
           "PGBATON_EFFECTS_DSN": database.socket_dsn, "PYTHONPATH": str(ROOT)}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*fleet.exec_prefix(fleet.host(number)), sys.executable, "-m", "pgbaton", "worker",
             APP_SPEC, "--schema", schema, "--processes", "2", "--lease", str(LEASE),
             "--poll-interval", "0.5", "--concurrency", str(concurrency),
             "--connect-timeout", "120"],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
        )
    worker = WorkerProcess(process, log_path)
    worker.wait_for_log("started:", timeout=60)
    return worker


def worker_pids(host: WorkerProcess) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(host.pid).children()]
    except psutil.NoSuchProcess:
        return []


@dataclass
class Chaos:
    """What the run did, and what it still has to undo."""

    rng: random.Random
    sigkill: int = 0
    sigstop: int = 0
    restarts: int = 0
    cuts: int = 0
    kills_at: dict[int, list[float]] = field(default_factory=dict)
    stopped: dict[int, float] = field(default_factory=dict)  # pid: when to SIGCONT
    heal_at: float | None = None
    crash_at: Any = None  # the server's clock just before the crash, and after the restart
    restarted_at: Any = None

    def resume_due(self, now: float, every: bool = False) -> None:
        for pid, due in list(self.stopped.items()):
            if every or now >= due:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                del self.stopped[pid]

    def strike(self, hosts: list[WorkerProcess], now: float, cut_host: int | None) -> None:
        """One random blow: SIGKILL or SIGSTOP a worker process of a random host."""
        number = self.rng.randrange(len(hosts))
        if number + 1 == cut_host:
            return
        pids = [p for p in worker_pids(hosts[number]) if p not in self.stopped]
        if not pids:
            return
        pid = self.rng.choice(pids)
        recent = [t for t in self.kills_at.get(number, []) if t > now - 60]
        # The first blow kills and the second stops, so that a short run has one of each.
        kill = self.sigkill == 0 or (self.sigstop > 0 and self.rng.random() < 0.5)
        if kill and len(recent) < KILLS_PER_HOST_PER_MINUTE:
            self.kills_at[number] = [*recent, now]
            os.kill(pid, signal.SIGKILL)
            self.sigkill += 1
        else:
            os.kill(pid, signal.SIGSTOP)
            self.stopped[pid] = now + self.rng.uniform(0.2, 2.5) * LEASE
            self.sigstop += 1


def enqueue(queue: pgbaton.Queue, jobs: int, rng: random.Random) -> None:
    batch: list[dict[str, Any]] = []
    for number in range(jobs):
        if number % MEANT_TO_FAIL_EVERY == MEANT_TO_FAIL_EVERY - 1:
            batch.append({"task": "chaos_work", "args": {"fail": True}, "max_attempts": 2})
        else:
            batch.append({"task": "chaos_work", "args": {"seconds": rng.choice((0, 0.01, 0.05))}})
        if len(batch) == 5000:
            queue.enqueue_many(batch)
            batch = []
    if batch:
        queue.enqueue_many(batch)


def run(fleet: netns.Fleet, database: servers.Server, schema: str, queue: pgbaton.Queue,
        hosts: list[WorkerProcess], *, jobs: int, random_state: int,
        timeout: float) -> dict[str, Any]:
    """Enqueue `jobs`, strike at once (a kill, then a stop) and then every 0.5 to 3 s
    until all have ended, restart PostgreSQL once a third have ended and cut host 1 off
    once two thirds have, whatever the pace of the machine; the numbers."""
    rng = random.Random(random_state)
    chaos = Chaos(rng)
    began = time.monotonic()
    enqueue(queue, jobs, rng)
    ended_sql = (f'SELECT count(*) FROM "{schema}".jobs WHERE task = \'chaos_work\''
                 " AND status IN ('done', 'failed')")
    next_strike = time.monotonic()  # the first two blows at once: a short run gets both
    ended = 0
    try:
        while True:
            now = time.monotonic()
            chaos.resume_due(now)
            if chaos.heal_at is not None and now >= chaos.heal_at:
                fleet.heal(1)
                chaos.heal_at = None
            with contextlib.suppress(psycopg.OperationalError):  # the server restarts
                ended = int(_scalar(database.socket_dsn, ended_sql))
            if ended >= jobs and chaos.heal_at is None:
                break
            if now - began > timeout:
                raise AssertionError(f"{ended} of {jobs} jobs ended after {timeout:.0f} s")
            if chaos.restarts == 0 and ended >= jobs // 3:
                chaos.crash_at = _scalar(database.socket_dsn, "SELECT clock_timestamp()")
                database.restart()
                chaos.restarted_at = _scalar(database.socket_dsn, "SELECT clock_timestamp()")
                chaos.restarts += 1
            elif chaos.cuts == 0 and ended >= 2 * jobs // 3 and len(hosts) > 1:
                fleet.cut(1)
                chaos.cuts += 1
                chaos.heal_at = now + 2 * LEASE
            elif now >= next_strike and ended < jobs:
                chaos.strike(hosts, now, 1 if chaos.heal_at is not None else None)
                first_two = chaos.sigkill + chaos.sigstop < 2
                next_strike = now + (0.2 if first_two else rng.uniform(0.5, 3))
            time.sleep(0.2)
    finally:
        chaos.resume_due(0, every=True)
        if chaos.heal_at is not None:
            fleet.heal(1)
    seconds = time.monotonic() - began
    with psycopg.connect(database.socket_dsn, autocommit=True, row_factory=dict_row) as conn:
        numbers = conn.execute(INVARIANTS_SQL.format(s=f'"{schema}"'), {
            "crash_at": chaos.crash_at, "restarted_at": chaos.restarted_at}).fetchone()
    assert numbers is not None
    return {
        "random state (PGBATON_CHAOS_RANDOM)": random_state,
        "hosts x worker processes": f"{len(hosts)} x 2",
        "lease (s)": LEASE,
        "seconds, enqueue to the last job ended": round(seconds, 1),
        "SIGKILL of a worker process": chaos.sigkill,
        "SIGSTOP/SIGCONT of a worker process": chaos.sigstop,
        "PostgreSQL crash and restart": chaos.restarts,
        f"host cut off for {2 * LEASE:g} s and healed": chaos.cuts,
        "worker processes restarted by their supervisor": sum(
            h.log().count("restarted worker process") for h in hosts),
        "worker processes that died but were not SIGKILLed": sum(
            h.log().count(" died with ") - h.log().count(" died with signal 9")
            for h in hosts),
        **numbers,
    }
