"""The worker's parts are supervised, its process supervisor restarts what dies, and a
stop signal is obeyed however it arrives."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import psycopg
import psycopg.conninfo
import pytest

import pgbaton
from pgbaton.worker import Worker, WorkerConfig
from pgbaton.worker.processes import hand_settings
from pgbaton.worker.supervisor import Supervisor
from tests import app_under_test as tasks
from tests.proxy import PausableProxy
from tests.worker.processes.test_hostile import overlapping_attempts
from tests.worker_processes import scalar, wait_until


async def test_a_part_that_keeps_failing_is_given_up():
    """Restarted with backoff while it fails, then given up once past the limit."""
    failures: list[str] = []
    given_up = asyncio.Event()
    supervisor = Supervisor(
        failure_limit=3, failure_window=60,
        on_failure=lambda name, error: failures.append(f"{name}: {error}"),
        on_give_up=lambda name, error: given_up.set(),
    )

    async def broken() -> None:
        raise RuntimeError("broken part")

    supervisor.start("broken", broken)
    await asyncio.wait_for(given_up.wait(), 10)
    assert failures == ["broken: broken part"] * 3
    await supervisor.stop()


async def test_a_part_that_recovers_is_kept(caplog):
    """A part that fails twice and then runs is restarted each time and stays up."""
    runs = 0
    running = asyncio.Event()
    supervisor = Supervisor(failure_limit=5, failure_window=60,
                            on_failure=lambda *_: None, on_give_up=lambda *_: None)

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs <= 2:
            raise psycopg.errors.UndefinedColumn("column does not exist")
        running.set()
        await asyncio.sleep(3600)

    supervisor.start("flaky", flaky)
    await asyncio.wait_for(running.wait(), 10)
    assert runs == 3
    assert caplog.text.count("worker part 'flaky' failed") == 2
    assert "Traceback" in caplog.text or any(r.exc_info for r in caplog.records)
    await supervisor.stop()


async def test_worker_whose_completer_keeps_failing_releases_and_exits_1(
    dsn, app_schema, db
):
    """A statement that can never succeed (a column renamed under the worker) fails the
    completer again and again: the worker gives up, hands its jobs back and returns 1,
    rather than holding them while it looks alive."""
    app = pgbaton.App(dsn, schema=app_schema)
    started = asyncio.Event()

    @app.task
    async def quick() -> str:
        started.set()
        return "done"

    @app.task
    async def slow() -> None:
        await asyncio.sleep(3600)

    slow.enqueue()
    db.execute("ALTER TABLE jobs RENAME COLUMN result TO result_renamed")
    quick.enqueue()
    config = WorkerConfig(lease=30, concurrency=4, maintenance=False, poll_interval=0.2,
                          part_failure_limit=3, part_failure_window=60, shutdown_grace=1)
    status = await asyncio.wait_for(Worker(app, config).run(), 60)
    assert status == 1
    assert started.is_set()
    rows = db.execute("SELECT task, status, attempts FROM jobs ORDER BY id").fetchall()
    assert [(r["task"], r["status"], r["attempts"]) for r in rows] == [
        ("slow", "pending", 0), ("quick", "pending", 0)
    ]


async def test_events_reach_subscribers_and_a_raising_one_breaks_nothing(
    dsn, app_schema, db, caplog
):
    """Subscribers see the life of each job with what an operator needs; one that raises
    is logged once and the others, and the worker, carry on. Middleware wraps every
    handler call, outermost first."""
    app = pgbaton.App(dsn, schema=app_schema)
    seen: list[pgbaton.Event] = []
    order: list[str] = []

    @app.middleware
    async def outer(context, call_next):
        order.append(f"outer:{context.claim.task}")
        return await call_next()

    @app.middleware
    async def inner(context, call_next):
        order.append("inner")
        return await call_next()

    @app.task
    async def fine(n: int) -> int:
        return n

    @app.task(max_attempts=1)
    def broken() -> None:
        raise ValueError("broken <b>[/]</b>")

    def angry(event: pgbaton.Event) -> None:
        raise RuntimeError("subscriber bug")

    app.subscribe(angry)
    app.subscribe(seen.append)
    ids = [fine.enqueue({"n": n}) for n in range(3)]
    failing = broken.enqueue()
    worker = Worker(app, WorkerConfig(maintenance=False, poll_interval=0.1))
    run = asyncio.create_task(worker.run())
    while scalar(db, "SELECT count(*) FROM jobs WHERE status IN ('pending', 'running')"):
        await asyncio.sleep(0.05)
    worker.request_stop()
    assert await asyncio.wait_for(run, 30) == 0
    app.events.flush()
    enqueued = [e for e in seen if e.name == "job.enqueued"]
    assert [(e.job_id, e.task) for e in enqueued] == list(
        zip([*ids, failing], ["fine"] * 3 + ["broken"], strict=True)
    )
    names = [e.name for e in seen if e.name != "job.enqueued"]
    assert names[0] == "worker.started" and names[-1] == "worker.stopped"
    for job_id in ids:
        mine = [e for e in seen if e.job_id == job_id]
        assert [e.name for e in mine] == [
            "job.enqueued", "job.claimed", "job.started", "job.succeeded"
        ]
        assert {e.task for e in mine} == {"fine"} and {e.queue for e in mine} == {"default"}
        assert mine[-1].run_time is not None and mine[-1].run_time >= 0
        assert mine[2].queue_time is not None and mine[2].queue_time >= 0
    failed = next(e for e in seen if e.name == "job.failed")
    assert (failed.job_id, failed.error_type, failed.attempt) == (failing, "ValueError", 1)
    assert isinstance(failed.exception, ValueError)
    assert worker.stats["completed"] == 3 and worker.stats["failed"] == 1
    assert seen[-1].detail == dict(worker.stats)
    assert order.count("inner") == 4 and order.index("outer:fine") < order.index("inner")
    complaints = [r for r in caplog.records if r.name == "pgbaton.events"]
    assert len(complaints) == 1 and "angry" in complaints[0].getMessage()


def test_second_stop_signal_ends_a_stuck_worker(start_worker, db, app_schema):
    """A handler blocks the event loop for a minute: the first SIGTERM cannot be acted
    on, the second ends the process anyway."""
    job_id = tasks.blocks_loop.enqueue({"seconds": 60})
    worker = start_worker("--lease", "5", "--no-maintenance", "--shutdown-grace", "30")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM effects WHERE job_id = %s", job_id),
               10, "the blocking job started")
    worker.process.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(15) == 1  # not the minute the handler would take


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                         text=True, check=False).stdout
    return sorted(int(p) for p in out.split())


def test_supervisor_restarts_a_killed_child_and_stops_all_on_one_group_signal(
    start_worker, db, app_schema
):
    """SIGKILL of one child: it is restarted. Then SIGTERM to the whole process group (as
    systemd and Ctrl-C send it): every running job gets the full grace and finishes, and
    the supervisor exits 0."""
    supervisor = start_worker("--processes", "2", "--concurrency", "2", "--no-maintenance",
                              "--shutdown-grace", "30", "--poll-interval", "0.2",
                              new_session=True)
    wait_until(lambda: len(_children(supervisor.pid)) == 2, 30, "two children")
    first = _children(supervisor.pid)
    os.kill(first[0], signal.SIGKILL)
    wait_until(lambda: len(set(_children(supervisor.pid)) - set(first)) == 1, 30,
               "the killed child replaced")
    supervisor.wait_for_log("died with signal 9; restarting it")
    ids = [tasks.work.enqueue({"seconds": 3}) for _ in range(4)]
    wait_until(lambda: scalar(db, "SELECT count(*) FROM effects WHERE what = 'start'") == 4,
               30, "four jobs started on the two children")
    os.killpg(supervisor.pid, signal.SIGTERM)  # its own group: the test is not in it
    assert supervisor.process.wait(30) == 0
    assert scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status = 'done'",
                  ids) == 4


def test_children_do_not_show_the_password(start_worker, db, app_schema, dsn):
    """The DSN reaches the children on stdin: no command line in `ps` holds it."""
    supervisor = start_worker("--processes", "2", "--no-maintenance")
    wait_until(lambda: len(_children(supervisor.pid)) == 2, 30, "two children")
    for pid in _children(supervisor.pid):
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            text = cmdline.read().replace(b"\0", b" ").decode()
        assert "postgresql" not in text and "--dsn" not in text, text


@pytest.mark.slow
def test_supervisor_gives_up_on_a_child_that_keeps_dying(start_worker, db, app_schema):
    """Children that die at once, again and again: the supervisor stops and exits 1."""
    supervisor = start_worker("--processes", "2", "--no-maintenance")
    wait_until(lambda: len(_children(supervisor.pid)) == 2, 30, "two children")
    deadline = time.monotonic() + 60
    while supervisor.process.poll() is None and time.monotonic() < deadline:
        for pid in _children(supervisor.pid):
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    assert supervisor.process.wait(30) == 1
    assert "stopping every worker process" in supervisor.log()


def test_a_child_killed_before_it_reads_its_settings_is_a_crash_not_the_supervisors(caplog):
    """The supervisor writes a child's settings just after starting it; a child killed
    in between must count as a crash of that child, not end the supervisor with a
    BrokenPipeError and no word of why."""
    child = subprocess.Popen(["true"], stdin=subprocess.PIPE)
    child.wait(10)
    with caplog.at_level("WARNING", logger="pgbaton.worker"):
        hand_settings(child, b"{}" * 100_000)  # past the pipe's buffer
    assert f"worker process {child.pid} died before it read its settings" in caplog.text


def test_a_worker_cut_off_from_the_database_fences_itself(
    start_worker, db, app_schema, dsn
):
    """Worker A reaches PostgreSQL through a proxy that goes silent for longer than A's
    lease. A's running handler is told to stop by the end of its lease, before worker B
    (direct, with the reaper) starts the job again; a job A finished during the silence
    is redone by B, and A's late completion of it is refused once the link heals."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    proxy = PausableProxy(info.get("host") or "127.0.0.1", int(info.get("port") or 5432))
    try:
        proxied = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=proxy.port)
        a = start_worker("--lease", "2", "--no-maintenance", "--concurrency", "2",
                         dsn_override=proxied, env_extra={"PGBATON_EFFECTS_DSN": dsn})
        long_job = tasks.long_async.enqueue({"seconds": 6})
        short_job = tasks.long_async.enqueue({"seconds": 1})
        wait_until(lambda: scalar(db, "SELECT count(*) FROM effects WHERE what = 'start'"
                                  " AND worker_pid = %s", a.pid) == 2, 15, "A started both")
        proxy.pause()
        b = start_worker("--lease", "5", "--poll-interval", "0.2")
        wait_until(
            lambda: scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status ="
                           " 'done'", [long_job, short_job]) == 2,
            60, "B finished both jobs",
        )
        fenced = db.execute(
            "SELECT at FROM effects WHERE job_id = %s AND worker_pid = %s"
            " AND what = 'cancelled:fenced'", (long_job, a.pid),
        ).fetchone()
        assert fenced is not None, a.log()
        b_started = scalar(db, "SELECT at FROM effects WHERE job_id = %s AND what = 'start'"
                           " AND worker_pid = %s", long_job, b.pid)
        assert fenced["at"] < b_started  # A had stopped before B began
        assert scalar(db, "SELECT count(*) FROM effects WHERE worker_pid = %s AND what ="
                      " 'end' AND job_id = %s", a.pid, long_job) == 0
        proxy.resume()
        a.wait_for_log(f"job {short_job}: completion refused", timeout=30)
        rows = db.execute("SELECT id, status, worker_id, attempts FROM jobs WHERE id ="
                          " ANY(%s)", ([long_job, short_job],)).fetchall()
        assert all(r["status"] == "done" and f":{b.pid}:" in r["worker_id"] for r in rows)
        assert overlapping_attempts(db) == []
    finally:
        proxy.close()


def test_a_worker_whose_first_sessions_are_cut_mid_statement_waits_and_starts(
    start_worker, dsn, db
):
    """While the worker probes the server and checks the schema, every session it opens
    is terminated (as a server shutting down would): those statements fail with their
    connection lost, not with a refused connection, and the worker retries them as it
    retries an unreachable server, then starts once the server lets it be."""
    import threading

    stop = threading.Event()
    cut: list[int] = []

    def terminate_worker_sessions() -> None:
        with psycopg.connect(dsn, autocommit=True) as admin:
            while not stop.is_set():
                rows = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name LIKE 'pgbaton worker%%' AND pid <> pg_backend_pid()"
                ).fetchall()
                cut.extend(1 for _ in rows)
                time.sleep(0.002)

    terminator = threading.Thread(target=terminate_worker_sessions)
    terminator.start()
    try:
        worker = start_worker("--no-maintenance", "--connect-timeout", "60",
                              wait_for="cannot reach the database yet")
        time.sleep(1.0)  # keep cutting through a few retries
    finally:
        stop.set()
        terminator.join()
    worker.wait_for_log("started:")
    assert cut, "no worker session was cut: the test proved nothing"
    assert worker.process.poll() is None, worker.log()
    assert worker.stop() == 0


def test_a_child_still_starting_when_the_stop_comes_is_stopped_not_crashed() -> None:
    """A graceful stop's SIGTERM can reach a child before it has set its own handler (it
    is still importing): the child ends by the signal's default action, having claimed
    nothing. That is the stop the supervisor asked for, and it exits 0. The children
    here never set a handler, which makes that window the whole of their lives."""
    import threading

    from pgbaton.worker.processes import ProcessSupervisor

    class Unstarted(ProcessSupervisor):
        def _spawn(self, slot: int) -> subprocess.Popen[bytes]:
            return subprocess.Popen(["sleep", "60"], stdin=subprocess.PIPE,
                                    start_new_session=True)

    supervisor = Unstarted("unused:app", "unused", WorkerConfig(processes=2))
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    stop = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    stop.start()
    try:
        assert supervisor.run() == 0
    finally:
        stop.cancel()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert [c.process.returncode for c in supervisor.children] == [-signal.SIGTERM] * 2
