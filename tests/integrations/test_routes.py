"""One App, queues routed to two databases: jobs land in their queue's database, a
worker works one database, and bad routes are refused (docs/explanation/scaling.md)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pgbaton
from pgbaton.testing import inline
from pgbaton.worker import Worker, WorkerConfig
from tests.cli.cli_helpers import clean_env
from tests.cli.cli_helpers import pgbaton as run_pgbaton

DEADLINE_SECONDS = 60

APP_SOURCE = '''
import pgbaton

app = pgbaton.App({dsn!r}, schema={schema!r})
app.route("reports", {reports_dsn!r})


@app.task(queue="reports")
def make_report(n: int) -> None:
    return None


@app.task
def send(n: int) -> None:
    return None


@app.task(queue="reports")
def chain(n: int) -> None:
    send.defer(n=n)


@app.periodic("* * * * * *", queue="reports")
def tick() -> None:
    return None


@app.periodic("* * * * * *")
def tock() -> None:
    return None
'''


@pytest.fixture
def reports_dsn(server_dsn: str) -> Iterator[str]:
    """A second database on the server under test, made for this test and dropped."""
    name = f"pgbaton_routes_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    yield make_conninfo(server_dsn, dbname=name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


@pytest.fixture
def app_module(tmp_path: Path, dsn: str, schema: str, reports_dsn: str) -> Iterator[Any]:
    """The App of APP_SOURCE, written as a module a worker process can load, with both
    databases migrated."""
    (tmp_path / "routed_app.py").write_text(
        APP_SOURCE.format(dsn=dsn, schema=schema, reports_dsn=reports_dsn)
    )
    sys.path.insert(0, str(tmp_path))
    try:
        module = __import__("routed_app")
        for each in (dsn, reports_dsn):
            with pgbaton.Queue(each, schema=schema) as queue:
                queue.migrate()
        yield module
    finally:
        sys.path.remove(str(tmp_path))
        module = sys.modules.pop("routed_app", None)
        if module is not None:
            module.app.queue.close()
            module.app.queue_for("reports").close()


def jobs_in(dsn: str, schema: str) -> list[tuple[str, str, str]]:
    """(task, queue, status) of every job in that database's schema, by id."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            f'SELECT task, queue, status FROM "{schema}".jobs ORDER BY id'  # type: ignore[arg-type]
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def test_each_enqueue_lands_in_its_queues_database(app_module, dsn, schema, reports_dsn):
    """defer, an idempotent enqueue, a queue chosen per job and enqueue_many write to the
    routed queue's database; other queues stay in the App's own; conn= wins."""
    app, make_report, send = app_module.app, app_module.make_report, app_module.send
    make_report.defer(n=1)
    first = make_report.using(idempotency_key="r-2").defer(n=2)
    assert make_report.using(idempotency_key="r-2").defer(n=2) == first
    send.using(queue="reports").defer(n=3)
    send.defer(n=4)
    app.enqueue_many([{"task": "make_report", "args": {"n": 5}, "queue": "reports"}] * 2)
    app.enqueue_many([{"task": "send", "args": {"n": 6}}])
    with psycopg.connect(dsn) as conn:  # the caller's transaction decides, routed or not
        make_report.using(conn=conn).defer(n=7)

    assert jobs_in(reports_dsn, schema) == [
        ("make_report", "reports", "pending"), ("make_report", "reports", "pending"),
        ("send", "reports", "pending"),
        ("make_report", "reports", "pending"), ("make_report", "reports", "pending"),
    ]
    assert jobs_in(dsn, schema) == [
        ("send", "default", "pending"), ("send", "default", "pending"),
        ("make_report", "reports", "pending"),
    ]


def test_async_enqueues_are_routed_too(app_module, dsn, schema, reports_dsn):
    """defer_async and enqueue_many_async write to the routed database."""
    app, make_report, send = app_module.app, app_module.make_report, app_module.send

    async def enqueue() -> None:
        try:
            await make_report.defer_async(n=1)
            await send.defer_async(n=2)
            await app.enqueue_many_async([{"task": "make_report", "args": {"n": 3},
                                           "queue": "reports"}])
        finally:
            await app.async_queue.close()
            await app.async_queue_for("reports").close()

    asyncio.run(enqueue())
    assert [j[0] for j in jobs_in(reports_dsn, schema)] == ["make_report", "make_report"]
    assert [j[0] for j in jobs_in(dsn, schema)] == ["send"]


def test_enqueue_many_over_two_databases_writes_nothing(app_module, dsn, schema, reports_dsn):
    """Jobs (or a batch callback) of two databases in one call are refused in one line
    naming the queues, and neither database gets a job."""
    app = app_module.app
    mixed = [{"task": "send", "args": {"n": 1}},
             {"task": "make_report", "args": {"n": 2}, "queue": "reports"}]
    with pytest.raises(pgbaton.InvalidArgument) as refused:
        app.enqueue_many(mixed)
    message = str(refused.value)
    assert "'default' in the App's own database" in message and "'reports' in" in message
    assert "nothing was written" in message and "\n" not in message
    callback = pgbaton.Batch(on_finish=pgbaton.Callback("send", queue="default"))
    with pytest.raises(pgbaton.InvalidArgument, match="routed to two"):
        app.enqueue_many(mixed[1:], batch=callback)
    with pytest.raises(pgbaton.InvalidArgument, match="routed to two"):
        asyncio.run(app.enqueue_many_async(mixed))
    assert jobs_in(dsn, schema) == [] and jobs_in(reports_dsn, schema) == []


def test_inline_mode_runs_routed_jobs_without_a_database(app_module, dsn, schema,
                                                         reports_dsn):
    """inline() takes the jobs of routed queues as well: nothing reaches either database."""
    with inline(app_module.app) as ran:
        app_module.make_report.defer(n=1)
    assert len(ran.of("make_report")) == 1
    assert jobs_in(reports_dsn, schema) == [] and jobs_in(dsn, schema) == []


def test_a_worker_works_the_database_of_its_queues(app_module, dsn, reports_dsn):
    """WorkerConfig(queues=...) picks the queues' database; none means the App's own;
    config.dsn wins; queues of two databases are refused, naming them."""
    app = app_module.app
    assert Worker(app, WorkerConfig(queues=["reports"])).queue.dsn.startswith(reports_dsn)
    assert "pgbaton_routes_" not in Worker(app, WorkerConfig()).queue.dsn
    assert "pgbaton_routes_" not in Worker(
        app, WorkerConfig(queues=["reports"], dsn=dsn)
    ).queue.dsn
    with pytest.raises(pgbaton.ConfigurationError) as refused:
        Worker(app, WorkerConfig(queues=["default", "reports"]))
    message = str(refused.value)
    assert "'default' in the App's own database" in message and "'reports' in" in message
    assert "one worker per database" in message


def test_a_routed_worker_process_drains_only_its_database(app_module, tmp_path, dsn,
                                                          schema, reports_dsn):
    """`pgbaton worker --queues reports` (no --dsn) drains the reports database, runs
    its periodic task there, and leaves the App's own database alone, even a reports
    job written there through conn=."""
    app, make_report, send = app_module.app, app_module.make_report, app_module.send
    for n in range(20):
        make_report.defer(n=n)
        send.defer(n=n)
    with psycopg.connect(dsn) as conn:
        make_report.using(conn=conn).defer(n=99)
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "pgbaton", "worker", "routed_app:app",
             "--queues", "reports", "--poll-interval", "0.2"],
            cwd=tmp_path, env=clean_env(), stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not _drained_with_a_tick(reports_dsn, schema):
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=DEADLINE_SECONDS) == 0, log.read_text()

    with psycopg.connect(reports_dsn) as conn:
        counts = dict(conn.execute(
            f'SELECT task, count(*) FROM "{schema}".jobs'  # type: ignore[arg-type]
            " WHERE status = 'done' GROUP BY task"
        ).fetchall())
        assert counts["make_report"] == 20 and counts["tick"] >= 1
        # The leader may have scheduled the next second's tick as the worker stopped:
        # that one is left pending. Nothing else may be left undone, nor a tick running.
        assert conn.execute(
            f'SELECT count(*) FROM "{schema}".jobs'  # type: ignore[arg-type]
            " WHERE task IN ('send', 'tock')"
            " OR (task = 'tick' AND status NOT IN ('done', 'pending'))"
            " OR (task <> 'tick' AND status <> 'done')"
        ).fetchone() == (0,)
    own = jobs_in(dsn, schema)
    assert sorted(set(own)) == [("make_report", "reports", "pending"),
                                ("send", "default", "pending")]
    assert len(own) == 21  # nothing claimed, no periodic job scheduled here
    app.queue.close()


def _drained_with_a_tick(reports_dsn: str, schema: str) -> bool:
    with psycopg.connect(reports_dsn) as conn:
        row = conn.execute(
            f"SELECT count(*) FILTER (WHERE task = 'make_report' AND status = 'done'),"  # type: ignore[arg-type]
            f" count(*) FILTER (WHERE task = 'tick' AND status = 'done')"
            f' FROM "{schema}".jobs'
        ).fetchone()
    return row is not None and row[0] == 20 and row[1] >= 1


def test_worker_command_refuses_queues_of_two_databases(app_module, tmp_path):
    """`pgbaton worker --queues default,reports` is one line naming both, exit 1."""
    result = run_pgbaton("worker", "routed_app:app", "--queues", "default,reports",
                         env=clean_env(), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "'default' in the App's own database" in result.stderr
    assert "'reports' in" in result.stderr and "one worker per database" in result.stderr


def test_migrate_with_the_app_migrates_every_database(tmp_path, server_dsn, reports_dsn,
                                                      schema):
    """`pgbaton migrate --app` brings the App's own database and each routed one up to
    date, and says which is which."""
    (tmp_path / "fresh_app.py").write_text(
        "import pgbaton\n"
        f"app = pgbaton.App({server_dsn!r}, schema={schema!r})\n"
        f"app.route('reports', {reports_dsn!r})\n"
        f"app.route('exports', {reports_dsn!r})\n"
    )
    result = run_pgbaton("migrate", "--app", "fresh_app:app", env=clean_env(), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all("now at version" in line for line in lines)
    assert "pgbaton_routes_" in lines[1] and "pgbaton_routes_" not in lines[0]
    for each in (server_dsn, reports_dsn):
        with pgbaton.Queue(each, schema=schema) as queue:
            assert queue.schema_version() > 0


@pytest.mark.parametrize(("queue", "dsn", "expected"), [
    ("", "postgresql:///elsewhere", "a route's queue must be a non-empty string, got ''"),
    (7, "postgresql:///elsewhere", "a route's queue must be a non-empty string"),
    ("reports", 5432, "the route of queue 'reports' needs a DSN (a non-empty string), got"),
    ("reports", "  ", "the route of queue 'reports' needs a DSN"),
    ("reports", "dbname=x port", "the DSN from the route of queue 'reports'"),
])
def test_bad_routes_are_refused(queue, dsn, expected):
    """A route needs a queue name and a DSN libpq can parse: one line says which is wrong,
    and no route is added."""
    app = pgbaton.App("postgresql://u@127.0.0.1/own")
    with pytest.raises((pgbaton.InvalidArgument, pgbaton.ConfigurationError)) as refused:
        app.route(queue, dsn)
    assert "\n" not in str(refused.value) and expected in str(refused.value)
    assert app.routed_dsns() == []


def test_a_route_to_the_apps_own_database_or_a_second_route_is_refused():
    """Routing to the App's own database (however the DSN is spelled) is refused, and so
    is routing one queue twice; the first route stays."""
    app = pgbaton.App("postgresql://u:secret@127.0.0.1:5432/own")
    with pytest.raises(pgbaton.InvalidArgument, match="names the App's own database") as own:
        app.route("reports", "host=127.0.0.1 port=5432 user=u password=secret dbname=own "
                             "application_name=reports")
    assert "secret" not in str(own.value)
    app.route("reports", "postgresql://u@127.0.0.1:5432/analytics")
    with pytest.raises(pgbaton.InvalidArgument, match="queue 'reports' is already routed"):
        app.route("reports", "postgresql://u@127.0.0.1:5432/other")
    assert app.route_of("reports") == "postgresql://u@127.0.0.1:5432/analytics"
    assert app.route_of("default") is None


def test_testing_helpers_look_in_the_routed_database(app_module, dsn, schema, reports_dsn):
    """assert_enqueued finds a routed task's jobs in its queue's database, and
    drain(app, "reports") runs them there."""
    from pgbaton.testing import assert_enqueued, drain, refute_enqueued

    app, make_report, send = app_module.app, app_module.make_report, app_module.send
    make_report.defer(n=1)
    send.defer(n=2)
    assert_enqueued(make_report, args={"n": 1}, count=1)
    assert_enqueued("make_report", queue="reports", app=app, count=1)
    assert_enqueued(send, args={"n": 2}, count=1)
    ran = drain(app, "reports")
    assert [(r.task, r.status) for r in ran] == [("make_report", "done")]
    refute_enqueued(make_report)
    assert jobs_in(dsn, schema) == [("send", "default", "pending")]


def test_dsn_wins_and_handlers_still_enqueue_into_the_apps_database(
    app_module, tmp_path, dsn, schema, reports_dsn,
):
    """`pgbaton worker --queues reports --dsn <reports> --processes 2` works the DSN
    given, and a handler's enqueue of a default-queue task lands in the App's own
    database, not in the one the worker works."""
    for n in range(6):
        app_module.chain.defer(n=n)
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "pgbaton", "worker", "routed_app:app", "--queues",
             "reports", "--dsn", reports_dsn, "--processes", "2", "--poll-interval", "0.2",
             "--no-maintenance"],
            cwd=tmp_path, env=clean_env(), stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while len(jobs_in(dsn, schema)) < 6:
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=DEADLINE_SECONDS) == 0, log.read_text()
    assert jobs_in(dsn, schema) == [("send", "default", "pending")] * 6
    assert set(jobs_in(reports_dsn, schema)) == {("chain", "reports", "done")}


def test_a_malformed_queue_is_refused_as_without_routes(app_module):
    """A queue that is no string is still InvalidArgument naming the queue, routed App
    or not."""
    with pytest.raises(pgbaton.InvalidArgument, match="queue"):
        app_module.make_report.using(queue=["reports"]).defer(n=1)
    with pytest.raises(pgbaton.InvalidArgument, match="queue"):
        app_module.app.enqueue_many([{"task": "send", "queue": ["reports"]}])
