"""Behind a real PgBouncer in transaction pooling mode (Debian's, started here on a free
loopback port): the data plane and the worker through the pool, LISTEN and the leader's
lock on a direct session, and clear refusals where the pool would break a promise."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import pgbaton
from pgbaton._transient import is_transient
from pgbaton.errors import ConfigurationError, ConnectionFailed
from pgbaton.pooling import transaction_pool_evidence
from pgbaton.worker import WorkerConfig
from pgbaton.worker.sessions import plan_sessions
from tests.fleet import pgbouncer
from tests.worker_processes import ROOT, WorkerProcess, wait_until

WHY_NOT = pgbouncer.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no PgBouncer: {WHY_NOT}")

PGBOUNCER_KEEPS_PREPARED_STATEMENTS = WHY_NOT is None and tuple(
    int(p) for p in pgbouncer.version().split(".")[:2]) >= (1, 21)

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


def test_with_prepare_true_a_pooled_client_loses_its_prepared_statements(
    bouncer: pgbouncer.PgBouncer, schema: str, queue: pgbaton.Queue,
) -> None:
    """Why the worker and the Queue turn prepare off behind the pool (PgBouncer 1.18
    here): psycopg prepares a statement on one server connection and runs it on another."""
    if PGBOUNCER_KEEPS_PREPARED_STATEMENTS:
        pytest.skip("PgBouncer 1.21+ may keep prepared statements (max_prepared_statements)")
    first = pgbaton.Queue(bouncer.dsn, schema=schema, prepare=True)

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


THREADS, CALLS = 4, 60


def marks(thread: int, number: int) -> list[dict[str, int]]:
    return [{"thread": thread, "call": number, "part": part} for part in range(2)]


def one_call(client: pgbaton.Queue, thread: int, number: int) -> None:
    """Call `number` of a thread: enqueues, a batch of two and reads, each kind run far
    more often than psycopg's prepare threshold, each job marked (thread, call, part)."""
    match number % 5:
        case 0:
            client.enqueue("t", marks(thread, number)[0])
        case 1:
            client.enqueue_many([{"task": "t", "args": m} for m in marks(thread, number)])
        case 2:
            client.get(1)
        case 3:
            client.stats()
        case _:
            client.jobs(status="pending", limit=1)


def run_threads(client: pgbaton.Queue) -> list[BaseException]:
    """THREADS threads of CALLS calls each on one queue; every error raised."""
    errors: list[BaseException] = []

    def run(thread: int) -> None:
        for number in range(CALLS):
            try:
                one_call(client, thread, number)
            except Exception as error:
                errors.append(error)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    return errors


def enqueued_once(db: Any) -> None:
    """Every call that enqueues wrote its jobs exactly once: 2 of every 5 calls write
    one and two jobs, so each thread wrote CALLS / 5 * 3 jobs."""
    rows = db.execute(
        "SELECT args->>'thread' AS thread, args->>'call' AS call, args->>'part' AS part,"
        " count(*) AS n FROM jobs GROUP BY 1, 2, 3").fetchall()
    assert all(row["n"] == 1 for row in rows), [r for r in rows if r["n"] != 1]
    assert len(rows) == THREADS * CALLS // 5 * 3


def start_in_front(server_dsn: str, **settings: Any) -> pgbouncer.PgBouncer:
    why_not = pgbouncer.cannot_reach(server_dsn)
    if why_not is not None:
        pytest.skip(f"no PgBouncer in front of this server: {why_not}")
    return pgbouncer.start(server_dsn, **settings)


@pytest.fixture
def small_bouncer(server_dsn: str) -> Iterator[pgbouncer.PgBouncer]:
    """Two server connections for four of the queue's: every call may land elsewhere."""
    started = start_in_front(server_dsn, pool_size=2)
    yield started
    started.stop()


def test_a_queue_finds_the_pool_and_prepares_nothing(
    small_bouncer: pgbouncer.PgBouncer, server_dsn: str, queue: pgbaton.Queue, db: Any,
) -> None:
    """A plain Queue through a transaction pool of two server connections, four threads
    of 60 calls: its probe at open finds the pool, its connections prepare nothing, no
    call fails, and every job is written once. On a direct DSN it keeps preparing."""
    client = pgbaton.Queue(small_bouncer.dsn, schema=queue.schema)
    try:
        errors = run_threads(client)
    finally:
        client.close()
    assert errors == [], f"{len(errors)} errors, such as {errors[0]!r}"
    enqueued_once(db)
    assert client.transaction_pool is not None and client.prepare is False
    queue.stats()
    assert queue.transaction_pool is None and queue.prepare is True


async def test_an_async_queue_finds_the_pool_and_prepares_nothing(
    small_bouncer: pgbouncer.PgBouncer, queue: pgbaton.Queue, db: Any,
) -> None:
    """The same with an AsyncQueue and four tasks of 60 calls each."""
    client = pgbaton.AsyncQueue(small_bouncer.dsn, schema=queue.schema)
    errors: list[BaseException] = []

    async def run(thread: int) -> None:
        for number in range(CALLS):
            try:
                match number % 5:
                    case 0:
                        await client.enqueue("t", marks(thread, number)[0])
                    case 1:
                        await client.enqueue_many(
                            [{"task": "t", "args": m} for m in marks(thread, number)])
                    case 2:
                        await client.get(1)
                    case 3:
                        await client.stats()
                    case _:
                        await client.jobs(status="pending", limit=1)
            except Exception as error:
                errors.append(error)

    try:
        await asyncio.gather(*(run(thread) for thread in range(THREADS)))
    finally:
        await client.close()
    assert errors == [], f"{len(errors)} errors, such as {errors[0]!r}"
    enqueued_once(db)
    assert client.transaction_pool is not None and client.prepare is False


def test_a_session_pool_is_not_taken_for_a_transaction_pool(
    server_dsn: str, queue: pgbaton.Queue,
) -> None:
    """PgBouncer in session mode hands each client a server session of its own: the
    Queue's probe runs (the key PgBouncer gives is its own) and finds no pool."""
    session_pool = start_in_front(server_dsn, pool_size=4, pool_mode="session")
    client = pgbaton.Queue(session_pool.dsn, schema=queue.schema)
    try:
        client.stats()
        assert client.transaction_pool is None and client.prepare is True
    finally:
        client.close()
        session_pool.stop()


def test_a_statement_pool_is_found_and_the_queue_runs_through_it(
    server_dsn: str, queue: pgbaton.Queue, db: Any,
) -> None:
    """PgBouncer in statement mode refuses the probe's transactions: that refusal is
    the evidence (the probe used to raise it, so no Queue could open there), and the
    queue's autocommit statements then run through it, prepared nowhere."""
    statement_pool = start_in_front(server_dsn, pool_size=2, pool_mode="statement")
    client = pgbaton.Queue(statement_pool.dsn, schema=queue.schema)
    try:
        errors = run_threads(client)
        evidence = transaction_pool_evidence(statement_pool.dsn)
    finally:
        client.close()
        statement_pool.stop()
    assert errors == [], f"{len(errors)} errors, such as {errors[0]!r}"
    enqueued_once(db)
    assert "refused a transaction" in (client.transaction_pool or "")
    assert evidence is not None and "statement pooling" in evidence


def test_a_queue_told_to_prepare_through_the_pool_never_reports_a_lost_connection(
    small_bouncer: pgbouncer.PgBouncer, queue: pgbaton.Queue,
) -> None:
    """prepare=True through the pool (as if PgBouncer kept prepared statements): the
    calls that reach another client's statement fail as the server's refusal they are,
    never as ConnectionFailed, never as worth retrying, and say how to fix it."""
    if PGBOUNCER_KEEPS_PREPARED_STATEMENTS:
        pytest.skip("PgBouncer 1.21+ may keep prepared statements (max_prepared_statements)")
    client = pgbaton.Queue(small_bouncer.dsn, schema=queue.schema, prepare=True)
    try:
        errors = run_threads(client)
    finally:
        client.close()
    assert errors, "no statement crossed server connections: nothing was judged"
    assert not [e for e in errors if isinstance(e, ConnectionFailed)], errors[:3]
    assert all(isinstance(e, psycopg.Error) and not is_transient(e) for e in errors)
    assert all("prepare=False" in "".join(getattr(e, "__notes__", ())) for e in errors)


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
        [sys.executable, "-m", "pgbaton", "worker", "tests.app_under_test:app",
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
        [sys.executable, "-m", "pgbaton", "worker", "tests.app_under_test:app",
         "--dsn", server_dsn, "--schema", app_schema, "--connect-timeout", "0",
         "--listen-dsn", "postgresql://postgres:hunter2@127.0.0.1:1/test"],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
        env={"PYTHONPATH": str(ROOT), "PGBATON_TEST_SCHEMA": app_schema, "PATH": "/usr/bin"},
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "the listen DSN" in lines[0], done.stderr
    assert "hunter2" not in done.stderr
