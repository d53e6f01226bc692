"""Behind a real PgBouncer in transaction pooling mode (Debian's, started here on a free
loopback port): the data plane and the worker through the pool, LISTEN and the leader's
lock on a direct session, and clear refusals where the pool would break a promise."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import pgbaton
from pgbaton.errors import ConfigurationError
from pgbaton.pooling import transaction_pool_evidence
from pgbaton.worker import WorkerConfig
from pgbaton.worker.sessions import plan_sessions
from tests.fleet import pgbouncer
from tests.runtime.conftest import ROOT, WorkerProcess, app_schema, start_worker, wait_until

__all__ = ["app_schema", "start_worker"]  # fixtures of the runtime tests, reused

WHY_NOT = pgbouncer.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no PgBouncer: {WHY_NOT}")

LEADER_LOCK = ("SELECT l.pid FROM pg_locks AS l WHERE l.locktype = 'advisory' AND l.granted"
               " AND l.objid::int = hashtext('pgbaton.leader.' || %s)")


@pytest.fixture
def bouncer(server_dsn: str) -> Iterator[pgbouncer.PgBouncer]:
    why_not = pgbouncer.cannot_reach(server_dsn)
    if why_not is not None:
        pytest.skip(f"no PgBouncer in front of this server: {why_not}")
    started = pgbouncer.start(server_dsn, pool_size=4)
    yield started
    started.stop()


def pooled_server_pids(bouncer: pgbouncer.PgBouncer, server_dsn: str) -> set[int]:
    """The server processes behind PgBouncer: every backend whose client is PgBouncer's
    own process (it connects from 127.0.0.1 on a port only it holds)."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid, client_port FROM pg_stat_activity WHERE backend_type = 'client backend'"
        ).fetchall()
    import psutil

    # Its connections to the server: those not on its own listening port.
    bouncer_ports = {c.laddr.port for c in psutil.Process(bouncer.process.pid).net_connections()
                     if c.raddr and c.laddr.port != bouncer.port}
    return {int(pid) for pid, port in rows if port in bouncer_ports}


def test_the_probe_tells_a_transaction_pool_from_a_session(
    bouncer: pgbouncer.PgBouncer, server_dsn: str,
) -> None:
    """A direct connection and PgBouncer in session mode are never taken for a pool; the
    transaction pool is found, with the evidence in one sentence."""
    assert transaction_pool_evidence(server_dsn) is None
    session_pool = pgbouncer.start(server_dsn, pool_size=4, pool_mode="session")
    try:
        assert transaction_pool_evidence(session_pool.dsn) is None
    finally:
        session_pool.stop()
    evidence = transaction_pool_evidence(bouncer.dsn)
    assert evidence is not None and "server process" in evidence
    # Handing out the least recently used server connection instead, or a pool of one
    # (where a pinned transaction makes everyone else wait): found all the same.
    for pool_size, settings in ((4, "server_round_robin = 1"), (1, "")):
        other = pgbouncer.start(server_dsn, pool_size=pool_size, settings=settings)
        try:
            for _ in range(5):
                assert transaction_pool_evidence(other.dsn) is not None, settings
        finally:
            other.stop()


def test_the_data_plane_runs_through_the_pool(
    bouncer: pgbouncer.PgBouncer, queue: pgbaton.Queue, schema: str,
) -> None:
    """Enqueue, claim, heartbeat, complete, fail and the dashboard's reads, each run more
    often than psycopg's prepare threshold, on two interleaving clients of a pool of
    four server connections: with prepare=False none of them finds a statement missing."""
    clients = [pgbaton.Queue(bouncer.dsn, schema=schema, prepare=False) for _ in range(2)]
    try:
        for round_number in range(8):
            for client in clients:
                job_id = client.enqueue("t", {"n": round_number})
                claims = client.claim("pooled", limit=1, lease=30)
                assert [c.id for c in claims] == [job_id]
                assert client.heartbeat(claims, lease=30) == [True]
                assert client.complete(claims[0], result={"n": round_number})
                failing = client.enqueue("t", {}, max_attempts=1)
                (claim,) = client.claim("pooled", limit=1, lease=30)
                assert claim.id == failing
                client.fail(claim, RuntimeError("through the pool"))
                assert client.get(job_id).status == "done"  # type: ignore[union-attr]
                assert client.jobs(status="failed")
                assert {s.queue for s in client.stats()} == {"default"}
    finally:
        for client in clients:
            client.close()
    done = queue.jobs(status="done", limit=100)
    assert len(done) == 16


def test_without_prepare_false_a_pooled_client_loses_its_prepared_statements(
    bouncer: pgbouncer.PgBouncer, schema: str, queue: pgbaton.Queue,
) -> None:
    """Why the worker turns prepare off behind the pool (PgBouncer 1.18 here): psycopg
    prepares a statement on one server connection and runs it on another."""
    if tuple(int(p) for p in pgbouncer.version().split(".")[:2]) >= (1, 21):
        pytest.skip("PgBouncer 1.21+ may keep prepared statements (max_prepared_statements)")
    first = pgbaton.Queue(bouncer.dsn, schema=schema)

    def interleave() -> None:
        with psycopg.connect(bouncer.dsn) as other:
            for _ in range(10):
                first.stats()
                other.execute("SELECT 1")  # a transaction: it holds a server connection
                first.stats()
                other.rollback()

    try:
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):
            interleave()
    finally:
        first.close()


def test_a_pooled_worker_refuses_to_lead_without_a_direct_session(
    bouncer: pgbouncer.PgBouncer, app_schema: str, tmp_path: Any,
) -> None:
    """No --listen-dsn, maintenance on: one line naming --listen-dsn and --no-maintenance,
    exit 1, before any job is touched; a listen DSN that is itself pooled is refused."""
    with pytest.raises(ConfigurationError, match="--listen-dsn"):
        plan_sessions(WorkerConfig(), bouncer.dsn)
    with pytest.raises(ConfigurationError, match="must reach PostgreSQL directly"):
        plan_sessions(WorkerConfig(listen_dsn=bouncer.dsn), bouncer.dsn)
    done = subprocess.run(
        [sys.executable, "-m", "pgbaton", "worker", "tests.runtime.app_under_test:app",
         "--dsn", bouncer.dsn, "--schema", app_schema, "--processes", "2"],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
        env={"PYTHONPATH": str(ROOT), "PGBATON_TEST_SCHEMA": app_schema, "PATH": "/usr/bin"},
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--listen-dsn" in lines[0] and "--no-maintenance" in lines[0], \
        done.stderr


def test_a_pooled_worker_without_a_listen_dsn_polls(
    bouncer: pgbouncer.PgBouncer, queue: pgbaton.Queue, app_schema: str,
    start_worker: Callable[..., WorkerProcess], db: Any,
) -> None:
    """--no-maintenance and no listen DSN: a warning says it polls, and it drains."""
    worker = start_worker("--no-maintenance", "--poll-interval", "0.2",
                          dsn_override=bouncer.dsn)
    assert "no LISTEN" in worker.log()
    queue.enqueue_many([{"task": "work", "args": {}} for _ in range(30)])
    wait_until(lambda: db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'done'"
               " AND task = 'work'")
               .fetchone()["n"] == 30, 60, "30 jobs done by polling")


@pytest.mark.usefixtures("app_schema")
def test_worker_drains_through_the_pool_listens_and_leads_on_the_direct_dsn(
    bouncer: pgbouncer.PgBouncer, server_dsn: str, queue: pgbaton.Queue,
    start_worker: Callable[..., WorkerProcess], db: Any,
) -> None:
    """Two worker processes on each of two supervisors claim, heartbeat and complete
    through the pool; a 30 s poll interval leaves only LISTEN (on the direct DSN) to start
    a new job at once; the leader's lock is held by exactly one session, never one of
    PgBouncer's server connections, and moves when its worker dies."""
    options = ("--processes", "2", "--poll-interval", "30", "--lease", "3",
               "--listen-dsn", server_dsn)
    workers = [start_worker(*options, dsn_override=bouncer.dsn) for _ in range(2)]
    queue.enqueue_many([{"task": "work", "args": {"seconds": 0.01}} for _ in range(300)])
    wait_until(lambda: db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'done'"
               " AND task = 'work'")
               .fetchone()["n"] == 300, 120, "300 jobs done through the pool")
    time.sleep(1.0)  # every worker idle, waiting on its 30 s poll
    woken_at = time.monotonic()
    (job_id,) = queue.enqueue_many([{"task": "work", "args": {}}])
    wait_until(lambda: queue.get(job_id).status == "done",  # type: ignore[union-attr]
               10, "the NOTIFY to wake a worker")
    assert time.monotonic() - woken_at < 10  # far below the 30 s poll

    holders: list[int] = []
    pooled: set[int] = set()
    for _ in range(20):  # sampled while the pool is busy with the effects of a run
        holders = [row["pid"] for row in db.execute(LEADER_LOCK, (queue.schema,))]
        pooled = pooled_server_pids(bouncer, server_dsn)
        assert len(holders) == 1, holders
        assert holders[0] not in pooled
        time.sleep(0.05)
    assert pooled, "PgBouncer held no server connection: nothing was compared"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        leader_name = conn.execute("SELECT application_name FROM pg_stat_activity"
                                   " WHERE pid = %s", (holders[0],)).fetchone()
    assert leader_name is not None and leader_name[0].startswith("pgbaton worker")

    # The leader's worker dies: the other supervisor's processes take the lock over.
    leader_log = [w for w in workers if "now the maintenance leader" in w.log()]
    assert len(leader_log) == 1, [w.log()[-2000:] for w in workers]
    leader_log[0].kill()  # its processes see their supervisor gone and stop
    wait_until(lambda: [r["pid"] for r in db.execute(LEADER_LOCK, (queue.schema,))]
               not in ([], holders), 30, "a new leader")
    new = [row["pid"] for row in db.execute(LEADER_LOCK, (queue.schema,))]
    assert len(new) == 1 and new[0] not in pooled_server_pids(bouncer, server_dsn)


def run_doctor(dsn: str, schema: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "pgbaton", "doctor", "--dsn", dsn, "--schema", schema, "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
    )
    report: dict[str, Any] = json.loads(done.stdout)
    return {f["name"]: f for f in report["findings"]}


def test_the_doctor_names_a_pooled_dsn(
    bouncer: pgbouncer.PgBouncer, server_dsn: str, queue: pgbaton.Queue, db: Any,
) -> None:
    """Through the pool the doctor warns, says what works and what workers need, and
    leaves no statement_timeout behind on PgBouncer's server connections; on the direct
    DSN the same check is ok."""
    pooled = run_doctor(bouncer.dsn, queue.schema)["connection_pooling"]
    assert pooled["status"] == "warn"
    assert "transaction pool" in pooled["summary"]
    assert "--listen-dsn" in pooled["advice"]
    assert any(f"listens on {db.execute('SHOW port').fetchone()['port']}" in line
               for line in pooled["evidence"]), pooled["evidence"]
    with psycopg.connect(bouncer.dsn, autocommit=True) as conn:
        for _ in range(8):  # each statement may land on another of the four
            assert conn.execute("SHOW statement_timeout").fetchone() == ("0",)
    direct = run_doctor(server_dsn, queue.schema)["connection_pooling"]
    assert direct["status"] == "ok"


def test_an_unreachable_listen_dsn_is_one_line_naming_it(app_schema: str, server_dsn: str) -> None:
    """A listen DSN nobody answers: after --connect-timeout, one line that says it was
    the listen DSN, without its password, and exit 1."""
    done = subprocess.run(
        [sys.executable, "-m", "pgbaton", "worker", "tests.runtime.app_under_test:app",
         "--dsn", server_dsn, "--schema", app_schema, "--connect-timeout", "0",
         "--listen-dsn", "postgresql://postgres:hunter2@127.0.0.1:1/test"],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
        env={"PYTHONPATH": str(ROOT), "PGBATON_TEST_SCHEMA": app_schema, "PATH": "/usr/bin"},
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "the listen DSN" in lines[0], done.stderr
    assert "hunter2" not in done.stderr
